#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Configures and builds ferry into a build folder.
# usage: scripts/build.sh BUILD_DIR [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
shift
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$root" -B "$dir" "${gen[@]}" "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
