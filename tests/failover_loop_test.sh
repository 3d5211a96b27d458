#!/usr/bin/env bash
# The planner's fail-over in CI: bench/failover (three etcd members, three planner replicas, a
# client creating jobs without pause) with three leader kills. Every acknowledged CreateJob
# survives, no job id repeats, and each fail-over (kill -9 to another replica leading) stays
# within the lease plus two seconds. The 20-kill figures are in docs/benchmarks.md.
set -euo pipefail
failover="$1"
out="$("$failover" --kills=3 --ttl_s=2 --writes=20)" || {
  echo "FAIL failover exited non-zero: $out"; exit 1; }
echo "$out"
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
problems = []
if r["kills"] != 3: problems.append(f"kills: {r['kills']} of 3 took effect")
if not r["jobs_listed"]: problems.append("the final leader never answered the whole ListJobs")
if r["acknowledged_lost"] != 0: problems.append(f"acknowledged_lost: {r['acknowledged_lost']}")
if r["repeated_job_ids"] != 0: problems.append(f"repeated_job_ids: {r['repeated_job_ids']}")
if r["create_job_acknowledged"] < 3: problems.append("fewer than 3 CreateJob calls acknowledged")
worst = r["failover"]["max_s"]
if worst > r["leader_ttl_s"] + 2: problems.append(f"slowest fail-over {worst:.2f} s > TTL + 2 s")
for p in problems: print("FAIL", p)
sys.exit(1 if problems else 0)
PY
echo "PASS"
