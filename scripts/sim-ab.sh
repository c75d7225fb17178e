#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# On this machine (the simulated device): ferry_bench sections against two
# builds side by side, alternating (A B A B ...), each with a ferryd of its
# own, so both see the same machine at the same time. A and B are build
# trees with the benchmarks (bench/ferry_bench), e.g. a worktree of the
# previous commit built by scripts/h200-pack.sh (build/cuda) or bench/run.sh
# (build/release).
#   A=/tmp/before/build/cuda B=build/cuda SECTIONS=124 ROUNDS=4 bash scripts/sim-ab.sh
# Prints each run's Markdown, headed "=== <build> round <n>".
set -u
A=${A:?A: the "before" build tree} B=${B:?B: the "after" build tree}
SECTIONS=${SECTIONS:-1234} ROUNDS=${ROUNDS:-3}
unset FERRY_SIM_FAST ZE_ENABLE_VALIDATION_LAYER ZE_ENABLE_PARAMETER_VALIDATION
for r in $(seq "$ROUNDS"); do
  for b in "$A" "$B"; do
    export FERRY_SIM_DRIVER=$b/sim/libze_ferry_sim.so.1
    sock=$(mktemp -u /tmp/ferry-ab-XXXXXX.sock)
    "$b/daemon/ferryd" --sim --socket "$sock" --log-level warn &
    d=$!
    for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
    echo "=== $b round $r"
    "$b/bench/ferry_bench" --socket "$sock" --daemon-pid $d --only "$SECTIONS"
    kill -TERM $d
    wait $d
    rm -f "$sock"
  done
done
