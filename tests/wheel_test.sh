#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The wheel, as the README's "From Python" makes and installs it, used as a
# PyTorch user would: its two lines run as written in the tree (the wheel
# built, then installed with the pip first on PATH) into a plain virtual
# environment, offline, and into one that sees Debian's torch (a user's
# environment with torch in it). In each, from outside the tree: the package
# and its libferry are the wheel's, the Python tests pass against it,
# `ferry-run` is on the environment's PATH and stages an unmodified Level Zero
# program's upload through a running ferryd (the build's), and
# `ferry-run --stats -- python3 -c 'import ferry.torch'` runs.
#   bash tests/wheel_test.sh [BUILD]     (BUILD: the README's build/, for ferryd and the test programs)
# Exit 0: passed; 77: skipped (with the reason).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
fail() { echo "wheel_test: FAIL: $*" >&2; exit 1; }
skip() { echo "wheel_test: skipped: $*"; exit 77; }
. "$root/tests/readme_lib.sh"

py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3) || skip "no python3"
"$py" -c 'import venv, ensurepip' 2>/dev/null || skip "no venv module with pip (python3-venv)"
for p in daemon/ferryd tools/ferryctl tests/ze_upload; do
  [[ -x $build/$p ]] || fail "$build/$p is not built: run the README's build lines first (scripts/test.sh does)"
done
lines=$(readme_block "### From Python")
grep -q '^bash scripts/wheel.sh' <<<"$lines" || fail "README, From Python: no wheel.sh line: $lines"
grep -q '^pip install dist/ferry-\*.whl' <<<"$lines" || fail "README, From Python: no pip install line: $lines"

tmp=$(mktemp -d)
daemon=""
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
want=$(head -n1 "$root/VERSION")
sock=$tmp/ferryd.sock
FERRY_SIM_FAST=1 "$build/daemon/ferryd" --sim --socket "$sock" --log-level warn &
daemon=$!

# One environment: made, the README's lines run in the tree with its bin
# first on PATH (the wheel is built once, by the first), then used.
check_env() {
  local name=$1 env=$tmp/$1
  shift
  "$py" -m venv "$@" "$env" >/dev/null || fail "$name: python3 -m venv $*"
  (
    cd "$root"
    export PATH=$env/bin:$PATH PIP_NO_INDEX=1  # offline: pip reaches no index
    while IFS= read -r line <&3; do
      [[ -z $line ]] && continue
      [[ $line == bash\ scripts/wheel.sh* && -n ${built:-} ]] && continue
      echo "\$ $line"
      eval "$line" </dev/null || fail "$name: README, From Python: this line failed: $line"
    done 3<<<"$lines"
  )
  built=1
  site=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
  got=$(cd "$tmp" && env -u FERRY_LIBRARY -u PYTHONPATH "$env/bin/python" -c \
    'import ferry, os, ferry._api as a; print(ferry.__version__, ferry.library_version(), os.path.dirname(ferry.__file__), a._c._name)')
  [[ $got == "$want $want $site/ferry $site/ferry/_native/libferry.so.0" ]] ||
    fail "$name: imported $got; wanted version $want from $site/ferry with its own libferry"
  [[ -x $env/bin/ferry-run ]] || fail "$name: no ferry-run in $env/bin"
  # The Python tests against the installed package (not the tree's); their
  # device views of buffers open the simulated device the wheel carries.
  local tests=(test_ferry.py)
  "$env/bin/python" -c 'import torch' 2>/dev/null && tests+=(test_torch.py)
  for t in "${tests[@]}"; do
    (cd "$tmp" && env -u FERRY_LIBRARY -u PYTHONPATH FERRY_TEST_INSTALLED=1 FERRYD="$build/daemon/ferryd" \
      ZE_ENABLE_ALT_DRIVERS="$site/ferry/_native/libze_ferry_sim.so.1" \
      FERRYCTL="$build/tools/ferryctl" "$env/bin/python" "$root/python/tests/$t" 2>"$tmp/$t.log") ||
      { tail -40 "$tmp/$t.log"; fail "$name: python/tests/$t against the wheel"; }
    echo "$name: python/tests/$t: $(tail -1 "$tmp/$t.log")"
  done
  # ferry-run from the environment's PATH: an unmodified Level Zero program's
  # upload staged. Where no GPU driver is, ferry-run picks the simulated one
  # it carries; elsewhere it is named.
  local alt=()
  ldconfig -p 2>/dev/null | grep -qE 'libze_intel_gpu|libcuda\.so\.1' && alt=(ZE_ENABLE_ALT_DRIVERS="$site/ferry/_native/libze_ferry_sim.so.1")
  out=$(cd "$tmp" && env -u ZE_ENABLE_ALT_DRIVERS -u FERRY_SIM_DRIVER -u FERRY_LIBRARY "${alt[@]}" PATH="$env/bin:$PATH" \
    ferry-run --stats --socket "$sock" -- "$build/tests/ze_upload" --mode hazard 4194304 2>"$tmp/run.log") ||
    { cat "$tmp/run.log"; fail "$name: ferry-run -- ze_upload: $out"; }
  [[ $out == "4194304 original device 0 "* ]] || { cat "$tmp/run.log"; fail "$name: the wheel's ferry-run did not stage the upload: $out"; }
  grep -q '"staged":1,' "$tmp/run.log" || { cat "$tmp/run.log"; fail "$name: ferry-run --stats did not count the staged upload"; }
  echo "$name: ferry-run from $env/bin staged ze_upload's 4 MiB upload"
  # ferry-run --stats -- python3 -c '...': the environment's python3, and
  # ferry.torch where torch is.
  local code='import ferry; print("ok")'
  if "$env/bin/python" -c 'import torch' 2>/dev/null; then
    code='import torch, ferry.torch; print("ok")'
  else
    # Without torch, ferry.torch says what to install.
    out=$(cd "$tmp" && "$env/bin/python" -c 'import ferry.torch' 2>&1) && fail "$name: ferry.torch imported without torch"
    [[ $out == *"ferry.torch needs PyTorch in this environment"*"pip install torch"* ]] ||
      fail "$name: import ferry.torch without torch: $out"
  fi
  out=$(cd "$tmp" && env -u FERRY_LIBRARY PATH="$env/bin:$PATH" ferry-run --stats --socket "$sock" -- python3 -c "$code" 2>"$tmp/run.log") ||
    { cat "$tmp/run.log"; fail "$name: ferry-run --stats -- python3 -c '$code'"; }
  [[ $out == ok ]] && grep -q '^ferry-run: {"pid":' "$tmp/run.log" ||
    { cat "$tmp/run.log"; fail "$name: ferry-run --stats -- python3 -c '$code': $out"; }
  echo "$name: ok ($code, under ferry-run)"
}
check_env plain
check_env with-torch --system-site-packages
whl=$(ls "$root"/dist/ferry-"$want"-py3-none-manylinux_2_*_"$(uname -m)".whl) || fail "no tagged wheel in dist/"
echo "wheel_test: ok ($(basename "$whl"), in a plain venv and one with Debian's torch)"
