# Shell helpers for the tests that run a real `prometheus` (Debian package): source this file
# after defining `fail MESSAGE` (prints and exits), `deadline` (a $SECONDS value) and the array
# `pids` (killed by the caller's EXIT trap).

# http_get URL [TIMEOUT_S]: prints the body; non-zero unless the server answered 2xx in time.
http_get() { curl -fsS --max-time "${2:-5}" "$1" 2>/dev/null; }

# free_port: a port nobody listens on right now (bound then released; start_prometheus retries
# on the rare clash).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_prometheus CONFIG DIR: starts prometheus on a free loopback port with its storage and log
# under DIR, waits until /-/ready answers (a port clash makes it exit: then another port, up to 3
# tries) and sets prom_port.
start_prometheus() {
  local config="$1" dir="$2" pid="" attempt
  command -v prometheus >/dev/null ||
    fail "prometheus not found on PATH ($PATH); install the Debian package 'prometheus'"
  for attempt in 1 2 3; do
    prom_port="$(free_port)" || fail "python3 could not pick a free port"
    prometheus --config.file="$config" --storage.tsdb.path="$dir/tsdb-$attempt" \
      --web.listen-address="127.0.0.1:$prom_port" >"$dir/prometheus.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    until http_get "http://127.0.0.1:$prom_port/-/ready" >/dev/null; do
      kill -0 "$pid" 2>/dev/null || break
      [ "$SECONDS" -lt "$deadline" ] || fail "prometheus not ready on port $prom_port in time"
      sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && return 0
    echo "prometheus exited during start (attempt $attempt); retrying on another port"
  done
  fail "prometheus did not start"
}
