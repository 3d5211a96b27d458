#!/usr/bin/env bash
# The one-shot planning example (tools/demo.sh runs the whole system). Sets up a fresh machine
# and runs the main job on the embedded default: OctoPipe tunes the
# pipeline plan for Nemotron-H 8B on one 8 x H100 node and compares it with every classic
# schedule (GPipe, 1F1B, interleaved, ZB-H1/H2, ZB-V, DualPipeV) in the same simulator.
# Extra arguments go to `octopipe plan` (try --help); `octopipe simulate` compares the classic
# schedules alone.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build //cli:octopipe >&2
exec bazel-bin/cli/octopipe plan "$@"
