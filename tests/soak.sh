#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Soak: repeats the fault tests (random client kills, floods, bad input, a lost
# device) for MINUTES (default 30) against fresh daemons, and stops at the
# first failure. usage: tests/soak.sh BUILD_DIR [MINUTES]
set -euo pipefail
build=$1
minutes=${2:-30}
end=$((SECONDS + minutes * 60))
runs=0
while ((SECONDS < end)); do
  if ! "$build/tests/reliability_tests" "[faults],[badinput]" >/tmp/ferry-soak.log 2>&1; then
    echo "soak: run $((runs + 1)) failed; log in /tmp/ferry-soak.log"
    exit 1
  fi
  runs=$((runs + 1))
done
echo "soak: $runs runs in $minutes min, each 200 client kills plus the bad-input and flood cases; all held"
