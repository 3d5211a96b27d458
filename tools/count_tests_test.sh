#!/usr/bin/env bash
# Pins tools/count_tests.py, the closing line of tools/test.sh: GTEST_SKIP and DISABLED_ cases
# count as skipped (not passed), failures per case, a crashed target, a target without a report,
# stale targets the log does not name, and a failed Bazel run with nothing failed.
set -euo pipefail
script="$(dirname "$0")/count_tests.py"
dir="${TEST_TMPDIR:-$(mktemp -d)}/count"
logs="$dir/testlogs"
mkdir -p "$logs/a/test" "$logs/b/test" "$logs/c/sub/test" "$logs/stale/test"

# gtest 1.12's XML: one pass, one GTEST_SKIP, one DISABLED_, one failure.
cat > "$logs/a/test/test.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" failures="1" disabled="1">
  <testsuite name="T" tests="4">
    <testcase name="Passes" status="run" result="completed" />
    <testcase name="Skips" status="run" result="skipped"><skipped message="no GPU"/></testcase>
    <testcase name="DISABLED_Off" status="notrun" result="suppressed" />
    <testcase name="Fails" status="run" result="completed"><failure message="x"/></testcase>
  </testsuite>
</testsuites>
XML
# Two passing cases, but the target FAILED (a crash after the cases ran).
cat > "$logs/b/test/test.xml" <<'XML'
<testsuites><testsuite name="U">
  <testcase name="One" status="run" result="completed" />
  <testcase name="Two" status="run" result="completed" />
</testsuite></testsuites>
XML
# A skip in a nested package, on a PASSED target.
cat > "$logs/c/sub/test/test.xml" <<'XML'
<testsuites><testsuite name="V">
  <testcase name="Only" status="run" result="skipped"><skipped/></testcase>
</testsuite></testsuites>
XML
# Not in the log: must not count.
cp "$logs/a/test/test.xml" "$logs/stale/test/test.xml"

cat > "$dir/log" <<'LOG'
INFO: Build completed
//a:test                                                                 FAILED in 1.0s
//b:test                                                                 FAILED in 1.0s
//c/sub:test                                                    (cached) PASSED in 0.1s
//d:test                                                                 PASSED in 0.2s
//e:test                                                        FAILED TO BUILD
LOG

expect() {  # expect WANT_LINE WANT_STATUS ARGS...
  local want="$1" want_status="$2"
  shift 2
  local got status=0
  got=$(/usr/bin/python3 "$script" "$@") || status=$?
  if [[ "$got" != "$want" || "$status" != "$want_status" ]]; then
    echo "count_tests.py $*: got '$got' (exit $status), want '$want' (exit $want_status)"
    exit 1
  fi
}

# a: 1 passed, 1 failed, 2 skipped; b: 2 passed + 1 failed; c: 1 skipped; d: 1 passed (no
# report); e: 1 failed (no report).
expect "3 skipped (GTEST_SKIP or disabled; not counted as passed)
4 passed, 3 failed" 1 1 "$dir/log" "$logs"

# A clean run: only the passing and skipping targets.
grep -E '//(c/sub|d):' "$dir/log" > "$dir/clean.log"
expect "1 skipped (GTEST_SKIP or disabled; not counted as passed)
1 passed, 0 failed" 0 0 "$dir/clean.log" "$logs"

# Bazel failed (e.g. analysis error) but no case failed: never reported clean.
expect "1 skipped (GTEST_SKIP or disabled; not counted as passed)
1 passed, 1 failed" 1 1 "$dir/clean.log" "$logs"
echo "PASS"
