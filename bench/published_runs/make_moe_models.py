#!/usr/bin/env python3
"""Writes the MoE model files of published runs that examples/models lacks.

For every run in megatron_bridge_moe_h100.json whose model_file is under
bench/published_runs/models/, writes that file from the run's "model" entry: embedding, then per
layer an `attention` layer (GQA: kv_heads, head_dim) and a `moe` layer (routed SwiGLU experts,
top_k, moe_ffn, shared experts), then the `head`. Today: Qwen3-235B-A22B and Qwen3-30B-A3B
(dims from Megatron Bridge's Qwen3MoEModelProvider* classes, as the runs' model_file_notes say).

The files are the protobuf JSON form of `octopipe.proto.Model` written as core/convert.cc
ProtoToJson writes them (see make_gpt_models.py). The `training` section is the run's published
setting where OctoPipe can express it: sequence length, micro-batch, micro-batches per replica,
TP, no recomputation, the distributed optimizer as zero_degree = DP. Not the EP degree: the
planner would keep it for the free layout (run.py passes the published one with --ep). Precision
is bf16 here; run.py plans an FP8 run with a copy whose training.precision is fp8.

Usage:  python3 bench/published_runs/make_moe_models.py [--check]
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TABLES = ["megatron_bridge_moe_h100.json"]

sys.path.insert(0, HERE)
from make_gpt_models import dims  # noqa: E402  (same field order and formatting)


def model_for(run, source_title):
    m, lay = run["model"], run["layout"]
    h, L, vocab = m["hidden"], m["layers"], m["vocab"]
    assert m.get("dense_layers", 0) == 0, "only all-MoE models are generated here"
    name = os.path.basename(m["model_file"])[: -len(".json")]
    layers = [{"name": "embedding", "kind": "embedding", "dims": dims(hidden=h, vocab=vocab)}]
    for i in range(L):
        layers.append({"name": f"L{i}.attention", "kind": "attention",
                       "dims": dims(hidden=h, heads=m["heads"], kv_heads=m["kv_heads"],
                                    head_dim=m["head_dim"])})
        layers.append({"name": f"L{i}.moe", "kind": "moe",
                       "dims": dims(hidden=h, experts=m["experts"], top_k=m["top_k"],
                                    moe_ffn=m["moe_ffn"], shared_experts=m["shared_experts"])})
    layers.append({"name": "head", "kind": "head", "dims": dims(hidden=h, vocab=vocab)})
    training = {
        "seq_len": str(m["seq_len"]),
        "micro_batch_size": str(run["micro_batch"]),
        "num_microbatches": str(run["microbatches_per_replica"]),
        "precision": "bf16",
        "tp_degree": str(lay["tp"]),
        "recompute": "none",
        "zero_degree": str(lay["dp"]),
    }
    # No ep_degree: the planner keeps a model's EP degree when `--ep` is not given, which would
    # pin the free layout's EP to the published one; run.py passes --ep for the fixed plan.
    return {
        "name": name,
        "source": (f"{m['model_file_notes']}; training: run {run['name']} of {source_title} "
                   f"(TP {lay['tp']}, PP {lay['pp']}, EP {lay['ep']}, DP {lay['dp']}, "
                   f"micro-batch {run['micro_batch']}, global batch {run['global_batch']}); "
                   "assumptions: bf16 for the published FP8, distributed optimizer over DP"),
        "layers": layers,
        "training": training,
    }


def main(argv):
    check = "--check" in argv[1:]
    stale = []
    for table_name in TABLES:
        with open(os.path.join(HERE, table_name)) as f:
            table = json.load(f)
        for run in table["runs"]:
            path = run["model"].get("model_file") or ""
            if not path.startswith("bench/published_runs/models/"):
                continue
            text = json.dumps(model_for(run, table["source"]["title"]), indent=1,
                              ensure_ascii=False) + "\n"
            full = os.path.join(ROOT, path)
            if check:
                try:
                    with open(full) as f:
                        if f.read() != text:
                            stale.append(path)
                except FileNotFoundError:
                    stale.append(path)
            else:
                with open(full, "w") as f:
                    f.write(text)
                print(f"wrote {path}")
    if stale:
        print("stale (rerun make_moe_models.py):\n  " + "\n  ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
