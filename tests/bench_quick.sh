#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI's short benchmark run: every scenario of ferry_bench briefly, against a
# ferryd on the simulated device. It asserts nothing about time; it fails if
# any upload path fails. usage: bench_quick.sh BUILD_DIR
set -euo pipefail
build=$1
sock=$(mktemp -u /tmp/ferry-benchq-XXXXXX.sock)
unset ZE_ENABLE_VALIDATION_LAYER ZE_ENABLE_PARAMETER_VALIDATION
export FERRY_SIM_DRIVER=$build/sim/libze_ferry_sim.so.1
"$build/daemon/ferryd" --sim --socket "$sock" --log-level warn &
d=$!
trap 'kill $d 2>/dev/null || true; rm -f "$sock"' EXIT
for _ in $(seq 200); do [[ -S $sock ]] && break; kill -0 $d 2>/dev/null || break; sleep 0.05; done
[[ -S $sock ]] || { echo "bench_quick: ferryd did not start listening on $sock" >&2; exit 1; }
"$build/bench/ferry_bench" --socket "$sock" --daemon-pid $d --quick
