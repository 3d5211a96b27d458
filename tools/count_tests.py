#!/usr/bin/env python3
"""Counts the test cases of one `bazel test` run: prints "N skipped", then, as the last line
(the one CI reads), "N passed, N failed".

Usage: count_tests.py BAZEL_EXIT_STATUS BAZEL_LOG [TESTLOGS_DIR]

Only the targets the log's summary names are counted (TESTLOGS_DIR, default bazel-testlogs,
may hold stale results of other runs). Per target, the gtest cases in its test.xml: a case with
a <failure>/<error> failed; a case GTEST_SKIP skipped (<skipped/>, result="skipped") or a
DISABLED_ one (status="notrun") is skipped, not passed. A target without a per-case report
counts as one case; a target that failed although no case did (a crash after the cases ran)
counts one failure; a non-zero Bazel status with nothing failed (an analysis or build error)
counts one failure, so a broken run is never reported clean. Exit status 0 iff nothing failed.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

SUMMARY = re.compile(
    r'^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED TO BUILD|FAILED|NO STATUS|TIMEOUT|FLAKY)',
    re.M)


def case_outcome(case):
    """'failed', 'skipped' or 'passed' for one <testcase>."""
    if case.find('failure') is not None or case.find('error') is not None:
        return 'failed'
    if (case.find('skipped') is not None or case.get('result') in ('skipped', 'suppressed')
            or case.get('status') == 'notrun'):
        return 'skipped'
    return 'passed'


def count(status, log, testlogs):
    passed = failed = skipped = 0
    for target, what in SUMMARY.findall(log):
        xml = os.path.join(testlogs, target[2:].replace(':', '/'), 'test.xml')
        outcomes = []
        if what not in ('FAILED TO BUILD', 'NO STATUS') and os.path.exists(xml):
            try:
                outcomes = [case_outcome(c) for c in ET.parse(xml).getroot().iter('testcase')]
            except ET.ParseError:
                outcomes = []
        if not outcomes:
            # No per-case report: the target counts as one case.
            outcomes = ['passed' if what in ('PASSED', 'FLAKY') else 'failed']
        elif what not in ('PASSED', 'FLAKY') and 'failed' not in outcomes:
            outcomes.append('failed')  # e.g. a crash after the cases ran
        passed += outcomes.count('passed')
        failed += outcomes.count('failed')
        skipped += outcomes.count('skipped')
    if status != 0 and failed == 0:
        failed = 1  # bazel itself failed (analysis or build error): never report a clean run
    return passed, failed, skipped


def main(argv):
    status = int(argv[1])
    with open(argv[2], errors='replace') as f:
        log = f.read()
    testlogs = argv[3] if len(argv) > 3 else 'bazel-testlogs'
    passed, failed, skipped = count(status, log, testlogs)
    print(f"{skipped} skipped (GTEST_SKIP or disabled; not counted as passed)")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
