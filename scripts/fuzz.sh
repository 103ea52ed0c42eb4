#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) for a bounded time with libFuzzer under the
# address sanitizer: the CSR and certificate readers, request body decoding with duplicate
# detection, the three patch types, label/field selectors and the JWT reader.
#
# A target fails on a crash (panic, sanitizer report, stack overflow), on a single
# allocation over FUZZ_MALLOC_LIMIT_MB, on a resident size over FUZZ_RSS_LIMIT_MB, or on an
# input that takes longer than FUZZ_TIMEOUT seconds. Inputs are at most FUZZ_MAX_LEN bytes
# (default 3 MiB, the apiserver's request body limit). The failing input is saved under
# fuzz/artifacts/<target>/. Exits non-zero when any target fails and names them.
#
# Usage: scripts/fuzz.sh [TARGET...]   (default: every target)
# Environment: FUZZ_SECONDS (per target, default 20), FUZZ_MALLOC_LIMIT_MB (64),
# FUZZ_RSS_LIMIT_MB (2048), FUZZ_MAX_LEN (3145728), FUZZ_TIMEOUT (10).
# Longer runs: docs/SECURITY.md, "Fuzzing".
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
MALLOC_LIMIT_MB="${FUZZ_MALLOC_LIMIT_MB:-64}"
RSS_LIMIT_MB="${FUZZ_RSS_LIMIT_MB:-2048}"
MAX_LEN="${FUZZ_MAX_LEN:-3145728}"
TIMEOUT="${FUZZ_TIMEOUT:-10}"

# cargo fuzz passes nightly-only flags (-Z sanitizer, sanitizer coverage); on a stable
# toolchain RUSTC_BOOTSTRAP=1 lets rustc accept them.
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

if (($#)); then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

echo "building the fuzz targets (address sanitizer)"
build_start=$SECONDS
cargo fuzz build --sanitizer address
echo "built in $((SECONDS - build_start)) s"

# New inputs libFuzzer finds go to a scratch directory, not into the committed seeds.
scratch="$(mktemp -d -t kustos-fuzz-XXXXXX)"
trap 'rm -rf "$scratch"' EXIT

failed=()
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target" "artifacts/$target"
  log="$scratch/$target.log"
  start=$SECONDS
  if cargo fuzz run --sanitizer address "$target" "$scratch/$target" "corpus/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -malloc_limit_mb="$MALLOC_LIMIT_MB" -rss_limit_mb="$RSS_LIMIT_MB" \
    -max_len="$MAX_LEN" -timeout="$TIMEOUT" -print_final_stats=1 >"$log" 2>&1; then
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
    echo "fuzz $target: ok (${runs:-?} inputs in $((SECONDS - start)) s)"
  else
    failed+=("$target")
    echo "fuzz $target: FAILED after $((SECONDS - start)) s; the end of its log:" >&2
    tail -n 60 "$log" >&2
    echo "(the failing input is under fuzz/artifacts/$target/)" >&2
  fi
done

if ((${#failed[@]})); then
  echo "fuzz targets FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "all ${#targets[@]} fuzz targets passed"
