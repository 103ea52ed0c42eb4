#!/usr/bin/env bash
# Writes scripts/idle-functions.txt, the list scripts/link-kustos.sh lays the executable out by:
# every function of the kustos executable that a release `kustos server` runs from its start on
# a fresh data directory until it has been ready and idle for a while, by the names
# `scripts/link-kustos.sh --names` gives them. Run it when a change of code or dependencies
# leaves many of the listed names unmatched (tests/code_layout.rs says how many).
#
# It builds the release executable, runs it under valgrind's callgrind (which records every
# function that ran; installed with apt-get when missing), waits for /readyz, lets it idle
# IDLE seconds (default 60; under valgrind the server runs some 30 to 50 times slower), stops
# it with SIGINT and writes the list, sorted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v valgrind > /dev/null; then
  apt-get install -y valgrind > /dev/null
fi
cargo build --release --locked --bin kustos
bin=$(readlink -f target/release/kustos)

work=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Without RUST_BACKTRACE: with it, errors the controllers retry at start capture backtraces.
env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE valgrind --tool=callgrind --demangle=no --dump-instr=no --compress-strings=no --compress-pos=no \
  --callgrind-out-file="$work/callgrind.out" \
  "$bin" server --data-dir "$work/data" --secure-port "$port" > "$work/server.log" 2>&1 &
pid=$!
ready=
for _ in $(seq 1 600); do
  if curl -skf "https://127.0.0.1:$port/readyz" > /dev/null; then
    ready=1
    break
  fi
  kill -0 "$pid" 2> /dev/null || break
  sleep 1
done
if [[ -z $ready ]]; then
  echo "idle-functions: the server did not become ready under valgrind; its log:" >&2
  cat "$work/server.log" >&2
  exit 1
fi
sleep "${IDLE:-60}"
kill -INT "$pid"
wait "$pid" || true
pid=

# Functions (fn=) and the functions they called (cfn=) of the executable's object: ob= sets a
# function's object; cob= the next callee's, which is otherwise the caller's.
awk -v bin="$bin" '
  /^ob=/  { ob = substr($0, 4) }
  /^cob=/ { cob = substr($0, 5) }
  /^fn=/  { if (ob == bin) print substr($0, 4) }
  /^cfn=/ { if ((cob != "" ? cob : ob) == bin) print substr($0, 5); cob = "" }
' "$work/callgrind.out" | sed "s/'[0-9]*$//" | sort -u > "$work/ran"
scripts/link-kustos.sh --names "$bin" |
  awk -F'\t' 'NR == FNR { ran[$0] = 1; next } ($2 in ran) { print $1 }' "$work/ran" - |
  LC_ALL=C sort -u > scripts/idle-functions.txt
echo "scripts/idle-functions.txt: $(wc -l < scripts/idle-functions.txt) names"
