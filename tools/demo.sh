#!/usr/bin/env bash
# Runs the whole OctoPipe system on this machine and narrates it, one line per event:
#   planner + two worker agents (nodes node-a, node-b, one CPU device each) + Prometheus scraping
#   all three; a training job on a small reference model; plan v1 -> training with the measured
#   bubble -> calibrated re-plan -> `kill -9` of node-b's agent (its ranks die with it) -> re-plan
#   on the devices left -> resume (from the state the survivors saved from memory when they hold
#   every layer, as under data parallelism; else from the last checkpoint) -> node-b's agent
#   restarted -> re-plan onto it -> completed -> the final loss compared with an uninterrupted
#   single-process run. The planner chooses the layout (PP x TP x EP x DP) of every version.
# Ends with a summary table and the Prometheus URL. See --help for the flags; the one-shot
# planning example is tools/plan_demo.sh (or `tools/demo.sh --plan_only [octopipe plan flags]`).
#
# With OCTOPIPE_BIN_DIR set (a directory holding octopipe-planner, octopipe-agent and octopipe,
# e.g. the Bazel-built ones in a test) the set-up and the build are skipped.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
Usage: tools/demo.sh [--keep] [--summary=FILE] [--iterations=N] [--checkpoint_interval=K]
                     [--timeout=SECONDS] [--work_dir=DIR]
       tools/demo.sh --plan_only [octopipe plan flags]   (= tools/plan_demo.sh)

Sets up the machine (tools/setup.sh), builds octopipe-planner, octopipe-agent and octopipe, then
runs the system: planner, two agents (node-a, node-b), Prometheus; trains a job, kills node-b's
agent mid-run, restarts it, and checks the final loss against an uninterrupted run.

  --keep                    leave the services running at the end (prints how to stop them)
  --summary=FILE            write a JSON summary: plan_versions [{version, reason, layout}],
                            lost_node, resumed_from_iteration, recovered_from (peers: the
                            survivors' memory; checkpoint), iterations_lost, final_loss,
                            uninterrupted_final_loss, agent_overhead_ratio, last_plan_switch_s,
                            job_phase and job_progress (the planner's view at the end), ...
  --iterations=N            training iterations of the job (default 1000)
  --checkpoint_interval=K   checkpoint every K iterations (default 5)
  --timeout=SECONDS         give up (and tail the logs) after this long (default 170)
  --work_dir=DIR            logs, state and checkpoints here (default: a fresh mktemp -d)
  --plan_only               run the one-shot planning example instead (tools/plan_demo.sh)
  --help                    this text

Environment: OCTOPIPE_BIN_DIR=DIR uses DIR/{octopipe-planner,octopipe-agent,octopipe} and skips
the set-up and the build.
EOF
}

keep=0 summary="" iterations=1000 ckpt=5 timeout_s=170 work=""
if [ "${1:-}" = --plan_only ]; then shift; exec tools/plan_demo.sh "$@"; fi
for arg in "$@"; do
  case "$arg" in
    --help|-h) usage; exit 0 ;;
    --keep) keep=1 ;;
    --summary=*) summary="${arg#*=}" ;;
    --iterations=*) iterations="${arg#*=}" ;;
    --checkpoint_interval=*) ckpt="${arg#*=}" ;;
    --timeout=*) timeout_s="${arg#*=}" ;;
    --work_dir=*) work="${arg#*=}" ;;
    *) echo "tools/demo.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
for v in iterations:"$iterations" checkpoint_interval:"$ckpt" timeout:"$timeout_s"; do
  [[ "${v#*:}" =~ ^[1-9][0-9]*$ ]] ||
    { echo "tools/demo.sh: --${v%%:*}='${v#*:}' is not a positive integer" >&2; exit 2; }
done
[ "$iterations" -ge $((4 * ckpt)) ] ||
  { echo "tools/demo.sh: --iterations=$iterations must be at least 4 x --checkpoint_interval=$ckpt" >&2; exit 2; }

