#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the decoder's libFuzzer target with clang (ASan + UBSan) and fuzzes
# for SECONDS (default 60), starting from the corpus kept in the repository.
# New inputs go to a scratch folder; the repository's corpus is only read.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-60}
out=${FERRY_FUZZ_BUILD:-$root/build/fuzz}
mkdir -p "$out"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$root/proto/include" "$here/decode_fuzz.cpp" "$root/proto/src/decode.cpp" -o "$out/decode_fuzz"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$out/decode_fuzz" -max_total_time="$seconds" -print_final_stats=1 "$scratch" "$here/corpus" 2>&1 | tail -n 12
