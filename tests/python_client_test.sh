#!/usr/bin/env bash
# The Python scheduler client (examples/python/scheduler_client.py) against a real planner
# process: stubs generated now with Debian's protoc and grpc_python_plugin, a job created on a
# 4-node cluster, its first plan watched, node3 reported failed, and the node_failure re-plan
# watched. Needs /usr/bin/python3 with python3-grpcio (tools/setup.sh installs it).
set -uo pipefail
planner="$1"
client="$2"
proto_dir="$(dirname "$3")"   # any file of proto/: its directory is the import root's proto/
models="$(dirname "$4")"
clusters="$(dirname "$5")"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

fail() { echo "FAIL: $*"; [ -f "$tmp/planner.log" ] && tail -n 30 "$tmp/planner.log"; exit 1; }

/usr/bin/python3 -c 'import grpc' || fail "Debian's python3-grpcio is missing"
mkdir -p "$tmp/stubs"
(cd "$proto_dir/.." && protoc -I. --python_out="$tmp/stubs" --grpc_out="$tmp/stubs" \
  --plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin proto/*.proto) ||
  fail "protoc could not generate the Python stubs"

"$planner" --port=0 --port_file="$tmp/port" --metrics_port=-1 --state_dir="$tmp/state" \
  2>"$tmp/planner.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 600); do [ -s "$tmp/port" ] && break; kill -0 $pid || break; sleep 0.1; done
[ -s "$tmp/port" ] || fail "planner did not start"
addr="127.0.0.1:$(head -1 "$tmp/port")"

PYTHONPATH="$tmp/stubs" /usr/bin/python3 "$client" --planner="$addr" \
  --model="$models/llama3-8b.json" --cluster="$clusters/h100-4nodes.json" --devices=16 \
  --microbatches=32 --time_budget_s=1 --fail_node=node3 | tee "$tmp/out"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || fail "client exited $rc"
grep -q '^created job-' "$tmp/out" || fail "no job created"
grep -q '(initial): feasible=True' "$tmp/out" || fail "no feasible initial plan"
grep -q "excludes \['node3'\]" "$tmp/out" || fail "node3 not excluded"
grep -q '(node_failure): feasible=True' "$tmp/out" || fail "no node_failure re-plan"

# A bad request is a clean gRPC error from the client (exit 2), not a traceback.
PYTHONPATH="$tmp/stubs" /usr/bin/python3 "$client" --planner="$addr" \
  --model="$models/llama3-8b.json" --cluster="$clusters/h100-4nodes.json" --devices=16 \
  --fail_node=no-such-node >"$tmp/bad" 2>&1
rc=$?
[ "$rc" -ne 0 ] || fail "unknown node accepted (output: $(cat "$tmp/bad"))"
grep -q Traceback "$tmp/bad" && fail "client crashed: $(cat "$tmp/bad")"
echo "PASS: Python scheduler client created a job, watched v1 and the node_failure re-plan"