# --- binaries ------------------------------------------------------------------------------
if [ -n "${OCTOPIPE_BIN_DIR:-}" ]; then
  planner_bin="$OCTOPIPE_BIN_DIR/octopipe-planner"
  agent_bin="$OCTOPIPE_BIN_DIR/octopipe-agent"
  cli_bin="$OCTOPIPE_BIN_DIR/octopipe"
else
  tools/setup.sh || { echo "tools/demo.sh: tools/setup.sh failed" >&2; exit 1; }
  bazel build //planner_service:octopipe-planner //worker_agent:octopipe-agent //cli:octopipe >&2 ||
    { echo "tools/demo.sh: bazel build failed" >&2; exit 1; }
  planner_bin="$PWD/bazel-bin/planner_service/octopipe-planner"
  agent_bin="$PWD/bazel-bin/worker_agent/octopipe-agent"
  cli_bin="$PWD/bazel-bin/cli/octopipe"
fi
for b in "$planner_bin" "$agent_bin" "$cli_bin"; do
  [ -x "$b" ] || { echo "tools/demo.sh: $b is not an executable" >&2; exit 1; }
done
command -v prometheus >/dev/null ||
  { echo "tools/demo.sh: prometheus not on PATH; install the Debian package 'prometheus' (tools/setup.sh does)" >&2; exit 1; }

if [ -z "$work" ]; then work="$(mktemp -d "${TMPDIR:-/tmp}/octopipe-demo.XXXXXX")"; fi
mkdir -p "$work" || exit 1
work="$(cd "$work" && pwd)"
model='ref:pattern=M*-E,hidden=32,heads=2,ffn=64,seq=32,vocab=64,microbatches=4'
start=$SECONDS
deadline=$((SECONDS + timeout_s))
declare -A pid=()

