#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's "Building by hand" install, as written: its `cmake --install`
# and `ldconfig` lines, run in the tree after scripts/test.sh built BUILD from
# the same block. Then what those lines promise is used from /usr/local:
# ferryd and ferryctl found on PATH, a C program built with pkg-config and one
# with find_package(ferry), ferry-run staging an unmodified Level Zero
# program's upload, the Python package, the man pages and the units written
# for the prefix. Then every installed file is removed (the list an install
# into a scratch folder gave, none of which may exist before) and the
# loader's cache rebuilt.
#   bash tests/install_test.sh [BUILD]       (BUILD: the README's build/)
# It changes the machine: it installs only as root with CI=true or
# FERRY_PACKAGE_INSTALL=1, and only where /usr/local holds no ferry yet.
# Exit 0: passed; 77: skipped (with the reason).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
skip() { echo "install_test: skipped: $*"; exit 77; }
. "$root/tests/readme_lib.sh"

[[ $(id -u) -eq 0 && ( ${CI:-} == true || ${FERRY_PACKAGE_INSTALL:-0} == 1 ) ]] ||
  skip "installing into /usr/local needs root and CI=true or FERRY_PACKAGE_INSTALL=1 (it changes this machine)"
[[ $(cd "$build" 2>/dev/null && pwd) == "$root/build" ]] ||
  fail "$build is not the README's build/ ($root/build): the README's lines install that one"
[[ -f $build/CMakeCache.txt ]] || fail "$build is not built: run the README's build lines first (scripts/test.sh does)"
for p in ferryd libferry0 libferry-dev python3-ferry; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" &&
    skip "the $p package is installed: /usr/local's copy would shadow it, or it /usr/local's"
done

lines=$(readme_block "## Building by hand" | sed -n '/^cmake --install/,$p')
grep -q '^cmake --install build --prefix /usr/local' <<<"$lines" || fail "README, Building by hand: no install line: $lines"
grep -q '^ldconfig' <<<"$lines" || fail "README, Building by hand: no ldconfig line after the install: $lines"

tmp=$(mktemp -d)
daemon=""
# What the install will place, learnt by installing into a scratch folder
# first: the files this test may remove afterwards, none of which may exist
# before (a ferry installed here, a ferryd.conf someone edited, a pip
# install's package are not this test's to overwrite or remove).
DESTDIR=$tmp/stage cmake --install "$build" --prefix /usr/local >"$tmp/stage.log" 2>&1 ||
  { rm -rf "$tmp"; cat "$tmp/stage.log" 2>/dev/null; fail "cmake --install into a scratch folder"; }
(cd "$tmp/stage" && find . -type f -o -type l) | sed 's/^\.//' | sort >"$tmp/files"
grep -qvx '/usr/local/.*' "$tmp/files" && { rm -rf "$tmp"; fail "the install places files outside /usr/local: $(grep -vx '/usr/local/.*' "$tmp/files")"; }
while IFS= read -r f; do
  [[ ! -e $f && ! -L $f ]] || { rm -rf "$tmp"; skip "$f exists already: this test would overwrite it"; }
done <"$tmp/files"
rm -rf "$tmp/stage"
before=$(mktemp)
find /usr/local -xdev -type d | sort >"$before"
remove() {
  if [[ -n $daemon ]]; then
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    daemon=""
  fi
  # Only what the install placed (none of it was there before), and the
  # folders it made, deepest first.
  while IFS= read -r f; do rm -f -- "$f"; done <"$tmp/files"
  find /usr/local -xdev -type d | sort | comm -13 "$before" - | sort -r | while IFS= read -r d; do
    rmdir -- "$d" 2>/dev/null || true
  done
  ldconfig
}
trap 'remove; rm -rf "$tmp" "$before"' EXIT
export PYTHONDONTWRITEBYTECODE=1  # the installed package's folder must hold only what the install put there

echo "== the README's install lines, as written"
(
  cd "$root"
  while IFS= read -r line; do
    [[ -z $line ]] && continue
    echo "\$ $line"
    eval "$line" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
  done <<<"$lines"
) || fail "the README's install lines failed (above)"

echo "== what they installed, used"
[[ $(command -v ferryd) == /usr/local/bin/ferryd ]] || fail "ferryd on PATH is $(command -v ferryd || echo nothing)"
linked=$(ldd /usr/local/bin/ferry-run)
[[ $linked == *'libferry.so.0 => /usr/local/lib/libferry.so.0'* ]] ||
  fail "ferry-run does not find /usr/local's libferry after ldconfig: $linked"
