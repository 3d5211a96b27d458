#!/usr/bin/env bash
# End-to-end: the real `octopipe` binary as a user runs it — exit codes, stderr naming the bad
# flag, stdout tables and JSON, and a trace file written to disk.
set -uo pipefail
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0
check() {  # check NAME EXPECTED_CODE CMD...
  local name="$1" want="$2"; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: exit $got, want $want"; cat "$tmp/out" "$tmp/err"; fail=1
  fi
}
contains() {  # contains NAME FILE TEXT
  grep -qF -- "$3" "$tmp/$2" || { echo "FAIL $1: '$3' not in $2:"; cat "$tmp/$2"; fail=1; }
}

check usage 2 "$bin"
contains usage out "usage: octopipe COMMAND"
check unknown-command 2 "$bin" frobnicate
contains unknown-command err "unknown command 'frobnicate'"
check help 0 "$bin" simulate --help
contains help out "--microbatches"
# Every subcommand's --help lists its flags in snake_case with their defaults.
check plan-help 0 "$bin" plan --help
contains plan-help out "--time_budget NUMBER"
contains plan-help out "(default: 10)"
check train-help 0 "$bin" train --help
contains train-help out "(default: 1f1b)"
check jobs-create-help 0 "$bin" jobs create --help
contains jobs-create-help out "--token_file"
# The old hyphenated spelling still works (hidden alias); a bad value names the flag.
check old-spelling 0 "$bin" plan --model=synthetic:layers=4,f=1,b=1,w=1 \
  --cluster=synthetic:devices=2 --microbatches=4 --time-budget=1 --quiet --json
contains old-spelling out '"feasible":true'
check bad-value 2 "$bin" plan --time_budget=soon
contains bad-value err "--time_budget: expected a finite number, got 'soon'"
check bad-flag 2 "$bin" simulate --schedule=zb-h9
contains bad-flag err "--schedule: unknown schedule 'zb-h9'"
check too-many-devices 2 "$bin" simulate --model=synthetic:layers=2,f=1,b=1,w=1 \
  --cluster=synthetic:devices=4
contains too-many-devices err "--devices"
check table 0 "$bin" simulate --model=synthetic:layers=8,f=1,b=1,w=1 \
  --cluster=synthetic:devices=4 --microbatches=8
contains table out "zb-h2"
check json 0 "$bin" simulate --model=synthetic:layers=4,f=1,b=1,w=1 \
  --cluster=synthetic:devices=4 --microbatches=8 --schedule=zb-h1 --json
contains json out '"iteration_time_s":27'
check trace 0 "$bin" simulate --model=zoo:llama3-8b --cluster=preset:h100-1node \
  --microbatches=16 --schedule=zb-v --trace="$tmp/trace.json"
[ -s "$tmp/trace.json" ] || { echo "FAIL trace: no trace file"; fail=1; }
grep -q '"traceEvents"' "$tmp/trace.json" || { echo "FAIL trace: not a trace"; fail=1; }

check train 0 "$bin" train --model="ref:pattern=M*-E,hidden=16,heads=2,ffn=32,seq=16,vocab=32,microbatches=4" \
  --ranks=2 --iterations=2 --schedule=zb-h1
contains train out "simulator with the measured op times"
check train-json 0 "$bin" train --model="ref:pattern=M*-E,hidden=16,heads=2,ffn=32,seq=16,vocab=32,microbatches=4" \
  --ranks=2 --iterations=1 --transport=inproc --json
contains train-json out '"predicted_iteration_time_s"'
# Without a GPU, NCCL is refused with a clear message (the ranks are shown no GPU, on any host).
check train-nccl 1 env CUDA_VISIBLE_DEVICES= "$bin" train \
  --model="ref:pattern=M*-E,hidden=16,heads=2,ffn=32,seq=16,vocab=32" \
  --ranks=2 --iterations=1 --transport=nccl
contains train-nccl err "needs a GPU"
check train-bad-transport 2 "$bin" train --transport=carrier-pigeon
contains train-bad-transport err "--transport must be gloo, nccl, auto or inproc"

[ "$fail" = 0 ] && echo "all checks passed"
exit "$fail"
