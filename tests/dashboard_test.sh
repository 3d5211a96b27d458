#!/usr/bin/env bash
# Every query of the Grafana dashboard returns data from a real system: the real planner, two
# real octopipe-agent processes ("node-a", "node-b") training a job on the reference model, and a
# real `prometheus` scraping all three every second. Each panel target's PromQL expression is
# asked through Prometheus's HTTP API until it returns at least one series (90 s overall). Needs
# the Debian package `prometheus`.
set -uo pipefail
planner="$1"
agent="$2"
cli="$3"
dashboard="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
deadline=$((SECONDS + 90))
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$tmp"/*.log; do echo "--- $log (last 15 lines)"; tail -n 15 "$log"; done
  exit 1
}
# http_get, free_port, start_prometheus.
source "$(dirname "${BASH_SOURCE[0]}")/prometheus_lib.sh"
wait_file() {  # wait_file FILE PID WHAT
  until [ -s "$1" ]; do
    kill -0 "$2" 2>/dev/null || fail "$3 exited before it was ready"
    [ "$SECONDS" -lt "$deadline" ] || fail "$3 not ready in time"
    sleep 0.1
  done
}

"$planner" --port=0 --port_file="$tmp/planner.port" --metrics_port=0 --state_dir="$tmp/state" \
  --heartbeat_timeout_s=5 --replan_cooldown_s=2 2>"$tmp/planner.log" &
pids+=($!)
wait_file "$tmp/planner.port" "${pids[-1]}" "octopipe-planner"
planner_addr="127.0.0.1:$(sed -n 1p "$tmp/planner.port")"
targets="\"127.0.0.1:$(sed -n 2p "$tmp/planner.port")\""
for node in node-a node-b; do
  "$agent" --node="$node" --planner="$planner_addr" --devices=1 --work_dir="$tmp/$node" \
    --checkpoint_dir="$tmp/ckpt" --metrics_port=0 --port_file="$tmp/$node.port" \
    >"$tmp/$node.log" 2>&1 &
  pids+=($!)
  wait_file "$tmp/$node.port" "${pids[-1]}" "octopipe-agent $node"
  targets="$targets, \"127.0.0.1:$(cut -d' ' -f2 "$tmp/$node.port")\""
done

printf '%s\n' '{"name": "two-nodes", "hardware": [{"name": "cpu", "peak_flops": 1e11,' \
  '"memory_bytes": 8e9, "memory_bandwidth": 1e10}], "nodes": [{"name": "node-a",' \
  '"hardware": "cpu", "num_devices": 1}, {"name": "node-b", "hardware": "cpu",' \
  '"num_devices": 1}], "inter_node_link": {"bandwidth": 1e9, "latency_s": 1e-4}}' \
  >"$tmp/cluster.json"
"$cli" jobs create --planner="$planner_addr" --cluster="$tmp/cluster.json" \
  --model='ref:pattern=M*-E,hidden=32,heads=2,ffn=64,seq=32,vocab=64,microbatches=4' \
  --iterations=1000000 --checkpoint_interval=50 >"$tmp/create.log" 2>&1 ||
  fail "jobs create: $(cat "$tmp/create.log")"

printf '%s\n' 'global:' '  scrape_interval: 1s' '  evaluation_interval: 1s' 'scrape_configs:' \
  '  - job_name: octopipe' '    static_configs:' "      - targets: [$targets]" \
  >"$tmp/prometheus.yml"
start_prometheus "$tmp/prometheus.yml" "$tmp"

# Every target expression of every panel.
mapfile -t exprs < <(/usr/bin/python3 -c '
import json, sys
for p in json.load(open(sys.argv[1]))["panels"]:
    for t in p.get("targets", []):
        print(t["expr"])' "$dashboard")
[ "${#exprs[@]}" -ge 10 ] || fail "only ${#exprs[@]} dashboard queries found"
missing=("${exprs[@]}")
while :; do
  still=()
  for e in "${missing[@]}"; do
    body="$(curl -fsS --max-time 5 -G "http://127.0.0.1:$prom_port/api/v1/query" \
      --data-urlencode "query=$e" 2>/dev/null)"
    printf '%s' "$body" | grep -q '"result":\[{' || still+=("$e")
  done
  [ "${#still[@]}" -eq 0 ] && break
  missing=("${still[@]}")
  [ "$SECONDS" -lt "$deadline" ] || fail "no data for:$(printf '\n  %s' "${missing[@]}")"
  sleep 1
done
echo "PASS: all ${#exprs[@]} dashboard queries return data (planner + 2 agents + Prometheus)"