sock=$tmp/ferry.sock
ferryd --sim --socket "$sock" 2>"$tmp/ferryd.log" &
daemon=$!
for _ in $(seq 1 500); do [[ -S $sock ]] && break; kill -0 "$daemon" 2>/dev/null || break; sleep 0.02; done
[[ -S $sock ]] || fail "the installed ferryd --sim did not listen: $(cat "$tmp/ferryd.log")"
status=$(ferryctl --socket "$sock" status 2>&1) || fail "ferryctl status: $status"
grep -q "device .*simulated" <<<"$status" || fail "ferryctl status does not name the simulated device: $status"

[[ $(pkg-config --variable=prefix ferry) == /usr/local ]] || fail "pkg-config finds another ferry.pc: $(pkg-config --path ferry)"
flags=$(pkg-config --cflags --libs ferry | xargs)
[[ $flags == *-lferry* ]] || fail "pkg-config --cflags --libs ferry: '$flags'"
cc -std=c11 -Wall -Werror "$root/examples/consumer/consumer.c" $flags -o "$tmp/consumer-pc"
"$tmp/consumer-pc" "$sock" | grep -q "1 MiB verified" || fail "the C example built with pkg-config"
cmake -S "$root/examples/consumer" -B "$tmp/consumer" >"$tmp/cmake.log" 2>&1 &&
  cmake --build "$tmp/consumer" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "examples/consumer with find_package(ferry)"; }
grep -qx 'ferry_DIR:PATH=/usr/local/lib/cmake/ferry' "$tmp/consumer/CMakeCache.txt" ||
  fail "find_package(ferry) found another: $(grep '^ferry_DIR' "$tmp/consumer/CMakeCache.txt")"
"$tmp/consumer/consumer" "$sock" | grep -q "1 MiB verified" || fail "the C example built with find_package(ferry)"

sim=/usr/local/lib/ferry/libze_ferry_sim.so.1
[[ -f $sim ]] || fail "no simulated driver at $sim"
cc -std=c11 -Wall -Werror "$root/tests/ze_upload.c" -lze_loader -lpthread -o "$tmp/ze_upload"
ferried=$(ZE_ENABLE_ALT_DRIVERS=$sim ferry-run --socket "$sock" -- "$tmp/ze_upload" --mode hazard 4194304) ||
  fail "ze_upload under the installed ferry-run: $ferried"
[[ $ferried == "4194304 original device 0 "* ]] || fail "the installed ferry-run did not stage the upload: $ferried"

(cd "$tmp" && FERRY_LIBRARY= /usr/bin/python3 -c "
import ferry
assert ferry.__file__.startswith('/usr/local/'), ferry.__file__
with ferry.Client('$sock') as c:
    b = c.alloc(4096)
    c.wait(c.upload(b, b'ferry' * 800))
    assert bytes(c.download(b, nbytes=4000)) == b'ferry' * 800
print('the installed Python package: verified')
") || fail "a Python client through /usr/local's ferry package"

for page in ferryd ferryctl ferry-run libferry ferry_upload; do
  found=$(man -w "$page" 2>/dev/null) && found=$(readlink -f "$found")  # Debian's /usr/local/man is share/man
  [[ $found == /usr/local/share/man/* ]] || fail "man -w $page: $(man -w "$page" 2>&1)"
done
exec_start=$(sed -n 's/^ExecStart=//p' /usr/local/lib/systemd/system/ferryd@.service)
[[ $exec_start == "/usr/local/bin/ferryd --config /usr/local/etc/ferry/ferryd.conf "* ]] ||
  fail "ferryd@.service's ExecStart is not written for /usr/local: $exec_start"
/usr/local/bin/ferryd --config /usr/local/etc/ferry/ferryd.conf --check-config | grep -q "settings valid" ||
  fail "the installed ferryd.conf does not pass --check-config"

echo "== removed again: every file the install placed"
cmp -s "$tmp/files" <(sort "$build/install_manifest.txt") ||
  fail "the install placed other files than the scratch install: $(diff "$tmp/files" <(sort "$build/install_manifest.txt"))"
remove
left=$(find /usr/local -xdev -type d | sort | comm -13 "$before" -)
[[ -z $left ]] || fail "folders left after the removal: $left"
while IFS= read -r f; do [[ ! -e $f ]] || fail "left after the removal: $f"; done <"$tmp/files"
echo "install_test: ok (the README's install lines; ferryd, ferryctl, ferry-run, pkg-config, find_package, Python and man pages from /usr/local; removed)"