stop_all() {
  for name in "${!pid[@]}"; do kill "${pid[$name]}" 2>/dev/null; done
  for name in "${!pid[@]}"; do wait "${pid[$name]}" 2>/dev/null; done
}
on_exit() {
  if [ "$keep" = 1 ] && [ "${finished:-0}" = 1 ]; then
    echo
    echo "services left running (--keep): planner 127.0.0.1:$grpc_port, Prometheus" \
      "http://127.0.0.1:$prom_port, logs and state in $work; stop them with:"
    echo "  kill ${pid[*]}"
  else
    stop_all
  fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

say() { printf '[%6.1fs] %s\n' "$(awk -v s="$(date +%s.%N)" -v t="$t0" 'BEGIN{print s-t}')" "$*"; }
t0="$(date +%s.%N)"

fail() {
  echo "FAIL: $*" >&2
  for log in "$work"/*.log; do
    [ -f "$log" ] && { echo "--- $log (last 20 lines)" >&2; tail -n 20 "$log" >&2; }
  done
  exit 1
}
check_time() { [ "$SECONDS" -lt "$deadline" ] || fail "timed out after ${timeout_s}s waiting for: $1"; }

if command -v curl >/dev/null; then
  http_get() { curl -fsS --max-time "${2:-5}" "$1" 2>/dev/null; }
else
  http_get() {
    python3 - "$1" "${2:-5}" <<'EOF' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])) as r:
    sys.stdout.write(r.read().decode())
EOF
  }
fi
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# metric URL NAME: the first sample's value of NAME on the /metrics page at URL (empty if none).
metric() { http_get "$1" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 {print $2; exit}'; }

# wait_file FILE PID WHAT: polls until FILE is non-empty; fails if PID exits first.
wait_file() {
  until [ -s "$1" ]; do
    kill -0 "$2" 2>/dev/null || fail "$3 exited before serving (see its log)"
    check_time "$3 to write $1"
    sleep 0.1
  done
}

# --- planner -------------------------------------------------------------------------------
# --replan_cooldown_s=2: calibrated (measured) re-plans from 2 s after the first plan, at most one
# per 2 s (agents follow any sequence of versions to the newest, however close together; every
# version is narrated, from `octopipe jobs watch`).
# Re-plans on node loss and return are not subject to the cooldown. --replan_min_gain=0.01: a
# calibrated plan is adopted when predicted at least 1% faster (if none is, the demo says so and
# goes on).
"$planner_bin" --port=0 --port_file="$work/planner.port" --metrics_port=0 \
  --state_dir="$work/state" --heartbeat_timeout_s=2 --replan_cooldown_s=2 --replan_min_gain=0.01 \
  >"$work/planner.log" 2>&1 &
pid[planner]=$!
wait_file "$work/planner.port" "${pid[planner]}" octopipe-planner
grpc_port="$(sed -n 1p "$work/planner.port")"
planner_metrics="$(sed -n 2p "$work/planner.port")"
planner="127.0.0.1:$grpc_port"
say "planner serving on $planner (metrics :$planner_metrics)"

# --- agents --------------------------------------------------------------------------------
declare -A agent_metrics=()
start_agent() {  # start_agent NODE [METRICS_PORT]: a taken port falls back to an ephemeral one
  local port="${2:-0}"
  while :; do
    rm -f "$work/$1.port"
    "$agent_bin" --node="$1" --planner="$planner" --devices=2 --work_dir="$work/$1" \
      --checkpoint_dir="$work/checkpoints" --metrics_port="$port" --port_file="$work/$1.port" \
      >>"$work/$1.log" 2>&1 &
    pid[$1]=$!
    until [ -s "$work/$1.port" ] || ! kill -0 "${pid[$1]}" 2>/dev/null; do
      check_time "octopipe-agent $1 to write $work/$1.port"
      sleep 0.1
    done
    [ -s "$work/$1.port" ] && break
    [ "$port" != 0 ] || fail "octopipe-agent $1 exited before serving (see its log)"
    port=0
  done
  agent_metrics[$1]="$(awk '{print $2}' "$work/$1.port")"
}
wait_agents_alive() {  # wait_agents_alive N
  until [ "$(metric "http://127.0.0.1:$planner_metrics/metrics" octopipe_agents_alive)" = "$1" ]; do
    check_time "$1 agents alive at the planner"
    sleep 0.2
  done
}
start_agent node-a
start_agent node-b
wait_agents_alive 2
say "agents node-a (metrics :${agent_metrics[node-a]}) and node-b (metrics :${agent_metrics[node-b]}) registered"

# --- Prometheus ----------------------------------------------------------------------------
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: octopipe_planner
    static_configs:
      - targets: ["127.0.0.1:$planner_metrics"]
  - job_name: octopipe_agent
    file_sd_configs:
      - files: ["$work/agent-targets.json"]
EOF
# write_agent_targets: the agents' metrics ports, where Prometheus looks for them (it watches
# the file, so a restarted agent on another port is picked up).
write_agent_targets() {
  printf '[{"targets": ["127.0.0.1:%s", "127.0.0.1:%s"]}]\n' "${agent_metrics[node-a]}" \
    "${agent_metrics[node-b]}" >"$work/agent-targets.json.tmp" &&
    mv "$work/agent-targets.json.tmp" "$work/agent-targets.json"
}
write_agent_targets
prom_ok=0
for attempt in 1 2 3; do
  prom_port="$(free_port)" || fail "python3 could not pick a free port"
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb-$attempt" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
  pid[prometheus]=$!
  until http_get "http://127.0.0.1:$prom_port/-/ready" >/dev/null; do
    kill -0 "${pid[prometheus]}" 2>/dev/null || break
    check_time "prometheus ready on port $prom_port"
    sleep 0.2
  done
  kill -0 "${pid[prometheus]}" 2>/dev/null && { prom_ok=1; break; }
done
[ "$prom_ok" = 1 ] || fail "prometheus did not start"
say "Prometheus scraping the planner and both agents: http://127.0.0.1:$prom_port"

# --- the uninterrupted reference run (in the background) -----------------------------------
"$cli_bin" train --model="$model" --iterations="$iterations" --transport=inproc --ranks=1 \
  --json >"$work/uninterrupted.json" 2>"$work/uninterrupted.log" &
pid[uninterrupted]=$!

# --- the job -------------------------------------------------------------------------------
# Both "nodes" run on this machine: every link between their devices is loopback, so the
# inter-node link is described as fast as the intra-node one.
cat >"$work/two-nodes.json" <<'JSON'
{"name": "two-nodes", "hardware": [{"name": "cpu", "peak_flops": 1e11, "memory_bytes": 8e9,
  "memory_bandwidth": 1e10}],
 "nodes": [{"name": "node-a", "hardware": "cpu", "num_devices": 2,
            "intra_node_link": {"bandwidth": 1e10, "latency_s": 1e-5}},
           {"name": "node-b", "hardware": "cpu", "num_devices": 2,
            "intra_node_link": {"bandwidth": 1e10, "latency_s": 1e-5}}],
 "inter_node_link": {"bandwidth": 1e10, "latency_s": 1e-5}}
JSON
# Two data-parallel replicas (--dp=2; the planner chooses the rest of the layout, and keeps each
# replica within a node when that costs <= 5%: then losing a node leaves a whole replica).
"$cli_bin" jobs create --planner="$planner" --cluster="$work/two-nodes.json" --model="$model" \
  --dp=2 --iterations="$iterations" --checkpoint_interval="$ckpt" >"$work/create.log" 2>&1 ||
  fail "octopipe jobs create failed: $(cat "$work/create.log")"
job=job-1
say "job $job created: $model, DP2, $iterations iterations, checkpoint every $ckpt"
# Every plan version as the planner publishes it (a version replaced within a poll is still seen).
"$cli_bin" jobs watch --planner="$planner" --job="$job" >"$work/versions.log" 2>"$work/watch.log" &
pid[watch]=$!

# job_state: one line per fact of `jobs get --json`:
#   V <version> <reason> <stages> <predicted bubble> <nodes> <layout>   (every version seen)
#   E <kind> <plan version> <iteration> <node>          (each event)
#   H <node holding the model's head (the loss) in the current plan>
#   P <max iteration recorded by any rank>              (from the run directories)
job_state() {
  "$cli_bin" jobs get --planner="$planner" --job="$job" --json 2>/dev/null | python3 -c '
import glob, json, re, sys
try:
    r = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
c = r.get("current")
current_nodes = {}
if c:
    devices = sorted({s.get("node_id", "?") for s in c.get("device_slots", [])})
    current_nodes[int(c.get("version", 0))] = ",".join(devices) or "?"
# Every version, in order, from `octopipe jobs watch` ("JOB vN (REASON): S stages on D devices,
# iteration T, bubble B").
try:
    watched = open(sys.argv[1] + "/versions.log").read().splitlines()
except OSError:
    watched = []
# A layout version: "JOB vN (REASON): layout PP2 x TP1 x EP1 x DP2 (pp inner) on 4 ranks, ...;
# pipeline 0: S stages on D devices, bubble B".
v = None
for line in watched:
    if line.startswith("  option ") and v is not None:
        # After a node loss: the ways to go on the planner compared (jobs watch prints them).
        print("O", v, line.strip()[len("option "):])
        continue
    m = re.match(r"\S+ v(\d+) \(([^)]+)\): (?:layout (.+?) \(pp \w+\) on (\d+) ranks.*?; "
                 r"pipeline 0: )?(\d+) stages on (\d+) devices.*bubble (\S+)", line)
    if m:
        v = int(m.group(1))
        layout = (m.group(3) or "PP%s" % m.group(6)).replace(" ", "")
        print("V", v, m.group(2), m.group(5), m.group(7),
              current_nodes.get(v, (m.group(4) or m.group(6)) + "_ranks"), layout)
if c:
    result = c.get("result", {})
    plan = result.get("plan", {})
    stages = plan.get("stages", [])
    slots = c.get("device_slots", [])
    if stages and slots:
        head = max(stages, key=lambda st: st.get("last_layer", 0)).get("device", 0)
        # Under a layout, device `head` of pipeline 0 (its replica 0) is a rank.
        pipelines = result.get("layout_plan", {}).get("pipelines", [])
        if pipelines and pipelines[0].get("replicas"):
            ranks = pipelines[0]["replicas"][0].get("device_ranks", [])
            head = ranks[head] if head < len(ranks) else head
        print("H", slots[head].get("node_id", "?") if head < len(slots) else "?")
for e in r.get("job", {}).get("events", []):
    print("E", e.get("kind", "?"), e.get("plan_version", 0), e.get("iteration", 0),
          e.get("node_id") or "-")
top = -1
for f in glob.glob(sys.argv[1] + "/node-*/**/rank-*.jsonl", recursive=True):
    try:
        lines = open(f).read().splitlines()
    except OSError:
        continue  # an agent removed that run directory since the glob
    for line in lines:
        try:
            top = max(top, json.loads(line)["iteration"])
        except (ValueError, KeyError):
            pass
print("P", top)
' "$work"
}

# --- the narrated run ----------------------------------------------------------------------
declare -A seen=()
versions=()       # "version:reason"
phase=train_v1    # train_v1 -> calibrated -> killed -> resumed -> rejoined -> done
head_node=""
lost_node=node-b
resumed_from=-1
saved_iterations=""   # iterations some survivor saved from memory (state_saved events)
failed_reached=0      # the most iterations a survivor had completed when its ranks failed
lost_reached=0        # ... and the lost node's ranks, from their records
replanned_without_lost=0
failure_version=0
kill_after=-1
v1_started=0 v1_started_s=$SECONDS
bubble_said=0
while :; do
  check_time "the job to complete (phase: $phase)"
  state="$(job_state)"
  progress="$(awk '$1 == "P" {print $2}' <<<"$state")"
  while read -r tag a b c d e f; do
    case "$tag" in
      V)
        [ -n "${seen[v$a]:-}" ] && continue
        seen[v$a]=1
        versions+=("$a:$b:$f")
        say "plan v$a (reason $b): layout $f on $e, pipeline 0 in $c stages, predicted bubble $d"
        [ "$b" = node_join ] && [ "$phase" = resumed ] && phase=rejoined
        if [ "$b" = node_failure ] && [ "$phase" = killed ]; then
          replanned_without_lost=1
          failure_version="$a"
        fi
        if [ "$b" = measured ] && [ "$phase" = train_v1 ]; then
          phase=calibrated
          kill_after=$(( (progress > 0 ? progress : 0) + 3 * ckpt ))
        fi
        ;;
      O)
        [ -n "${seen[o$a$b$c$d$e$f]:-}" ] && continue
        seen[o$a$b$c$d$e$f]=1
        say "  v$a weighed: $b $c $d $e $f"
        ;;
      H) head_node="$a" ;;
      E)
        key="e:$a:$b:$c:$d"
        [ -n "${seen[$key]:-}" ] && continue
        seen[$key]=1
        case "$a" in
          started)
            [ "$b" = 1 ] && [ "$v1_started" = 0 ] && { v1_started=1; v1_started_s=$SECONDS; } ;;&
          resumed)
            say "event: $d resumed v$b from iteration $c"
            # (A resume before the node_failure version is the survivor restarting its ranks on
            # the old plan while the planner has not yet noticed the loss: keep waiting.)
            if [ "$phase" = killed ] && [ "$c" -gt 0 ] && [ "$replanned_without_lost" = 1 ] &&
              [ "$b" -ge "$failure_version" ]; then
              resumed_from="$c"
              phase=resumed
              # The iterations the lost node's ranks had completed (their records survive the
              # kill -9), for iterations_lost.
              lost_reached="$(python3 - "$work/$lost_node" <<'LOSTPY'
