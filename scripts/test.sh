#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, then runs
# format and lint checks and every test (unit, end-to-end with kubectl, kube-rs and the
# Python client). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import kubernetes' >/dev/null 2>&1; then
  echo "installing the Python kubernetes client"
  python3 -m pip install --quiet --disable-pip-version-check 'kubernetes>=31'
fi
# The manifest checks' tools (tests/manifests.rs), in a virtualenv of their own so their
# dependencies cannot clash with anything else installed.
TOOLS="${XDG_CACHE_HOME:-$HOME/.cache}/kustos-test-tools"
if ! "$TOOLS/bin/checkov" --version >/dev/null 2>&1 || ! "$TOOLS/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  echo "installing checkov and kubernetes-validate into $TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install --quiet --disable-pip-version-check 'checkov>=3.2,<4' 'kubernetes-validate>=1.37'
fi
export PATH="$PATH:$TOOLS/bin"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "error: kubectl is not on PATH; the end-to-end tests drive the server with it" >&2
  exit 1
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo nextest run --workspace --locked --no-fail-fast
