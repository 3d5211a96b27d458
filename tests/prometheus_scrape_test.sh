#!/usr/bin/env bash
# A real Prometheus server scrapes the real planner: start octopipe-planner (ephemeral ports,
# written to --port_file), make one RPC with the `octopipe` CLI (jobs list), hold a few
# half-open connections to /metrics and check that a scrape is still answered at once, then
# start `prometheus` with a generated config scraping the planner every second, wait for
# readiness by polling (/-/ready, then the query API until the series appear; 90 s overall),
# and check the values Prometheus stored. All processes are killed on exit. Needs `prometheus`
# (Debian package `prometheus`; CI installs it): missing, the test fails.
set -uo pipefail
planner="$1"
cli="$2"
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
  for log in "$tmp/planner.log" "$tmp/prometheus.log"; do
    [ -f "$log" ] && { echo "--- $log (last 30 lines)"; tail -n 30 "$log"; }
  done
  exit 1
}

# http_get, free_port, start_prometheus.
source "$(dirname "${BASH_SOURCE[0]}")/prometheus_lib.sh"

# --- the planner ---------------------------------------------------------------------------
# A long request timeout, so a scrape stuck behind the half-open connections below would fail
# the check instead of being served late.
"$planner" --port=0 --metrics_port=0 --port_file="$tmp/planner.port" \
  --state_dir="$tmp/state" --metrics_request_timeout_ms=120000 --log_json \
  >"$tmp/planner.log" 2>&1 &
planner_pid=$!
pids+=("$planner_pid")
until [ -s "$tmp/planner.port" ]; do
  kill -0 "$planner_pid" 2>/dev/null || fail "octopipe-planner exited before serving"
  [ "$SECONDS" -lt "$deadline" ] || fail "octopipe-planner wrote no port file"
  sleep 0.1
done
grpc_port="$(sed -n 1p "$tmp/planner.port")"
metrics_port="$(sed -n 2p "$tmp/planner.port")"
"$cli" jobs list --planner="127.0.0.1:$grpc_port" >"$tmp/cli.log" 2>&1 ||
  fail "octopipe jobs list failed: $(cat "$tmp/cli.log")"
http_get "http://127.0.0.1:$metrics_port/metrics" >"$tmp/page.txt"
page_rc=$?
grep -q '^octopipe_rpcs_total{code="OK",method="ListJobs"} 1$' "$tmp/page.txt" ||
  fail "the planner does not serve octopipe_rpcs_total{ListJobs,OK} 1 on port $metrics_port" \
    "(curl exit $page_rc, $(wc -c <"$tmp/page.txt") bytes; its RPC lines:" \
    "$(grep '^octopipe_rpc' "$tmp/page.txt" | head -20))"

# --- half-open connections do not block a scrape -----------------------------------------
# Four clients connect and send nothing; each holds one of the exposer's worker threads.
python3 - "$metrics_port" "$tmp/halfopen.ready" <<'PY' &
import socket, sys, time
conns = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(4)]
open(sys.argv[2], "w").close()
time.sleep(60)
PY
halfopen_pid=$!
pids+=("$halfopen_pid")
until [ -e "$tmp/halfopen.ready" ]; do
  kill -0 "$halfopen_pid" 2>/dev/null || fail "could not open the half-open connections"
  sleep 0.1
done
start=$SECONDS
http_get "http://127.0.0.1:$metrics_port/metrics" 20 | grep -q '^octopipe_jobs 0$' ||
  fail "/metrics did not answer while 4 half-open connections were held"
echo "scrape with 4 half-open connections took $((SECONDS - start)) s"
kill "$halfopen_pid" 2>/dev/null

# --- Prometheus ----------------------------------------------------------------------------
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: octopipe_planner
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
EOF

start_prometheus "$tmp/prometheus.yml" "$tmp"

# --- the queries ---------------------------------------------------------------------------
# query_value EXPR: the value of the first series EXPR returns, once the first scrape has
# landed: {"status":"success","data":{...,"result":[{"metric":{...},"value":[<time>,"1"]}]}}.
query_value() {
  local url="http://127.0.0.1:$prom_port/api/v1/query?query=$1" value=""
  while [ -z "$value" ]; do
    [ "$SECONDS" -lt "$deadline" ] || {
      echo "targets: $(http_get "http://127.0.0.1:$prom_port/api/v1/targets")" >&2
      fail "$1 did not appear in Prometheus within 90 s"
    }
    body="$(http_get "$url")"
    value="$(printf '%s' "$body" | grep -o '"value":\[[^]]*\]' | head -n 1 |
      sed -E 's/.*,"([^"]*)"\]$/\1/')"
    [ -n "$value" ] || sleep 0.2
  done
  printf '%s' "$value"
}

# The counter of the RPC made above, with its labels and the scrape job's.
rpcs="$(query_value 'octopipe_rpcs_total%7Bmethod%3D%22ListJobs%22%2Ccode%3D%22OK%22%2Cjob%3D%22octopipe_planner%22%7D')"
[ "$rpcs" = "1" ] || fail "octopipe_rpcs_total{ListJobs,OK} = '$rpcs' in Prometheus, want 1"
# Every family the Grafana dashboard reads is there (labelled ones with their known values).
for expr in octopipe_agents_alive octopipe_jobs octopipe_tuning_seconds_count \
  'octopipe_tuning_seconds_bucket%7Ble%3D%2260%22%7D' \
  'octopipe_plans_computed_total%7Bkind%3D%22oneshot%22%7D' \
  'octopipe_replans_total%7Breason%3D%22node_failure%22%7D'; do
  value="$(query_value "$expr")"
  [ "$value" = "0" ] || fail "$expr = '$value' in Prometheus, want 0"
done

echo "PASS: Prometheus scraped the real planner (octopipe_rpcs_total{ListJobs,OK} = $rpcs)"