import glob, json, sys
top = 0
for f in glob.glob(sys.argv[1] + "/runs/*/rank-*.jsonl"):
    for line in open(f):
        try:
            top = max(top, json.loads(line)["iteration"] + 1)
        except (ValueError, KeyError):
            pass
print(top)
LOSTPY
)"
              start_agent "$lost_node" "${agent_metrics[$lost_node]}"
              write_agent_targets
              say "agent $lost_node restarted (metrics :${agent_metrics[$lost_node]})"
            fi
            ;;
          state_saved)
            say "event: $d saved its ranks' state of iteration $c from memory as they failed"
            saved_iterations="$saved_iterations $c"
            ;;
          rank_failed)
            say "event: rank_failed on $d (v$b, after iteration $c)"
            [ "$phase" = killed ] && [ "$c" -gt "$failed_reached" ] && failed_reached="$c"
            ;;
          completed)
            say "event: job completed (v$b, iteration $c)"
            [ "$phase" = rejoined ] ||
              fail "the job completed before the demo reached node_join (phase $phase); try more --iterations"
            phase=done
            ;;
          *) say "event: $a (v$b, iteration $c, node $d)" ;;
        esac
        ;;
    esac
  done <<<"$state"
  if [ "$bubble_said" = 0 ]; then
    # The planner's pipeline-wide ratio, once every device of the plan has been reported.
    page="$(http_get "http://127.0.0.1:$planner_metrics/metrics")"
    b="$(awk '$1 ~ /^octopipe_measured_bubble_ratio[{]/ {print $2; exit}' <<<"$page")"
    p="$(awk '$1 ~ /^octopipe_predicted_bubble_ratio[{]/ {print $2; exit}' <<<"$page")"
    t="$(awk '$1 ~ /^octopipe_measured_iteration_seconds[{]/ {print $2; exit}' <<<"$page")"
    if [ -n "$b" ]; then
      say "training: measured bubble $(awk -v b="$b" 'BEGIN{printf "%.1f%%", b*100}') across all devices (predicted $(awk -v p="${p:-0}" 'BEGIN{printf "%.1f%%", p*100}')), iteration $(awk -v t="${t:-0}" 'BEGIN{printf "%.1f ms", t*1000}')"
      bubble_said=1
    fi
  fi
  # No calibrated re-plan adopted within 4 s of training (2 cooldowns): go on with v1.
  if [ "$phase" = train_v1 ] && [ "$v1_started" = 1 ] &&
    [ "$progress" -ge $((3 * ckpt)) ] && [ "$SECONDS" -ge "$((v1_started_s + 4))" ]; then
    say "no calibrated re-plan adopted by iteration $progress (the plan from the measured times was not predicted >= 1% faster)"
    phase=calibrated
    kill_after="$progress"
  fi
  if [ "$phase" = calibrated ] && [ "$progress" -ge "$kill_after" ]; then
    kill -9 "${pid[$lost_node]}"
    wait "${pid[$lost_node]}" 2>/dev/null
    unset "pid[$lost_node]"
    say "kill -9 of $lost_node's agent at iteration $progress (its ranks die with it: PR_SET_PDEATHSIG)"
    phase=killed
  fi
  [ "$phase" = done ] && break
  sleep 0.25
