#!/usr/bin/env bash
# A real Prometheus server scrapes the planner's metrics page: start metrics_demo (which serves
# PlannerMetrics with octopipe_agents_alive = 3 and writes its port to a file), start
# `prometheus` with a generated config scraping it every second, wait for readiness by polling
# (/-/ready, then the query API until the series appears; 60 s overall), and check the value
# Prometheus stored. Both processes are killed on exit. Needs `prometheus` (Debian package
# `prometheus`; CI installs it): missing, the test fails.
set -uo pipefail
demo="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
deadline=$((SECONDS + 60))
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  for log in "$tmp/demo.log" "$tmp/prometheus.log"; do
    [ -f "$log" ] && { echo "--- $log (last 30 lines)"; tail -n 30 "$log"; }
  done
  exit 1
}

command -v prometheus >/dev/null ||
  fail "prometheus not found on PATH ($PATH); install the Debian package 'prometheus'"

# http_get URL: prints the body; non-zero unless the server answered 2xx.
if command -v curl >/dev/null; then
  http_get() { curl -fsS --max-time 5 "$1" 2>/dev/null; }
else
  http_get() {
    python3 - "$1" <<'EOF' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    sys.stdout.write(r.read().decode())
EOF
  }
fi

# free_port: a port nobody listens on right now (bound then released; Prometheus is retried on
# the rare clash below).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- the exporter --------------------------------------------------------------------------
"$demo" --port_file="$tmp/demo.port" >"$tmp/demo.log" 2>&1 &
demo_pid=$!
pids+=("$demo_pid")
until [ -s "$tmp/demo.port" ]; do
  kill -0 "$demo_pid" 2>/dev/null || fail "metrics_demo exited before serving"
  [ "$SECONDS" -lt "$deadline" ] || fail "metrics_demo wrote no port file"
  sleep 0.1
done
demo_port="$(cat "$tmp/demo.port")"
http_get "http://127.0.0.1:$demo_port/metrics" | grep -q '^octopipe_agents_alive 3$' ||
  fail "metrics_demo does not serve octopipe_agents_alive 3 on port $demo_port"

# --- Prometheus ----------------------------------------------------------------------------
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: octopipe_planner
    static_configs:
      - targets: ["127.0.0.1:$demo_port"]
EOF

prom_pid=""
for attempt in 1 2 3; do
  prom_port="$(free_port)" || fail "python3 could not pick a free port"
  prometheus --config.file="$tmp/prometheus.yml" \
    --storage.tsdb.path="$tmp/tsdb-$attempt" \
    --web.listen-address="127.0.0.1:$prom_port" \
    >"$tmp/prometheus.log" 2>&1 &
  prom_pid=$!
  pids+=("$prom_pid")
  # Ready when /-/ready answers 200; a port clash makes the process exit instead.
  until http_get "http://127.0.0.1:$prom_port/-/ready" >/dev/null; do
    kill -0 "$prom_pid" 2>/dev/null || break
    [ "$SECONDS" -lt "$deadline" ] || fail "prometheus not ready on port $prom_port within 60 s"
    sleep 0.2
  done
  kill -0 "$prom_pid" 2>/dev/null && break
  echo "prometheus exited during start (attempt $attempt); retrying on another port"
  prom_pid=""
done
[ -n "$prom_pid" ] || fail "prometheus did not start"

# --- the query -----------------------------------------------------------------------------
# Poll the query API until the first scrape has landed: {"status":"success","data":{...,
# "result":[{"metric":{...},"value":[<time>,"3"]}]}}.
query="http://127.0.0.1:$prom_port/api/v1/query?query=octopipe_agents_alive"
value=""
while [ -z "$value" ]; do
  [ "$SECONDS" -lt "$deadline" ] || {
    echo "targets: $(http_get "http://127.0.0.1:$prom_port/api/v1/targets")"
    fail "octopipe_agents_alive did not appear in Prometheus within 60 s"
  }
  body="$(http_get "$query")"
  value="$(printf '%s' "$body" | grep -o '"value":\[[^]]*\]' | head -n 1 |
    sed -E 's/.*,"([^"]*)"\]$/\1/')"
  [ -n "$value" ] || sleep 0.2
done
[ "$value" = "3" ] || fail "octopipe_agents_alive = '$value' in Prometheus, want 3 (body: $body)"
printf '%s' "$body" | grep -q '"job":"octopipe_planner"' ||
  fail "the series lacks the scrape job label (body: $body)"

# A histogram and a labelled counter made it through too.
body="$(http_get "http://127.0.0.1:$prom_port/api/v1/query?query=octopipe_tuning_seconds_count")"
printf '%s' "$body" | grep -q ',"1"\]' || fail "octopipe_tuning_seconds_count != 1 (body: $body)"
body="$(http_get "http://127.0.0.1:$prom_port/api/v1/query?query=octopipe_replans_total%7Breason%3D%22measured%22%7D")"
printf '%s' "$body" | grep -q ',"1"\]' || fail "replans{reason=measured} != 1 (body: $body)"

echo "PASS: Prometheus scraped octopipe_agents_alive = $value from metrics_demo"
