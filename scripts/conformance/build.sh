#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds Intel's Level Zero conformance suites (oneapi-src/level-zero-tests,
# commit 663d4f5a: the state that builds against bookworm's loader 1.8.12)
# and lays out a folder to run them from, for scripts/conformance/run_each.py.
# Needs the network once (git clone) and, beyond ferry's own dependencies:
#   apt-get install googletest libboost-{log,timer,chrono,system,serialization,thread,filesystem}1.81-dev
# usage: build.sh WORKDIR            (then: see docs/CONFORMANCE.md)
# An outside judge: nothing of it is copied into ferry.
set -euo pipefail
w=${1:?usage: build.sh WORKDIR}
mkdir -p "$w"
cd "$w"
[[ -d src ]] || git clone -q https://github.com/oneapi-src/level-zero-tests src
git -C src checkout -f -q 663d4f5a
rm -rf src/third_party/googletest && cp -r /usr/src/googletest src/third_party/
touch src/mediadata/internal/bmp/input.bmp  # absent from some snapshots; only image tests read it
cmake -S src -B build -G Ninja -DGROUP=/conformance_tests/core -DCMAKE_BUILD_TYPE=Release >/dev/null
suites="test_driver test_device test_context test_memory test_usm test_copy test_event test_fence test_cmdlist
  test_cmdqueue test_ipc test_ipc_memory test_barrier"
helpers="test_ipc_event_helper test_import_helper test_process_helper test_affinity_helper"
ninja -C build -j2 $suites $helpers
mkdir -p run/ipc run/memory run/multiprocess run/device
for t in $suites $helpers; do cp "$(find build -name "$t" -type f -executable | head -1)" run/; done
cp run/test_ipc_event_helper run/ipc/
cp run/test_import_helper run/memory/
cp run/test_process_helper run/multiprocess/
cp run/test_affinity_helper run/device/
find src/conformance_tests/core -name '*.spv' -exec cp {} run/ \;
cp src/mediadata/merged/png/test_input.png run/
echo "built: run them from $w/run (scripts/conformance/run_each.py)"
