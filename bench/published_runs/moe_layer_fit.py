#!/usr/bin/env python3
"""The MoE layer's per-copy traffic of the cost model (core/cost_model.cc, kMoeCopyF/B), refitted.

Source: SonicMoE (Guo et al., arXiv 2512.14080), Figure 14, "Forward & backward TFLOPS for
different MoE kernels on H100" — the bars of the "Megatron" kernel (a whole MoE layer in BF16 on
one H100: router, gather, grouped GEMMs, SwiGLU, scatter), read off the figure (the copy in the
paper's repository, github.com/Dao-AILab/sonic-moe assets/tput.png at 8565e84; the bars carry
no printed values, so each is good to about +-3 TFLOP/s). The figure counts 6*T*k*h*f FLOPs
forward and twice that backward (T tokens, top-k, hidden h, expert width f).

Model (per routed token copy, in seconds):
  F = (6 h f + 2 h E / k) / (P * 0.66) + ((3k + 1) / k * h + a_F h + b_F f) * 2 / M
  B = (12 h f + 4 h E / k) / (P * 0.66) + ((4k + 1) / k * h + a_B h + b_B f) * 2 / M
the expert and router GEMMs at the MLP's efficiency, the permutation as the cost model has it,
and a, b (elements per copy, 2 bytes each) fitted by least squares on the relative error.
P = 989e12 (H100 SXM BF16 dense), M = 3.35e12 * 0.88 (memory_efficiency).

Usage: bench/published_runs/moe_layer_fit.py   (prints JSON: the coefficients and each shape's
modelled rate against the bar's)
"""
import json

# (T, h, f, E, k, forward TFLOP/s, backward TFLOP/s) of the Megatron bars.
BARS = [
    (40960, 768, 256, 128, 8, 104, 138), (40960, 768, 512, 64, 4, 142, 160),
    (40960, 768, 1024, 32, 2, 175, 188),
    (24576, 1536, 256, 128, 8, 119, 130), (24576, 1536, 512, 64, 4, 166, 179),
    (24576, 1536, 1024, 32, 2, 207, 213),
    (32768, 4096, 256, 256, 16, 149, 132), (32768, 4096, 512, 128, 8, 224, 215),
    (32768, 4096, 1024, 64, 4, 290, 264),
    (32768, 4096, 512, 256, 16, 224, 198), (32768, 4096, 1024, 128, 8, 283, 273),
    (32768, 4096, 2048, 64, 4, 339, 313),
]
PEAK, GEMM_EFF, MEM = 989e12, 0.66, 3.35e12 * 0.88


def fixed(h, f, E, k, backward):
    """Seconds per copy of the GEMMs and the permutation (the parts not fitted)."""
    m = 2 if backward else 1
    gemm = m * (6 * h * f + 2 * h * E / k) / (PEAK * GEMM_EFF)
    perm = ((4 * k + 1) if backward else (3 * k + 1)) / k * h * 2 / MEM
    return gemm + perm


def fit(backward):
    """Least squares of (measured - fixed) on [h, f] * 2 / M, weighted by 1 / measured^2."""
    m00 = m01 = m11 = v0 = v1 = 0.0
    for _, h, f, E, k, fwd, bwd in BARS:
        rate = (bwd if backward else fwd) * 1e12
        t = (12 if backward else 6) * h * f / rate
        r = t - fixed(h, f, E, k, backward)
        x0, x1, w = h * 2 / MEM, f * 2 / MEM, 1 / t ** 2
        m00 += w * x0 * x0
        m01 += w * x0 * x1
        m11 += w * x1 * x1
        v0 += w * x0 * r
        v1 += w * x1 * r
    det = m00 * m11 - m01 * m01
    return (v0 * m11 - v1 * m01) / det, (m00 * v1 - m01 * v0) / det


def main():
    coeffs = {"forward": fit(False), "backward": fit(True)}
    rows = []
    for _, h, f, E, k, fwd, bwd in BARS:
        row = {"h": h, "f": f, "experts": E, "top_k": k}
        for name, backward, measured in (("forward", False, fwd), ("backward", True, bwd)):
            a, b = coeffs[name]
            t = fixed(h, f, E, k, backward) + (a * h + b * f) * 2 / MEM
            modelled = (12 if backward else 6) * h * f / t / 1e12
            row[name] = {"bar": measured, "modelled": round(modelled, 1),
                         "error": round(modelled / measured - 1, 3)}
        rows.append(row)
    print(json.dumps({"elements_per_copy": {n: {"per_hidden": round(a, 2),
                                                "per_expert_width": round(b, 2)}
                                            for n, (a, b) in coeffs.items()},
                      "max_abs_error": {n: max(abs(r[n]["error"]) for r in rows)
                                        for n in ("forward", "backward")},
                      "shapes": rows}, indent=1))


if __name__ == "__main__":
    main()
