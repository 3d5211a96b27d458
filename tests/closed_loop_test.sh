#!/usr/bin/env bash
# End to end across the planner and the executor: a job on a real planner process, its plan run
# by `octopipe train` as two Gloo processes, the measured stage times reported back, and the
# planner publishing a re-planned version calibrated on them.
set -uo pipefail
planner="$1"
bin="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"$planner" --port=0 --port_file="$tmp/port" --metrics_port=-1 --state_dir="$tmp/state" \
  --replan_cooldown_s=0 2>"$tmp/planner.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 300); do [ -s "$tmp/port" ] && break; sleep 0.1; done  # readiness: the port file
[ -s "$tmp/port" ] || { echo "FAIL planner did not start"; cat "$tmp/planner.log"; exit 1; }
addr="127.0.0.1:$(head -1 "$tmp/port")"
model="ref:pattern=M*-E,hidden=32,heads=2,ffn=64,seq=32,vocab=64,microbatches=4"
"$bin" jobs create --planner="$addr" --model="$model" --cluster=synthetic:devices=2 \
  --time_budget=2 || exit 1
"$bin" jobs watch --planner="$addr" --job=job-1 --count=1 | tee "$tmp/v1" || exit 1
grep -q "v1 (initial)" "$tmp/v1" || { echo "FAIL no initial plan"; exit 1; }
"$bin" train --planner="$addr" --job=job-1 --model="$model" --iterations=2 | tee "$tmp/train" \
  || exit 1
grep -q "reported to the planner (job-1 v1)" "$tmp/train" || { echo "FAIL no report"; exit 1; }
grep -q "re-planning" "$tmp/train" || { echo "FAIL the planner kept the uncalibrated plan"; exit 1; }
"$bin" jobs watch --planner="$addr" --job=job-1 --after=1 --count=1 | tee "$tmp/v2" || exit 1
grep -q "v2 (measured)" "$tmp/v2" || { echo "FAIL no measured re-plan"; exit 1; }
echo "closed loop: plan -> train -> report -> re-plan"
