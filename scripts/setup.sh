#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs every build and test dependency of ferry from Debian bookworm packages.
# Safe to run again: apt-get skips what is already installed.
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config
  clang clang-14 libclang-rt-14-dev lld
  libze1 libze-dev
  libboost1.81-dev libboost-program-options1.81-dev libboost-json1.81-dev
  catch2 libsystemd-dev systemd
  python3 python3-numpy python3-torch  # the Python package's tests, ferry.torch's against torch's DataLoader
  python3-pip python3-setuptools python3-wheel python3-venv  # pip install of the Python package, offline
  prometheus  # promtool checks ferryctl's metrics in the ops test
  dpkg-dev debhelper dh-python lintian fakeroot  # the Debian packages (scripts/deb-build.sh)
  python3-yaml  # the cluster examples' offline check (tests/deploy_check.sh)
  man-db  # the manual pages rendered without a warning (tests/man_check.py)
  universal-ctags  # the functions' lengths (tests/function_length_check.py)
)
# kubectl reads the Kubernetes manifests offline; a kubectl from elsewhere will do.
command -v kubectl >/dev/null || pkgs+=(kubernetes-client)

need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done

if ((${#need[@]})); then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # libboost1.81-* conflicts with the default 1.74 development packages.
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
