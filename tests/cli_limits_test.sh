#!/usr/bin/env bash
# The `octopipe` CLI on inputs that used to abort or hang. Each must end with
# a one-line error naming the flag and the limit and a non-zero exit, within a timeout (the
# same limits as the planner service: core/limits.h).
set -uo pipefail
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0
check() {  # check NAME EXPECTED_CODE EXPECTED_TEXT CMD...
  local name="$1" want="$2" text="$3"; shift 3
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: exit $got, want $want"; head -c 2000 "$tmp/err"; fail=1; return
  fi
  if ! grep -qF -- "$text" "$tmp/err"; then
    echo "FAIL $name: '$text' not in stderr:"; head -c 2000 "$tmp/err"; fail=1; return
  fi
  local lines; lines=$(wc -l <"$tmp/err")
  if [ "$lines" != 1 ]; then echo "FAIL $name: $lines lines of error, want 1"; fail=1; fi
}

zoo=(--model=zoo:llama3-8b --cluster=preset:h100-1node)
check microbatches 2 "--microbatches: 2147483647 exceeds the limit of 4096 (max_microbatches)" \
  "$bin" plan "${zoo[@]}" --microbatches=2147483647 --time-budget=1
check microbatches-simulate 2 "--microbatches: 2147483647 exceeds the limit of 4096" \
  "$bin" simulate "${zoo[@]}" --microbatches=2147483647 --schedule=1f1b
check microbatches-2p32 2 "--microbatches: 4294967304 exceeds the limit of 4096" \
  "$bin" simulate "${zoo[@]}" --microbatches=4294967304 --schedule=1f1b
check chunks 2 "--chunks: 1000000 exceeds the limit of 16 (max_chunks)" \
  "$bin" simulate "${zoo[@]}" --chunks=1000000 --schedule=interleaved
check synthetic-layers 2 "layers: 2000000000 exceeds the limit of 4096 (max_layers)" \
  "$bin" simulate --model=synthetic:layers=2000000000,f=1,b=1,w=1 --cluster=synthetic:devices=4
check synthetic-devices 2 "synthetic:devices: 100000000 exceeds the limit of 4096 (max_devices)" \
  "$bin" plan --model=synthetic:layers=8,f=1,b=1,w=1 --cluster=synthetic:devices=100000000
check threads 2 "--threads: 100000 exceeds the limit of 64 (max_threads)" \
  "$bin" plan "${zoo[@]}" --threads=100000 --time-budget=1
check dev-zero 2 "file '/dev/zero': not a regular file" \
  "$bin" plan --model=/dev/zero --cluster=preset:h100-1node

# A 200,000-layer model file with --time-budget=1: refused by the layer limit, not tuned for
# minutes.
big="$tmp/200k-layers.json"
{
  echo '{"name": "big", "training": {"seq_len": 4096, "micro_batch_size": 1, "num_microbatches": 8}, "layers": ['
  awk 'BEGIN { for (i = 0; i < 200000; i++) printf "%s{\"name\": \"L%d\", \"kind\": \"mlp\", \"dims\": {\"hidden\": 4096, \"ffn\": 14336}}\n", (i ? "," : ""), i }'
  echo ']}'
} >"$big"
check big-file 2 "model.layers: 200000 exceeds the limit of 4096 (max_layers)" \
  "$bin" plan --model="$big" --cluster=preset:h100-1node --time-budget=1

[ "$fail" = 0 ] && echo "PASS"
exit "$fail"
