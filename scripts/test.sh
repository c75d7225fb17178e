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

# The isolation tests run a client as another user: make one (as root),
# and remove it again at the end when this run made it.
if [[ $(id -u) -eq 0 ]]; then
  if ! id ferrytest >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin ferrytest
    trap 'userdel ferrytest 2>/dev/null || true' EXIT
  fi
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
    # What the test printed (after "Output:"), not its command line, which
    # may hold the same words.
    why=$(awk -v t="$name" '
      / Testing: / { inside = ($NF == t); out = 0 }
      inside && /^Output:/ { out = 1 }
      inside && out && /skipped: / { sub(/.*skipped: /, ""); print; exit }' "$dir"/Testing/Temporary/LastTest*.log 2>/dev/null)
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
  count_suite "$dir" "$log" "$rc"
}
# Adds one ctest run's counts (its output in LOG) to the totals; stops on failure.
count_suite() {
  local dir=$1 log=$2 rc=$3
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

. "$root/tests/readme_lib.sh"
# The first build and test run are the README's "Building by hand" commands,
# run as written there, so that CI fails when one stops working: warnings as
# errors through CFLAGS/CXXFLAGS (read by CMake's first configure), two tests
# at a time (CTEST_PARALLEL_LEVEL). Its install lines are tests/install_test.sh's,
# after the packages' test (the two must not be installed at once).
by_hand=$(readme_block "## Building by hand")
grep -q '^cmake -S \. -B build ' <<<"$by_hand" && grep -q 'ctest' <<<"$by_hand" &&
  grep -q '^cmake --install build ' <<<"$by_hand" ||
  { echo "README, Building by hand: no configure, ctest or install line in: $by_hand"; exit 1; }
# A build/ of the developer's own, configured without -Werror, would not be
# what CI builds: said before anything is built.
if [[ -f $root/build/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_FLAGS:STRING=.*-Werror' "$root/build/CMakeCache.txt"; then
  echo "build/ was configured before without -Werror: remove it (rm -rf build) and run again"
  exit 1
fi
echo "== the README's \"Building by hand\", as written (warnings as errors, ctest two at a time)"
log=$(mktemp)
rc=0
(
  cd "$root"
  export CFLAGS="${CFLAGS:-} -Werror" CXXFLAGS="${CXXFLAGS:-} -Werror" CTEST_PARALLEL_LEVEL=2
  cmd=""
  while IFS= read -r line <&3; do
    [[ $line == "cmake --install"* ]] && break
    [[ -z $line ]] && continue
    cmd+=$line
    [[ $line == *\\ ]] && { cmd+=$'\n'; continue; }  # a command continued on the next line
    echo "\$ $cmd"
    # stdin is not the README's lines: a command that reads it gets nothing.
    eval "$cmd" </dev/null || { r=$?; echo "README, Building by hand: this line failed ($r): $cmd"; exit "$r"; }
    cmd=""
  done 3<<<"$by_hand"
  grep -q '^CMAKE_CXX_FLAGS:STRING=.*-Werror' build/CMakeCache.txt ||
    { echo "README, Building by hand: CMake did not take CXXFLAGS=-Werror from the environment"; exit 1; }
  # The install line runs from the tree's root: the lines before must end there.
  [[ $PWD == "$root" ]] || { echo "README, Building by hand: its lines end in $PWD, where 'cmake --install build' fails"; exit 1; }
) 2>&1 | tee "$log" || rc=$?
if ! grep -q 'tests failed out of [1-9]' "$log"; then
  # No test ran: a line before ctest failed, or ctest found no tests.
  failed=$((failed + 1))
  rm -f "$log"
  summary
  exit $((rc == 0 ? 1 : rc))
fi
count_suite "$root/build" "$log" "$rc"
# One test script (exit 0 passed, 77 skipped with a "NAME: skipped: why"
# line, else failed), counted as one test.
run_script() {
  local name=$1
  shift
  local out rc=0 why
  out=$(mktemp)
  bash "$@" 2>&1 | tee "$out" || rc=$?  # pipefail: the script's status
  why=$(sed -n "s/^$name: skipped: //p" "$out" | head -1)
  rm -f "$out"
  case $rc in
    0) passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)); skips+="  $name: ${why:-no reason printed}"$'\n' ;;
    *) failed=$((failed + 1)); summary; exit "$rc" ;;
  esac
}
# The Debian packages: built, lintian clean, and (on CI, as root) installed,
# used and purged (tests/package_test.sh).
echo "== Debian packages"
run_script package_test "$root/tests/package_test.sh" "$root/build/deb"
# The README's "Building by hand" install lines, as written, into /usr/local
# (on CI, as root), used, and removed again (tests/install_test.sh).
echo "== the README's \"Building by hand\" install"
run_script install_test "$root/tests/install_test.sh" "$root/build"
# The wheel (README, "From Python"): built, installed offline into a plain
# venv and one with Debian's torch, its tests and ferry-run run from there.
echo "== the wheel"
run_script wheel_test "$root/tests/wheel_test.sh" "$root/build"
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
