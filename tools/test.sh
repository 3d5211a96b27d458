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
import glob, os, re, sys
import xml.etree.ElementTree as ET
status = int(sys.argv[1])
log = open('/tmp/octopipe-test.log', errors='replace').read()
passed = failed = 0
for xml in glob.glob('bazel-testlogs/**/test.xml', recursive=True):
    target = os.path.dirname(os.path.relpath(xml, 'bazel-testlogs'))
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:
        continue
    cases = root.iter('testcase')
    n = f = 0
    for c in cases:
        n += 1
        if c.find('failure') is not None or c.find('error') is not None:
            f += 1
    if n == 0:
        continue
    passed += n - f
    failed += f
# Targets that failed without a usable report (build failures, crashes, timeouts).
for m in re.finditer(r'^(//\S+)\s+(FAILED TO BUILD|NO STATUS|TIMEOUT|FAILED)', log, re.M):
    target, what = m.group(1), m.group(2)
    xml = os.path.join('bazel-testlogs', target[2:].replace(':', '/'), 'test.xml')
    if what in ('FAILED TO BUILD', 'NO STATUS') or not os.path.exists(xml):
        failed += 1
if status != 0 and failed == 0:
    failed = 1  # bazel itself failed (analysis error): never report a clean run
print(f"{passed} passed, {failed} failed")
sys.exit(0 if failed == 0 else 1)
PY
