#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every test: installs what is needed, builds with warnings as errors,
# runs the suite, builds the Debian packages (installing and purging them on
# CI), then runs the suite again under AddressSanitizer+UBSan and under
# ThreadSanitizer, then fuzzes the decoder for a minute.
# Set FERRY_TEST_QUICK=1 to skip the sanitizer pass.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"

# The isolation tests run a client as another user: make one (as root).
if [[ $(id -u) -eq 0 ]]; then
  id ferrytest >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin ferrytest
  export FERRY_TEST_USER=ferrytest
fi

passed=0 failed=0 skipped=0
skips=""  # one line per skipped test: where, which, and why (its own "skipped:" line)
# The reasons the skipped tests of one build printed (ctest keeps every
# test's output in LastTest.log, skipped ones included).
skip_reasons() {
  local dir=$1 log=$2
  local name
  for name in $(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log"); do
    local why
    why=$(awk -v t="$name" '
      / Testing: / { inside = ($NF == t) }
      inside && /skipped: / { sub(/.*skipped: /, ""); print; exit }' "$dir"/Testing/Temporary/LastTest*.log 2>/dev/null)
    skips+="  $(basename "$dir")/$name: ${why:-no reason printed}"$'\n'
  done
}
summary() {
  echo "ferry: $passed passed, $failed failed, $skipped skipped"
  [[ -n $skips ]] && printf 'skipped:\n%s' "$skips"
  return 0
}
run_suite() {
  local dir=$1
  shift
  echo "== build $dir ($*)"
  bash "$root/scripts/build.sh" "$dir" -DFERRY_WERROR=ON "$@"
  echo "== test $dir"
  local log rc=0
  log=$(mktemp)
  (cd "$dir" && ctest --output-on-failure -j 2) 2>&1 | tee "$log" || rc=$?
  local total fail skip
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  fail=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
  skip=$(grep -c '(Skipped)$' "$log" || true)
  skip_reasons "$dir" "$log"
  rm -f "$log"
  passed=$((passed + ${total:-0} - ${fail:-0} - skip))
  failed=$((failed + ${fail:-0}))
  skipped=$((skipped + skip))
  if ((rc != 0)); then
    summary
    exit "$rc"
  fi
}

run_suite "$root/build/ci" -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The Debian packages: built, lintian clean, and (on CI, as root) installed,
# used and purged (tests/package_test.sh).
echo "== Debian packages"
pkglog=$(mktemp)
rc=0
bash "$root/tests/package_test.sh" "$root/build/deb" 2>&1 | tee "$pkglog" || rc=$?  # pipefail: package_test's status
why=$(sed -n 's/^package_test: skipped: //p' "$pkglog" | head -1)
rm -f "$pkglog"
case $rc in
  0) passed=$((passed + 1)) ;;
  77) skipped=$((skipped + 1)); skips+="  package_test: ${why:-no reason printed}"$'\n' ;;
  *) failed=$((failed + 1)); summary; exit "$rc" ;;
esac
if [[ ${FERRY_TEST_QUICK:-0} != 1 ]]; then
  # The sanitizer runtime must not trip over the loader's own leaks at exit.
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_suite "$root/build/asan" -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=address,undefined -DFERRY_BUILD_BENCH=OFF
  unset ASAN_OPTIONS
  # die_after_fork=0: tests fork client processes from a threaded test program.
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0
  run_suite "$root/build/tsan" -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=thread -DFERRY_BUILD_BENCH=OFF
  unset TSAN_OPTIONS
  echo "== fuzz the decoder for ${FERRY_FUZZ_SECONDS:-60} s (libFuzzer, ASan+UBSan)"
  bash "$root/tests/fuzz/run.sh" "${FERRY_FUZZ_SECONDS:-60}"
fi
summary
