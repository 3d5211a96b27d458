#!/usr/bin/env bash
# Sets up a fresh machine (tools/setup.sh), builds everything and runs every test.
# Ends with "N skipped" and then the line "N passed, N failed" counting test cases (tools/count_tests.py:
# gtest cases from each target's test.xml; GTEST_SKIP cases are skipped, not passed; a target
# that fails to build or run without a report counts as one failure).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp "${TMPDIR:-/tmp}/octopipe-test.XXXXXX.log")
bazel test //... --test_summary=short "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
python3 tools/count_tests.py "$status" "$log"
