#!/usr/bin/env bash
# tools/demo.sh's system part against the Bazel-built binaries (OCTOPIPE_BIN_DIR: no set-up, no
# build): planner, agents node-a/node-b, Prometheus; a job whose node-b agent is killed with
# kill -9 mid-run and restarted (two devices each: four ranks). Checks the --summary JSON: the
# plan versions include initial, node_failure and node_join; v1 has DP >= 2; the survivor
# resumed past iteration 0 from the peers' memory (no checkpoint rollback), at most one
# iteration lost; the final loss equals the uninterrupted single-process run's (1e-6 relative). Also: an unknown
# argument is a clear error (exit 2) and --help documents the flags.
set -uo pipefail
demo="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
bin="$tmp/bin"
mkdir -p "$bin"
ln -sf "$(realpath "$2")" "$bin/octopipe-planner"
ln -sf "$(realpath "$3")" "$bin/octopipe-agent"
ln -sf "$(realpath "$4")" "$bin/octopipe"
export OCTOPIPE_BIN_DIR="$bin"

fail() { echo "FAIL: $*"; exit 1; }

# Flags.
out="$("$demo" --no_such_flag 2>&1)"
rc=$?
[ "$rc" = 2 ] || fail "an unknown argument exited $rc, want 2: $out"
grep -q "unknown argument '--no_such_flag'" <<<"$out" || fail "unclear unknown-argument error: $out"
help="$("$demo" --help)" || fail "--help failed"
for flag in --keep --summary --iterations --checkpoint_interval --timeout --plan_only OCTOPIPE_BIN_DIR; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not document $flag"
done

# The system.
start=$SECONDS
"$demo" --work_dir="$tmp/demo" --summary="$tmp/summary.json" --timeout=150 ||
  fail "tools/demo.sh failed (its output is above)"
echo "demo took $((SECONDS - start)) s"

python3 - "$tmp/summary.json" <<'PY' || fail "the summary does not show the expected run"
import json, sys
s = json.load(open(sys.argv[1]))
reasons = [v["reason"] for v in s["plan_versions"]]
versions = [v["version"] for v in s["plan_versions"]]
errors = []
for want in ("initial", "node_failure", "node_join"):
    if want not in reasons:
        errors.append("no plan version with reason %s in %s" % (want, reasons))
if reasons and reasons[0] != "initial":
    errors.append("the first version is %s, want initial" % reasons[0])
if versions != sorted(versions):
    errors.append("versions out of order: %s" % versions)
if "node_failure" in reasons and "node_join" in reasons and \
        reasons.index("node_failure") > reasons.index("node_join"):
    errors.append("node_join came before node_failure: %s" % reasons)
if s["lost_node"] != "node-b":
    errors.append("lost_node %r, want node-b" % s["lost_node"])
for v in s["plan_versions"]:
    if not v.get("layout", "").startswith("PP"):
        errors.append("version %s names no layout: %r" % (v["version"], v.get("layout")))
import re
v1 = re.search(r"DP(\d+)", s["plan_versions"][0].get("layout", "")) if s["plan_versions"] else None
if not v1 or int(v1.group(1)) < 2:
    errors.append("v1's layout %r has no DP >= 2" % (s["plan_versions"][0] if s["plan_versions"] else None))
if s.get("recovered_from") != "peers":
    errors.append("recovered_from %r, want peers (every layer has a live replica)" % s.get("recovered_from"))
lost = s.get("iterations_lost")
if not isinstance(lost, int) or lost < 0:
    errors.append("iterations_lost %r, want an integer >= 0" % lost)
elif s.get("recovered_from") == "peers" and lost > 1:
    errors.append("recovered from the peers' memory but lost %d iterations (want <= 1)" % lost)
elif s.get("recovered_from") == "checkpoint" and lost > s["iterations"]:
    errors.append("iterations_lost %d is more than the job's iterations" % lost)
if not s["resumed_from_iteration"] > 0:
    errors.append("resumed_from_iteration %r, want > 0" % s["resumed_from_iteration"])
# The planner's view at the end, as a scheduler sees it.
if s.get("job_phase") != "completed":
    errors.append("job_phase %r at the end, want completed" % s.get("job_phase"))
progress = s.get("job_progress", {})
if int(progress.get("iteration", 0)) != s["iterations"]:
    errors.append("job_progress.iteration %r, want %d" % (progress.get("iteration"), s["iterations"]))
if not progress.get("has_loss") or not abs(progress.get("loss", 0) - s["uninterrupted_final_loss"]) <= \
        1e-3 * abs(s["uninterrupted_final_loss"]):
    errors.append("job_progress %r has no loss near the final one" % progress)
final, ref = s["final_loss"], s["uninterrupted_final_loss"]
if final is None or not abs(final - ref) <= 1e-6 * abs(ref):
    errors.append("final_loss %r != uninterrupted_final_loss %r" % (final, ref))
for e in errors:
    print("FAIL:", e)
if errors:
    sys.exit(1)
print("PASS: versions %s, resumed from iteration %d (%s, %d lost), final loss %.9g == %.9g" %
      (", ".join("v%d %s %s" % (v["version"], v["reason"], v["layout"]) for v in s["plan_versions"]),
       s["resumed_from_iteration"], s["recovered_from"], s["iterations_lost"], final, ref))
PY
