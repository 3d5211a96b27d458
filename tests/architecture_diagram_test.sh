#!/usr/bin/env bash
# The package dependency diagram in docs/architecture.md agrees with the BUILD files' deps
# (tests/architecture_diagram.py says how each is read). Under `bazel test` the source tree is
# found through the runfile docs/architecture.md (a link into it); run by hand from the
# repository root: tests/architecture_diagram_test.sh
set -euo pipefail
doc="$(readlink -f docs/architecture.md)"
exec python3 "$(dirname "$0")/architecture_diagram.py" "$(dirname "$(dirname "$doc")")"
