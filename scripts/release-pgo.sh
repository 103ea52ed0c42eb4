#!/usr/bin/env bash
# Build a profile-guided release executable of kustos: target/pgo/kustos.
#
#   1. the bootstrap-storm and load benchmarks, built as usual, and an instrumented release
#      build of the server (target/pgo/gen);
#   2. a training run of that server: a first start (the PKI is made), a restart, the
#      bootstrap storm (3,000 kubelets, 500 in flight) and the platform load benchmark (lists,
#      watches, tables), each server stopped with SIGTERM so that it writes its counts;
#   3. the server's counts merged with llvm-profdata (rustup's llvm-tools component,
#      installed here when missing);
#   4. the release build again with those counts (target/pgo/use), linked with the functions
#      grouped as the counts found them (hot, warm, never run), so that the code a server runs
#      lies together.
#
# What it gives, measured: docs/BENCHMARKS.md, "A profile-guided build". Takes two release
# builds of the server besides the benchmarks' (~30 min on 2 cores from a clean checkout).
# Code no training step runs is optimised for size: the etcd store, `kustos
# controller-manager` and the admin's rarer requests work the same, some slower than in
# `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
pgo="$root/target/pgo"
# RUSTFLAGS is split at whitespace: a checkout path with a space would break the flags below.
case "$root" in *[[:space:]]*) echo "error: the checkout's path has whitespace in it: $root" >&2; exit 1;; esac

# protoc: the etcd client's gRPC code is generated at build time.
source scripts/ensure-protoc.sh

# llvm-profdata of the same LLVM as rustc (a raw profile's format follows LLVM's version).
sysroot="$(rustc --print sysroot)"
host="$(rustc -vV | sed -n 's/^host: //p')"
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  echo "installing rustup's llvm-tools component (llvm-profdata)"
  rustup component add llvm-tools >/dev/null
fi
[ -x "$profdata" ] || { echo "error: $profdata is missing after 'rustup component add llvm-tools'" >&2; exit 1; }

raw="$pgo/raw"
rm -rf "$raw" && mkdir -p "$raw"

# The benchmarks that drive the training, built as usual (target/release): only the server is
# instrumented. (Built for a benchmark, the server's crates would get the dev-dependencies'
# features, and counts taken from that build would not match the functions of the plain one.)
echo "1/4 the benchmarks (target/release) and an instrumented server (target/pgo/gen)"
cargo bench --locked --no-run --bench bootstrap_storm --bench load
bench_exe() {
  cargo bench --locked --no-run --bench "$1" --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["kind"] == ["bench"] and m.get("executable"):
        print(m["executable"])'
}
storm="$(bench_exe bootstrap_storm)"
load="$(bench_exe load)"
[ -x "$storm" ] && [ -x "$load" ] || { echo "error: the benchmark executables were not built" >&2; exit 1; }
KUSTOS_LINK_ORDER=0 RUSTFLAGS="-Cprofile-generate=$raw" cargo build --release --locked --bin kustos --target-dir "$pgo/gen"
# The build ran instrumented build scripts, which wrote counts of their own: only the
# server's are wanted.
rm -rf "$raw" && mkdir -p "$raw"

echo "2/4 training"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
server="$pgo/gen/release/kustos"
# The benchmarks kill their server (SIGKILL), which would lose its counts: they run this
# wrapper instead, which stops the server with SIGTERM once the benchmark has killed it.
cat > "$work/server" <<EOF
#!/bin/sh
LLVM_PROFILE_FILE="$raw/server-%m.profraw" "$server" "\$@" &
srv=\$!
me=\$\$
( trap '' TERM; while kill -0 \$me 2>/dev/null; do sleep 0.2; done; kill -TERM \$srv ) >/dev/null 2>&1 &
wait \$srv
EOF
chmod +x "$work/server"
for run in first restart; do
  LLVM_PROFILE_FILE="$raw/server-%m.profraw" "$server" server --data-dir "$work/data" --secure-port 0 \
    >"$work/$run.log" 2>&1 &
  srv=$!
  sleep 8
  kill -0 "$srv" 2>/dev/null || { cat "$work/$run.log" >&2; echo "error: the server's $run start ended early" >&2; exit 1; }
  kill -TERM "$srv"
  wait "$srv" || { cat "$work/$run.log" >&2; echo "error: the server's $run start did not stop cleanly" >&2; exit 1; }
done
BENCH_NODES=3000 BENCH_CONCURRENCY=500 BENCH_KUSTOS_BIN="$work/server" "$storm" --bench >"$work/storm.log" 2>&1 \
  || { tail -20 "$work/storm.log" >&2; echo "error: the bootstrap storm failed" >&2; exit 1; }
BENCH_SECONDS=3 BENCH_LIST_OBJECTS=2000 BENCH_WATCHERS=200 BENCH_KUSTOS_BIN="$work/server" "$load" --bench \
  >"$work/load.log" 2>&1 || { tail -20 "$work/load.log" >&2; echo "error: the load benchmark failed" >&2; exit 1; }
# Each benchmark's server gets its SIGTERM from the wrapper's watcher: wait for them to end.
for _ in $(seq 1 150); do
  pgrep -f "^$server " >/dev/null || break
  sleep 0.2
done
if pgrep -f "^$server " >/dev/null; then echo "error: an instrumented server did not stop" >&2; exit 1; fi

echo "3/4 merging the counts"
shopt -s nullglob
counts=("$raw"/server-*.profraw)
((${#counts[@]})) || { echo "error: the training wrote no counts in $raw" >&2; exit 1; }
"$profdata" merge -o "$pgo/kustos.profdata" "${counts[@]}"

echo "4/4 optimised build (target/pgo/use)"
# From scratch: cargo does not see new counts in the same file as a reason to build again.
rm -rf "$pgo/use"
KUSTOS_LINK_ORDER=0 RUSTFLAGS="-Cprofile-use=$pgo/kustos.profdata -Clink-arg=-Wl,-z,keep-text-section-prefix" \
  cargo build --release --locked --bin kustos --target-dir "$pgo/use"
cp "$pgo/use/release/kustos" "$pgo/kustos"
echo "built $pgo/kustos"
