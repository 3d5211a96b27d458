#!/usr/bin/env bash
# Sets up a fresh machine and runs the main job on the embedded default: every classic
# pipeline schedule for Nemotron-H 8B on one 8 x H100 node, compared in the DAG simulator.
# Extra arguments go to `octopipe simulate` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build //cli:octopipe >&2
exec bazel-bin/cli/octopipe simulate "$@"
