#!/usr/bin/env python3
"""bench/published_runs/run.py: the planner held to published training runs.

For every run of bench/published_runs/*.json whose model OctoPipe can express (a `model_file`
and a layout with EP dividing DP), on the run's cluster (`octopipe_cluster`: its GPU's peak and
memory, nodes of `devices_per_node`, the intra- and inter-node bandwidth per GPU):
  1. `octopipe plan` with the published layout fixed (--pp/--tp/--dp/--ep), the published global
     batch as micro-batches of `micro_batch` (1 where unpublished; larger only if a replica
     would run more than the planner's 4096) and the published recompute (`--recompute=full` or
     `selective` where the run recomputed so, else `none`): the predicted iteration;
  2. the same with the layout free (`--recompute=auto`): the planner's own choice.
Prints one JSON line per run, then a Markdown table: published vs predicted throughput (TFLOP/s
per GPU by the run's own FLOP count per iteration, `derived.flops_per_iteration`; else tokens/s
per GPU where the source gives that, `published.tokens_per_s_per_gpu` or, for a cost figure,
`derived.tokens_per_s_per_gpu`), the error (by the layout's iteration with the DP gradient
all-reduce after the pipeline), and the free layout's predicted gain over the published layout
(by the iterations with the all-reduces overlapped with the backward, as the planner ranks
layouts: `layout.simulated` of `plan --json`; the other figure where either has none). An
FP8 run (`precision` starting with "FP8") is planned with the model's `training.precision` set
to fp8 and the GPU's FP8 peak (`octopipe_cluster.hardware.peak_flops_fp8`);
a selective or full `recompute` as `--recompute=selective|full`, with the modules the run
recomputed (`recompute_modules`, Megatron-Core's names) as the model's
`training.recompute_modules`; a run whose runtime overlapped
the EP all-to-alls with other micro-batches' compute (`layout.ep_comm_overlap`: DualPipe, the
Megatron recipes' A2A overlap) with `--ep_overlap`, its kernels holding `layout.ep_comm_sms`
SMs where the run's recipe sets them (the model's `training.ep_comm_sms`; else the default, 20).
A run with an `excluded` reason (its source says the figure is a software regression, not what
the layout runs at) is planned and printed with the reason, and left out of the summary line's
figures (count, mean, max).

Usage: bazel build -c opt //cli:octopipe && bench/published_runs/run.py [--only=SUBSTRING]
Environment: OCTOPIPE (the binary; default bazel-bin/cli/octopipe), BUDGET (plan seconds per
run, 5), BUDGET_CLOCK (wall, the default, or reads: `plan --budget_clock=reads --threads=1`,
the budget counted in the search's clock reads, so every machine gets the same predictions),
OUT (a directory for the generated cluster files and outputs; default a temp dir), FREE (1, the
default, also plans each run with its layout free; 0 plans only the published layout, for a quick
look at the prediction errors alone).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OCTOPIPE = os.environ.get("OCTOPIPE", os.path.join(ROOT, "bazel-bin", "cli", "octopipe"))
BUDGET = os.environ.get("BUDGET", "5")
BUDGET_CLOCK = os.environ.get("BUDGET_CLOCK", "wall")
if BUDGET_CLOCK not in ("wall", "reads"):
    sys.exit("published_runs: BUDGET_CLOCK must be wall or reads, got %r" % BUDGET_CLOCK)
OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="published-runs-")
FREE = os.environ.get("FREE", "1")
if FREE not in ("0", "1"):
    sys.exit("published_runs: FREE must be 0 or 1, got %r" % FREE)
os.makedirs(OUT, exist_ok=True)
# Link latencies: not in the sources; NVLink/NVSwitch- and InfiniBand-class figures.
INTRA_LATENCY_S, INTER_LATENCY_S = 3e-6, 5e-6


def cluster_file(run):
    c = run["cluster"]["octopipe_cluster"]
    hw = dict(c["hardware"])
    nodes = [{"name": "node%d" % i, "hardware": hw["name"], "num_devices": c["devices_per_node"],
              "intra_node_link": {"bandwidth": c["intra_node_link_bandwidth"],
                                  "latency_s": INTRA_LATENCY_S}}
             for i in range(c["num_nodes"])]
    cluster = {"name": run["name"] + "-cluster", "hardware": [hw], "nodes": nodes,
               "inter_node_link": {"bandwidth": c["inter_node_link_bandwidth"],
                                   "latency_s": INTER_LATENCY_S}}
    path = os.path.join(OUT, run["name"] + ".cluster.json")
    with open(path, "w") as f:
        json.dump(cluster, f)
    return path


# The planner's limit on micro-batches per pipeline (core/limits.h, max_microbatches).
MAX_MICROBATCHES = 4096


def micro_batch(run):
    """The published micro-batch, else 1 — or the smallest size that gives each of the published
    layout's replicas at most MAX_MICROBATCHES micro-batches (the iteration's work is the same)."""
    b = run.get("micro_batch") or 1
    dp = run["layout"]["dp"]
    while run["global_batch"] // b // dp > MAX_MICROBATCHES or run["global_batch"] % b:
        b += 1
    return b


def model_file(run):
    """The run's model file; a copy with training.precision = fp8 for an FP8 run, with
    training.micro_batch_size for a micro-batch above 1, with the run's sequence length where
    the file's differs, with the run's `recompute_modules` (selective recompute of those
    modules), with its `moe_dispatcher` (training.moe_dispatcher) and with the SMs its
    overlapped all-to-alls hold (`layout.ep_comm_sms`: training.ep_comm_sms)."""
    path = os.path.join(ROOT, run["model"]["model_file"])
    fp8 = str(run.get("precision") or "").upper().startswith("FP8")
    modules = run.get("recompute_modules")
    dispatcher = run.get("moe_dispatcher")
    comm_sms = run.get("layout", {}).get("ep_comm_sms")
    with open(path) as f:
        model = json.load(f)
    training = model.setdefault("training", {})
    seq = run["model"].get("seq_len")
    plain = (not fp8 and micro_batch(run) == 1 and not modules and not dispatcher
             and comm_sms is None)
    if plain and (not seq or str(seq) == str(training.get("seq_len"))):
        return path
    if seq:
        training["seq_len"] = str(seq)
    if fp8:
        training["precision"] = "fp8"
    if dispatcher:  # how its MoE tokens reach the experts (the permutation's traffic)
        training["moe_dispatcher"] = dispatcher
    if comm_sms is not None:  # the SMs the recipe gives its overlapped all-to-alls' kernels
        training["ep_comm_sms"] = int(comm_sms)
    if modules:  # what the run's selective recompute recomputed
        training["recompute"] = "selective"
        training["recompute_modules"] = modules
    training["micro_batch_size"] = str(micro_batch(run))
    out = os.path.join(OUT, run["name"] + ".model.json")
    with open(out, "w") as f:
        json.dump(model, f)
    return out


def recompute(run):
    r = str(run.get("recompute") or "")
    return "full" if r.startswith("full") else "selective" if r.startswith("selective") else "none"


def plan(run, cluster, fixed):
    layout = run["layout"]
    micro = micro_batch(run)
    args = [OCTOPIPE, "plan", "--model=" + model_file(run),
            "--cluster=" + cluster, "--microbatches=%d" % (run["global_batch"] // micro),
            "--time-budget=" + BUDGET, "--seed=1", "--vocab_parallel=off", "--json", "--quiet"]
    if BUDGET_CLOCK == "reads":
        args += ["--budget_clock=reads", "--threads=1"]
    if fixed:
        args += ["--pp=%d" % layout["pp"], "--tp=%d" % layout["tp"], "--dp=%d" % layout["dp"],
                 "--ep=%d" % (layout.get("ep") or 1)]
        args.append("--recompute=" + recompute(run))
    else:
        args.append("--recompute=auto")
    if layout.get("ep_comm_overlap"):  # the runtime overlaps the EP all-to-alls (both plans)
        args.append("--ep_overlap")
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode not in (0, 3):
        return {"error": (p.stderr or p.stdout).strip()[-400:]}
    out = json.loads(p.stdout)
    l = out.get("layout", {})
    return {"layout": "PP%s x TP%s x EP%s x DP%s" % (l.get("pp"), l.get("tp"), l.get("ep"),
                                                     l.get("dp")),
            "feasible": out.get("feasible", False),
            # The pipeline, then the DP gradient all-reduce (the search's estimate): compared
            # with the published figure.
            "iteration_s": l.get("iteration_time_s"),
            # With the all-reduces overlapped with the backward, as the planner ranks layouts
            # and the plan file predicts: the free layout's gain.
            "simulated_s": l.get("simulated", {}).get("iteration_time_s"),
            "recompute_stages": sum(1 for s in out.get("plan", {}).get("partition", [])
                                    if s.get("recompute"))}


def runs():
    only = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), "")
    for path in sorted(glob.glob(os.path.join(HERE, "*.json"))):
        table = json.load(open(path))
        for run in table.get("runs", []):
            if only and only not in run["name"]:
                continue
            yield os.path.basename(path), run


def main():
    if not os.access(OCTOPIPE, os.X_OK):
        sys.exit("published_runs: set OCTOPIPE to the octopipe binary (bazel build -c opt //cli:octopipe)")
    rows = []
    for source, run in runs():
        row = {"source": source, "run": run["name"], "gpus": run["cluster"].get("gpus")}
        model_file = run.get("model", {}).get("model_file")
        pub = run.get("published") or {}
        flops = run.get("derived", {}).get("flops_per_iteration")
        tokens_pub = pub.get("tokens_per_s_per_gpu") or run.get("derived", {}).get("tokens_per_s_per_gpu")
        if not model_file or not run.get("cluster", {}).get("octopipe_cluster"):
            row["skipped"] = "no model file or cluster figures"
        elif (run["layout"].get("ep") or 1) > 1 and run["layout"]["dp"] % run["layout"]["ep"]:
            row["skipped"] = "EP does not divide DP (MoE parallel folding: not expressible)"
        elif not (pub.get("tflops_per_gpu") and flops) and not tokens_pub:
            row["skipped"] = "no TFLOP/s figure with a FLOP count per iteration, no tokens/s"
        if "skipped" in row:
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        cluster = cluster_file(run)
        fixed = plan(run, cluster, True)
        free = plan(run, cluster, False) if FREE == "1" else {"layout": "(not planned: FREE=0)"}
        gpus = run["cluster"]["gpus"]
        row.update({"fixed": fixed, "free": free})
        if pub.get("tflops_per_gpu") and flops:
            row.update({"unit": "TFLOP/s/GPU", "published": pub["tflops_per_gpu"]})
            if fixed.get("iteration_s"):
                row["predicted"] = flops / fixed["iteration_s"] / gpus / 1e12
        else:
            seq = run["model"].get("seq_len") or 4096
            row.update({"unit": "tokens/s/GPU", "published": tokens_pub})
            if fixed.get("iteration_s"):
                row["predicted"] = run["global_batch"] * seq / fixed["iteration_s"] / gpus
        if row.get("predicted"):
            row["error"] = row["predicted"] / row["published"] - 1
        if run.get("excluded"):
            row["excluded"] = run["excluded"]
        if fixed.get("iteration_s") and free.get("iteration_s"):
            a, b = fixed.get("simulated_s"), free.get("simulated_s")
            if not (a and b):
                a, b = fixed["iteration_s"], free["iteration_s"]
            row["free_gain"] = a / b - 1
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| run | GPUs | published layout | unit | published | predicted | error | free layout | its gain |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print("| %s | %s | skipped: %s | | | | | | |" % (r["run"], r["gpus"], r["skipped"]))
            continue
        pred = r.get("predicted")
        print("| %s%s | %s | %s | %s | %.0f | %s | %s | %s | %s |" % (
            r["run"], " (excluded: %s)" % r["excluded"].split(":")[0] if "excluded" in r else "",
            r["gpus"], r["fixed"].get("layout", r["fixed"].get("error", "?")),
            r["unit"], r["published"], "%.0f" % pred if pred else "-",
            "%+.1f%%" % (100 * r["error"]) if "error" in r else "-",
            r["free"].get("layout", "?"),
            "%+.1f%%" % (100 * r["free_gain"]) if "free_gain" in r else "-"))
    errors = [abs(r["error"]) for r in rows if "error" in r and "excluded" not in r]
    excluded = sum(1 for r in rows if "excluded" in r)
    if errors:
        print()
        print("runs predicted: %d; within +-10%%: %d; mean |error| %.1f%%, max %.1f%%%s" % (
            len(errors), sum(e <= 0.10 for e in errors), 100 * sum(errors) / len(errors),
            100 * max(errors), "; %d excluded (not counted)" % excluded if excluded else ""))
    print("published_runs: files in " + OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
