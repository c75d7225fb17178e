#!/usr/bin/env bash
# Runs every test: installs what is needed, builds with warnings as errors,
# runs the suite, then runs it again under AddressSanitizer+UBSan and under
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

run_suite() {
  local dir=$1
  shift
  echo "== build $dir ($*)"
  bash "$root/scripts/build.sh" "$dir" -DFERRY_WERROR=ON "$@"
  echo "== test $dir"
  (cd "$dir" && ctest --output-on-failure -j 2)
}

run_suite "$root/build/ci" -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [[ ${FERRY_TEST_QUICK:-0} != 1 ]]; then
  # The sanitizer runtime must not trip over the loader's own leaks at exit.
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_suite "$root/build/asan" -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=address,undefined -DFERRY_BUILD_BENCH=OFF
  unset ASAN_OPTIONS
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  run_suite "$root/build/tsan" -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=thread -DFERRY_BUILD_BENCH=OFF
  unset TSAN_OPTIONS
  echo "== fuzz the decoder for ${FERRY_FUZZ_SECONDS:-60} s (libFuzzer, ASan+UBSan)"
  bash "$root/tests/fuzz/run.sh" "${FERRY_FUZZ_SECONDS:-60}"
fi
