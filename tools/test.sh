#!/usr/bin/env bash
# Sets up a fresh machine (tools/setup.sh), builds everything and runs every test.
# Ends with one line "N passed, N failed" counting test cases (gtest cases from each target's
# test.xml; a target that fails to build or run without a report counts as one failure).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

bazel test //... --test_summary=short "$@" 2>&1 | tee /tmp/octopipe-test.log
status=${PIPESTATUS[0]}

python3 - "$status" <<'PY'
import os, re, sys
import xml.etree.ElementTree as ET
status = int(sys.argv[1])
log = open('/tmp/octopipe-test.log', errors='replace').read()
passed = failed = 0
# Only the targets this run reported (bazel-testlogs may hold stale results of other runs).
summary = re.findall(r'^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED TO BUILD|FAILED|NO STATUS|TIMEOUT|FLAKY)', log, re.M)
for target, what in summary:
    xml = os.path.join('bazel-testlogs', target[2:].replace(':', '/'), 'test.xml')
    cases = failures = 0
    if what not in ('FAILED TO BUILD', 'NO STATUS') and os.path.exists(xml):
        try:
            for c in ET.parse(xml).getroot().iter('testcase'):
                cases += 1
                if c.find('failure') is not None or c.find('error') is not None:
                    failures += 1
        except ET.ParseError:
            cases = 0
    if cases == 0:
        # No per-case report: the target counts as one case.
        cases, failures = 1, (0 if what in ('PASSED', 'FLAKY') else 1)
    elif what not in ('PASSED', 'FLAKY') and failures == 0:
        failures = 1  # e.g. a crash after the cases ran
    passed += cases - failures
    failed += failures
if status != 0 and failed == 0:
    failed = 1  # bazel itself failed (analysis or build error): never report a clean run
print(f"{passed} passed, {failed} failed")
sys.exit(0 if failed == 0 else 1)
PY
