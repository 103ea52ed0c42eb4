#!/usr/bin/env bash
# Build and start `kustos server` (release build, embedded SQLite store in ./kustos-data),
# installing what the build needs on a fresh machine first. Extra arguments go to
# `kustos server` (e.g. --secure-port 0, or --storage etcd --etcd-servers URL).
set -euo pipefail
cd "$(dirname "$0")/.."

# The etcd client's gRPC code is generated at build time with protoc.
if ! command -v protoc >/dev/null 2>&1; then
  echo "installing protobuf-compiler (protoc, needed to build the etcd client)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get install -y -q protobuf-compiler >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q protobuf-compiler >/dev/null; }
fi

exec cargo run --release --locked -- server --data-dir ./kustos-data "$@"