done

# --- the result ----------------------------------------------------------------------------
while kill -0 "${pid[uninterrupted]}" 2>/dev/null; do check_time "the uninterrupted run"; sleep 0.2; done
wait "${pid[uninterrupted]}" || fail "octopipe train (the uninterrupted run) failed: $(cat "$work/uninterrupted.log")"
unset "pid[uninterrupted]"
# The final loss: the last iteration's, on the agent holding the head in the final plan.
[ -n "$head_node" ] && [ -n "${agent_metrics[$head_node]:-}" ] ||
  fail "the final plan names no agent holding the model's head ('$head_node')"
final_loss="$(http_get "http://127.0.0.1:${agent_metrics[$head_node]}/metrics" |
  awk -v j="job_id=\"$job\"" '$1 ~ /^octopipe_agent_loss\{/ && index($1, j) {print $2; exit}')"
# The agent's own cost per iteration and the last plan switch, as the head's agent exports them.
head_metrics="$(http_get "http://127.0.0.1:${agent_metrics[$head_node]}/metrics")"
overhead="$(awk -v j="job_id=\"$job\"" '$1 ~ /^octopipe_agent_overhead_ratio\{/ && index($1, j) {print $2; exit}' <<<"$head_metrics")"
switch_s="$(awk -v j="job_id=\"$job\"" '$1 ~ /^octopipe_agent_plan_switch_seconds\{/ && index($1, j) {print $2; exit}' <<<"$head_metrics")"
# What a scheduler sees at the end: the job's phase and progress, from the planner.
echo
"$cli_bin" jobs get --planner="$planner" --job="$job" | sed -n '1,2p'
"$cli_bin" jobs get --planner="$planner" --job="$job" --json >"$work/job.json" 2>/dev/null ||
  echo '{}' >"$work/job.json"
