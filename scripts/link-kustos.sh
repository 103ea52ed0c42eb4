#!/usr/bin/env bash
# The linker rustc calls in this workspace on x86_64 Linux (.cargo/config.toml).
#
# Every link is `cc` with rustc's arguments, unchanged, except a release build of the kustos
# executable, which is then linked a second time with the functions an idle `kustos server`
# runs placed side by side at the start of its code (scripts/idle-functions.txt, lld's
# `--symbol-ordering-file`). The kernel maps an executable's code in page-cache folios of up
# to megabytes, whole, on the first touch; spread over the 28 MiB of code, the ~6.5 MiB that
# start-up runs kept ~21 MiB of it resident (docs/BENCHMARKS.md, "Code laid out by use").
# Nothing else differs: the same objects, the same code, another order. When the second link
# fails (a linker without `--symbol-ordering-file`), the first one's output stays. Arguments
# in a response file (`@file`) hide `-o` from this script: such a link is linked as asked.
# KUSTOS_LINK_ORDER=0 links as asked (scripts/release-pgo.sh: the compiler lays that build out).
#
# The second link also packs the relative relocations (`-z pack-relative-relocs`, DT_RELR): the
# ~57,000 of a position-independent executable take 15 KiB instead of 1.3 MiB, which the
# dynamic loader reads at every start and which then stayed resident (docs/BENCHMARKS.md,
# "Packed relocations, with the code laid out"). Such an executable needs glibc 2.36 or later
# to start; an older one refuses it with "version `GLIBC_ABI_DT_RELR' not found". The packed
# link is kept only when it carries that version need (a linker that packed without it would
# leave an executable that an older glibc starts unrelocated); otherwise the executable is
# linked ordered without packing. KUSTOS_LINK_RELR=0 never packs: for an executable that
# must run on an older glibc than the one it was built on.
#
#   scripts/link-kustos.sh --names BINARY   prints the names the list is matched by: each
#                                          function symbol demangled, without crate hashes
#                                          or LLVM's clone suffixes, then a tab, then the
#                                          symbol as linked.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

names() {
  local syms
  syms=$(mktemp)
  nm --defined-only "$1" | awk '$2 ~ /^[tTwW]$/ { print $3 }' > "$syms"
  c++filt < "$syms" | sed -E 's/([A-Za-z0-9_])\[[0-9a-f]{1,16}\]/\1/g; s/::h[0-9a-f]{16}$//; s/ \[clone [^]]*\]//g' | paste - "$syms"
  rm -f "$syms"
}

if [[ ${1:-} == --names ]]; then
  [[ -f ${2:-} ]] || { echo "usage: $0 --names BINARY" >&2; exit 2; }
  names "$2"
  exit 0
fi

args=("$@")
out=
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
  [[ ${args[i]} == -o ]] && out=${args[i + 1]}
done
case ${KUSTOS_LINK_ORDER:-1}:$out in
  1:*/release/deps/kustos-*) ;;
  *) exec cc "$@" ;;
esac

cc "$@"
work=$(mktemp -d "$(dirname "$out")/.kustos-link.XXXXXX")
trap 'rm -rf "$work"' EXIT
names "$out" | awk -F'\t' 'NR == FNR { want[$0] = 1; next } ($1 in want) { print $2 }' \
  "$here/idle-functions.txt" - > "$work/order" || exit 0
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
  [[ ${args[i]} == -o ]] && args[i + 1]=$work/kustos
done
# A packed executable must say that it needs a loader that reads packed relocations.
packed_safely() {
  local sections versions
  sections=$(readelf -SW "$1") || return 1
  [[ $sections == *' .relr.dyn '* ]] || return 0
  versions=$(readelf -VW "$1") || return 1
  [[ $versions == *GLIBC_ABI_DT_RELR* ]]
}

ordered=(-Wl,--symbol-ordering-file="$work/order" -Wl,--no-warn-symbol-ordering)
if [[ ${KUSTOS_LINK_RELR:-1} != 0 ]] && cc "${args[@]}" "${ordered[@]}" -Wl,-z,pack-relative-relocs 2> "$work/err" \
  && packed_safely "$work/kustos"; then
  mv -f "$work/kustos" "$out"
elif cc "${args[@]}" "${ordered[@]}" 2> "$work/err"; then
  mv -f "$work/kustos" "$out"
fi
