#!/usr/bin/env bash
# End to end across the planner and the executor: a job on a real planner process, its plan run
# by `octopipe train` as two Gloo processes, the measured stage times reported back, and the
# planner publishing a re-planned version calibrated on them. Then the same loop for a job whose
# plans split the output layer by vocabulary: the run's S and T passes (every device's) are
# reported, calibrate the head, and the re-planned (still split) version runs too.
set -uo pipefail
planner="$1"
bin="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"$planner" --port=0 --port_file="$tmp/port" --metrics_port=-1 --state_dir="$tmp/state" \
  --replan_cooldown_s=0 --replan_min_gain=0 2>"$tmp/planner.log" &
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

# A heavy head (vocabulary 16384 on hidden 32) split over both devices. No MoE layer: at these
# sizes its per-copy memory traffic, not the head, would bound the pipeline.
vmodel="ref:pattern=M*-M,hidden=32,heads=2,ffn=64,seq=32,vocab=16384,microbatches=4"
split='"vocab_parallel": *true'
"$bin" jobs create --planner="$addr" --model="$vmodel" --cluster=synthetic:devices=2 \
  --time_budget=2 --vocab_parallel=on || exit 1
"$bin" jobs watch --planner="$addr" --job=job-2 --count=1 | tee "$tmp/vp1" || exit 1
grep -q "v1 (initial)" "$tmp/vp1" || { echo "FAIL no initial vocab-parallel plan"; exit 1; }
"$bin" jobs get --planner="$addr" --job=job-2 --json >"$tmp/vp1.json" || exit 1
grep -Eq "$split" "$tmp/vp1.json" || { echo "FAIL v1 does not split the head"; exit 1; }
"$bin" train --planner="$addr" --job=job-2 --model="$vmodel" --iterations=2 --json \
  | tee "$tmp/vtrain" || exit 1
for pass in '[0,"S"' '[1,"S"' '[0,"T"' '[1,"T"'; do
  grep -qF "$pass" "$tmp/vtrain" || { echo "FAIL no measured $pass"; exit 1; }
done
grep -q "reported to the planner (job-2 v1): .*vocabulary passes S/T" "$tmp/vtrain" \
  || { echo "FAIL the planner did not calibrate the vocabulary passes"; exit 1; }
grep -q "re-planning" "$tmp/vtrain" || { echo "FAIL no re-plan of the vocab-parallel job"; exit 1; }
"$bin" jobs watch --planner="$addr" --job=job-2 --after=1 --count=1 | tee "$tmp/vp2" || exit 1
grep -q "v2 (measured)" "$tmp/vp2" || { echo "FAIL no measured re-plan of job-2"; exit 1; }
"$bin" jobs get --planner="$addr" --job=job-2 --json >"$tmp/vp2.json" || exit 1
grep -Eq "$split" "$tmp/vp2.json" || { echo "FAIL v2 does not split the head"; exit 1; }
"$bin" train --planner="$addr" --job=job-2 --model="$vmodel" --iterations=2 | tee "$tmp/vtrain2" \
  || exit 1
grep -q "reported to the planner (job-2 v2)" "$tmp/vtrain2" || { echo "FAIL v2 did not run"; exit 1; }
echo "closed loop, vocabulary parallel: plan -> train (S/T measured) -> report -> re-plan -> train"
