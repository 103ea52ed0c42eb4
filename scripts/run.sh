#!/usr/bin/env bash
# Build and start `kustos server` (release build, embedded SQLite store in ./kustos-data),
# installing what the build needs on a fresh machine first. Extra arguments go to
# `kustos server` (e.g. --secure-port 0, or --storage etcd --etcd-servers URL).
set -euo pipefail
cd "$(dirname "$0")/.."

# protoc: the etcd client's gRPC code is generated at build time.
source scripts/ensure-protoc.sh

exec cargo run --release --locked -- server --data-dir ./kustos-data "$@"