python3 - "$work" "$iterations" "$summary" "$lost_node" "$resumed_from" "$prom_port" \
  "$((SECONDS - start))" "${final_loss:-nan}" "${overhead:-nan}" "${switch_s:-nan}" \
  "$(( failed_reached > lost_reached ? failed_reached : lost_reached ))" "$saved_iterations" \
  "${versions[@]}" <<'PY' || fail "the final loss differs from the uninterrupted run's"
import glob, json, sys
import math
work, iterations, summary, lost, resumed, prom, wall, final, overhead, switch_s = sys.argv[1:11]
reached, saved = int(sys.argv[11]), [int(x) for x in sys.argv[12].split()]
iterations = int(iterations)
versions = []
for v in sys.argv[13:]:
    number, reason, layout = (v.split(":") + ["", ""])[:3]
    versions.append({"version": int(number), "reason": reason, "layout": layout})
try:
    job = json.load(open(work + "/job.json")).get("job", {})
except ValueError:
    job = {}
# Recovered from the survivors' memory when they saved the iteration the job resumed from.
recovered_from = "peers" if int(resumed) in saved else "checkpoint"
iterations_lost = max(0, reached - int(resumed))
overhead = None if math.isnan(float(overhead)) else float(overhead)
switch_s = None if math.isnan(float(switch_s)) else float(switch_s)
final = float(final)
if math.isnan(final):
    final = None
