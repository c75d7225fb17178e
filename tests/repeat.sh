#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs a built suite (ctest) ROUNDS times in a row, as CI runs it (-j 2), with
# BUSY processes spinning beside it (load the suite must survive), and prints
# one line per round: passed or the tests that failed. Exits 1 if any round
# failed. Each failing round's ctest log is kept as LOGDIR/round-N.log.
#
#   usage: tests/repeat.sh BUILD_DIR [ROUNDS]      (ROUNDS default 20)
#   env:   BUSY (default 1) spinning processes; LOGDIR (default /tmp/ferry-repeat)
#          the sanitizer options are the caller's (scripts/test.sh sets them)
set -uo pipefail
build=${1:?usage: tests/repeat.sh BUILD_DIR [ROUNDS]}
rounds=${2:-20}
busy=${BUSY:-1}
logs=${LOGDIR:-/tmp/ferry-repeat}
[[ -f $build/CTestTestfile.cmake ]] || { echo "repeat: $build is no built test tree" >&2; exit 2; }
mkdir -p "$logs"
spinners=()
for ((i = 0; i < busy; i++)); do
  (while :; do :; done) &
  spinners+=($!)
done
trap 'kill "${spinners[@]}" 2>/dev/null' EXIT
bad=0
start=$SECONDS
for ((r = 1; r <= rounds; r++)); do
  log=$logs/round-$r.log
  t0=$SECONDS
  if (cd "$build" && ctest --output-on-failure -j 2) >"$log" 2>&1; then
    echo "round $r: passed ($((SECONDS - t0)) s)"
    rm -f "$log"
  else
    bad=$((bad + 1))
    echo "round $r: FAILED ($((SECONDS - t0)) s): $(grep -E '^[[:space:]]*[0-9]+ - .* \(' "$log" | grep -v '(Skipped)' | sed 's/^[[:space:]]*[0-9]* - //' | tr '\n' ' ') log $log"
  fi
done
echo "repeat: $build, $rounds rounds with $busy busy process(es), $((rounds - bad)) passed, $bad failed, $((SECONDS - start)) s"
((bad == 0))
