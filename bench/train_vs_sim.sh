#!/usr/bin/env bash
# Measured iteration time of real pipeline training (2 ranks = 2 processes over Gloo/TCP on
# loopback, reference model on CPU) against the simulator's prediction for the same plan fed
# with the measured op times. Target: within 5% on 2 ranks on a 2-core machine (current figures:
# docs/benchmarks.md).
#
#   bazel run -c opt //bench:train_vs_sim -- [ITERATIONS]
#
# Prints one JSON object per schedule (octopipe train --json, plus the schedule name).
set -euo pipefail
bin="${OCTOPIPE:-$(dirname "$0")/../cli/octopipe}"
[ -x "$bin" ] || bin="$(pwd)/cli/octopipe"
iterations="${1:-5}"
model="ref:pattern=M*-EM*-EM*-E,hidden=128,heads=4,ffn=256,experts=4,top_k=2,moe_ffn=128,state=8,expand=2,seq=128,vocab=256,microbatches=8"
for schedule in gpipe 1f1b interleaved zb-h1 zb-h2 zb-v dualpipev; do
  out=$("$bin" train --model="$model" --ranks=2 --iterations="$iterations" \
        --schedule="$schedule" --json)
  echo "{\"schedule\":\"$schedule\",\"result\":$out}"
done