ref = json.load(open(work + "/uninterrupted.json"))["loss"][-1]
ok = final is not None and abs(final - ref) <= 1e-6 * max(abs(ref), 1e-12)
print()
print("%-34s %s" % ("plan versions", ", ".join("v%d %s %s" % (v["version"], v["reason"], v["layout"]) for v in versions)))
print("%-34s %s" % ("node lost (kill -9) and restarted", lost))
print("%-34s %s (state from %s; %d iteration(s) lost)" % (
    "resumed from iteration", resumed,
    "the survivors' memory" if recovered_from == "peers" else "a checkpoint", iterations_lost))
print("%-34s %s" % ("final loss (agents)", "%.12g" % final if final is not None else "missing"))
print("%-34s %.12g" % ("final loss (uninterrupted run)", ref))
print("%-34s %s" % ("equal", "yes" if ok else "NO"))
print("%-34s %s" % ("agent overhead per iteration",
                    "%.3f%% of the iteration time" % (100 * overhead) if overhead is not None else "?"))
print("%-34s %s" % ("last plan switch", "%.3f s" % switch_s if switch_s is not None else "?"))
print("%-34s %s s" % ("wall time of the system part", wall))
print("%-34s http://127.0.0.1:%s" % ("Prometheus", prom))
if summary:
    with open(summary, "w") as out:
        json.dump({"plan_versions": versions, "lost_node": lost,
                   "resumed_from_iteration": int(resumed), "recovered_from": recovered_from,
                   "iterations_lost": iterations_lost, "final_loss": final,
                   "uninterrupted_final_loss": ref, "iterations": iterations,
                   "losses_equal": ok, "prometheus_url": "http://127.0.0.1:" + prom,
                   "agent_overhead_ratio": overhead, "last_plan_switch_s": switch_s,
                   "wall_s": int(wall), "work_dir": work,
                   "job_phase": job.get("phase", "").replace("JOB_PHASE_", "").lower(),
                   "job_progress": job.get("progress", {})}, out, indent=2)
        out.write("\n")
sys.exit(0 if ok else 1)
PY
finished=1
