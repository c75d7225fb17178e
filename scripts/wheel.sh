#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the wheel of the Python package `ferry` for this machine's platform:
# the package with libferry, ferry-run and its interposers, and the simulated
# Level Zero driver inside it (ferry/_native), so that
#   pip install ferry-VERSION-py3-none-manylinux_2_NN_ARCH.whl
# works in any virtual or conda environment (torch from pip included), and
# puts `ferry-run` on that environment's PATH. ferryd is not in it: it comes
# from the Debian packages or the container.
#
# Offline: the native parts are built by CMake (their own folder, libstdc++
# linked in, so no newer libstdc++ than the environment's is needed), the
# wheel by Debian's pip, setuptools and wheel (scripts/setup.sh installs them).
# The tag names the oldest glibc the native parts run on (the newest symbol
# version they need), as manylinux tags do.
#
# usage: scripts/wheel.sh [OUT_DIR (default dist)] [BUILD_DIR (default build/wheel)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/dist}")
build=$(realpath -m "${2:-$root/build/wheel}")
py=/usr/bin/python3
[[ -x $py ]] || py=python3

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# -static-libstdc++ with --exclude-libs: each part carries the libstdc++ it
# was built with and exports none of it (an interposer is loaded into the
# user's program, whose own C++ runtime it must not replace); --gc-sections
# leaves out the parts of it ferry does not call (std::random_device's
# arc4random alone would ask for glibc 2.36). Built with the
# RPATH they are installed with ($ORIGIN): each finds the others beside it.
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF -DFERRY_BUILD_BENCH=OFF \
  -DCMAKE_SHARED_LINKER_FLAGS="-static-libstdc++ -Wl,--exclude-libs,ALL -Wl,--gc-sections" \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -Wl,--gc-sections" \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target ferry ferry-run ferry_ze_run ferry_cuda_run ze_ferry_sim

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r "$root/python" "$stage/python"
cp "$root/VERSION" "$stage/VERSION"
rm -rf "$stage/python/tests" "$stage/python/build" "$stage/python/"*.egg-info
native=$stage/native
mkdir "$native"
# Real files under their sonames: what the others' NEEDED entries name.
cp -L "$build/client/libferry.so.0" "$build/interpose/libferry_run_core.so.0" "$build/interpose/libferry_ze_run.so.1" \
  "$build/interpose/libferry_cuda_run.so" "$build/interpose/ferry-run" "$build/sim/libze_ferry_sim.so.1" "$native/"

# The newest glibc symbol version any part needs: the wheel's manylinux tag.
glibc=$(for f in "$native"/*; do objdump -T "$f"; done | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n | tail -1)
minor=${glibc#GLIBC_2.}
for f in "$native"/*; do
  if objdump -p "$f" | grep -q 'NEEDED *libstdc++'; then
    echo "wheel.sh: $(basename "$f") still needs the system's libstdc++" >&2
    exit 1
  fi
done
plat="manylinux_2_${minor}_$(uname -m)"

mkdir -p "$out"
rm -f "$out"/ferry-*.whl
if ! FERRY_WHEEL_NATIVE=$native FERRY_WHEEL_PLATFORM=$plat \
  "$py" -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$out" "$stage/python" >"$stage/pip.log" 2>&1; then
  cat "$stage/pip.log" >&2
  exit 1
fi
whl=$(ls "$out"/ferry-*.whl 2>/dev/null || true)
[[ -n $whl ]] || { echo "wheel.sh: pip made no wheel" >&2; exit 1; }
echo "$whl"
