#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine: installs the Debian packages OctoPipe builds
# against (docs/contributing.md, "Building" says why each is needed and how the offline Bazel
# build uses them). Fast when everything is already there.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java
  g++ git python3 openssl curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev libeigen3-dev libsqlite3-dev libssl-dev
  prometheus
  etcd-server etcd-client
  prometheus-cpp-dev nlohmann-json3-dev libcli11-dev python3-yaml
  python3-grpcio
  chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
