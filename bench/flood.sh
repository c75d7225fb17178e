#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Socket floods beside a ring client, and an unanswered hold, on the
# simulated device: bench/flood_bench against a ferryd of its own.
#   bash bench/flood.sh [BUILD_DIR] [RUNS] [flood_bench options]   (default build/release, 3 runs)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
runs=${2:-3}
shift $(($# >= 2 ? 2 : $#))
unset FERRY_SIM_FAST ZE_ENABLE_VALIDATION_LAYER ZE_ENABLE_PARAMETER_VALIDATION
export FERRY_SIM_DRIVER=$build/sim/libze_ferry_sim.so.1
for run in $(seq "$runs"); do
  sock=$(mktemp -u /tmp/ferry-flood-XXXXXX.sock)
  "$build/daemon/ferryd" --sim --socket "$sock" --log-level error &
  daemon=$!
  for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
  echo "run $run"
  "$build/bench/flood_bench" --socket "$sock" --daemon-pid "$daemon" "$@" || echo "flood_bench failed: $?"
  kill -TERM "$daemon"
  wait "$daemon" || true
  rm -f "$sock"
done
