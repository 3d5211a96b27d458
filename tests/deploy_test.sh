#!/usr/bin/env bash
# deploy/ is usable as shipped: the Prometheus config and alerting rules pass `promtool check`
# and the rules' unit tests (`promtool test rules`), the Grafana dashboards and Kubernetes
# manifests parse, and every --flag the systemd units, Kubernetes manifests and the Slurm script
# pass to octopipe-planner / octopipe-agent / etcd is a flag that binary's --help lists.
set -uo pipefail
planner="$1"
agent="$2"
deploy="$(cd "$(dirname "$3")/.." && pwd)"   # $3: deploy/prometheus/prometheus.yml
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

command -v promtool >/dev/null || { echo "FAIL: promtool missing (Debian package prometheus)"; exit 1; }
promtool check config "$deploy/prometheus/prometheus.yml" >"$tmp/promtool.log" 2>&1 ||
  fail "promtool check config: $(cat "$tmp/promtool.log")"
promtool check rules "$deploy/prometheus/alerts.yml" >"$tmp/promtool.log" 2>&1 ||
  fail "promtool check rules: $(cat "$tmp/promtool.log")"
(cd "$deploy/prometheus" && promtool test rules alerts_test.yml) >"$tmp/promtool.log" 2>&1 ||
  fail "promtool test rules: $(cat "$tmp/promtool.log")"

/usr/bin/python3 - "$deploy" <<'PY' || fail "dashboards or manifests do not parse"
import glob, json, sys, yaml
deploy = sys.argv[1]
for path in glob.glob(deploy + "/grafana/*.json"):
    d = json.load(open(path))
    assert d.get("panels"), path + ": no panels"
    for p in d["panels"]:
        for t in p.get("targets", []):
            assert t.get("expr"), f"{path}: panel {p.get('title')!r} has a target without expr"
kinds = []
for path in glob.glob(deploy + "/kubernetes/*.yaml"):
    for doc in yaml.safe_load_all(open(path)):
        assert doc.get("apiVersion") and doc.get("kind"), path + ": a document without kind"
        kinds.append(doc["kind"])
for want in ("Deployment", "Service", "PersistentVolumeClaim", "DaemonSet", "StatefulSet"):
    assert want in kinds, f"kubernetes/: no {want} (have {kinds})"
PY

# check_flags BINARY NAME FILE...: every --flag given to NAME in the files is in its --help.
# Flag names are [a-z0-9_] (FLAG_CHARS=a-z0-9_- for a binary with hyphenated flags, etcd).
check_flags() {
  local bin="$1" name="$2"; shift 2
  local help="$tmp/$(basename "$name").help"
  "$bin" --help >"$help" 2>&1
  local flags
  flags="$(/usr/bin/python3 - "${FLAG_CHARS:-a-z0-9_}" "$name" "$@" <<'PY'
import re, sys
chars, name, files = sys.argv[1], sys.argv[2], sys.argv[3:]
found = set()
for path in files:
    text = open(path).read().replace("\\\n", " ")
    # The command lines (and YAML args lists) that start the binary: flags after its name.
    for block in re.split(r"\n(?=\S)|(?=ExecStart=)|(?=command:)", text):
        if name in block:
            found.update(re.findall(r"(?<![\w-])--([a-z][" + chars + r"]*)(?=[=\s\"']|$)", block))
print("\n".join(sorted(found)))
PY
)"
  [ -n "$flags" ] || fail "no flags for $name found in $*"
  for f in $flags; do
    grep -Eq -- "--$f([^a-z0-9_-]|$)" "$help" || fail "$name: --$f (used in deploy/) is not in its --help"
  done
  echo "$name: checked $(echo "$flags" | wc -w) flags"
}
check_flags "$planner" octopipe-planner "$deploy/systemd/octopipe-planner.service" \
  "$deploy/systemd/octopipe-planner-replica.service" "$deploy/kubernetes/planner.yaml" \
  "$deploy/kubernetes/planner-replicas.yaml"
# The etcd members' flags, against Debian's etcd (tools/setup.sh installs it).
[ -x /usr/bin/etcd ] || fail "/usr/bin/etcd missing (Debian package etcd-server)"
[ -x /usr/bin/etcd ] && FLAG_CHARS=a-z0-9_- check_flags /usr/bin/etcd /usr/bin/etcd \
  "$deploy/kubernetes/planner-replicas.yaml"
check_flags "$agent" octopipe-agent "$deploy/systemd/octopipe-agent.service" \
  "$deploy/kubernetes/agent-daemonset.yaml" "$deploy/slurm/octopipe-agents.sbatch"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "PASS: deploy/ parses and names only existing flags"
