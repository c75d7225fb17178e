#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds ferryd with its CUDA backend from this tree, on Debian bookworm,
# into OUT/ferryd (Containerfile.cuda runs it; it runs on a host too).
# The Debian packages' ferryd has no CUDA backend: building it needs cuda.h,
# which only bookworm's non-free nvidia-cuda-dev carries. Only that header is
# taken from it (the backend opens the driver's libcuda.so.1 at run time); the
# flags are the packages' (prefix /usr, multiarch libdir, Debian's hardening).
#   usage: deploy/container/build-cuda-ferryd.sh SOURCE_DIR OUT_DIR   (as root)
set -euo pipefail
src=$(cd "${1:?usage: build-cuda-ferryd.sh SOURCE_DIR OUT_DIR}" && pwd)
out=${2:?usage: build-cuda-ferryd.sh SOURCE_DIR OUT_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends build-essential cmake ninja-build pkg-config libze-dev \
  libboost1.81-dev libboost-program-options1.81-dev libboost-json1.81-dev >/dev/null
# non-free's package list, apart from the system's sources: nothing else comes from it.
mkdir -p "$work/lists/partial"
cat >"$work/non-free.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt=(-o "Dir::Etc::sourcelist=$work/non-free.sources" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$work/lists"
  -o APT::Sandbox::User=root)
apt-get "${apt[@]}" update -qq
(cd "$work" && apt-get "${apt[@]}" download nvidia-cuda-dev 2>/dev/null)
mkdir -p "$work/cuda"
dpkg-deb --fsys-tarfile "$work"/nvidia-cuda-dev_*.deb | tar -x -C "$work/cuda" ./usr/include/cuda.h
rm -f "$work"/nvidia-cuda-dev_*.deb
eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_INSTALL_PREFIX=/usr \
  -DCMAKE_INSTALL_LIBDIR="lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)" -DFERRY_BUILD_TESTS=OFF \
  -DFERRY_BUILD_BENCH=OFF -DFERRY_CUDA=ON -DFERRY_CUDA_INCLUDE="$work/cuda/usr/include" >/dev/null
cmake --build "$work/build" --target ferryd >/dev/null
mkdir -p "$out"
install -m 0755 "$work/build/daemon/ferryd" "$out/ferryd"
echo "build-cuda-ferryd: $out/ferryd ($("$out/ferryd" --version 2>&1 | head -1), CUDA backend from cuda.h $(sed -n 's/^#define CUDA_VERSION //p' "$work/cuda/usr/include/cuda.h"))"
