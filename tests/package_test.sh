#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian packages: builds them from the tree (scripts/deb-build.sh, which
# fails on any lintian tag not overridden with a reason), then, on a machine
# it may change (root, and CI=true or FERRY_PACKAGE_INSTALL=1), installs
# ferryd and libferry0 with apt-get as an operator would, checks that the
# ferry user and GPU 0's socket were set up, starts the installed ferryd the
# way ferryd@0.socket and ferryd@0.service would (systemd where it runs as
# init, else the unit's own ExecStart under systemd-socket-activate as user
# ferry), queries it with ferryctl, uploads through it from a C program built
# with the installed pkg-config file and from the installed Python package,
# then purges everything and checks that no file of the packages is left.
#   bash tests/package_test.sh [OUT]
# Exit 0: passed; 77: the install part skipped (the packages were still built
# and checked).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/deb}
fail() { echo "package_test: FAIL: $*" >&2; exit 1; }

bash "$root/scripts/deb-build.sh" "$out"
out=$(cd "$out" && pwd)
debs=("$out"/ferryd_*.deb "$out"/libferry0_*.deb)
dev=("$out"/libferry-dev_*.deb "$out"/python3-ferry_*.deb)
for f in "${debs[@]}" "${dev[@]}"; do [[ -f $f ]] || fail "not built: $f"; done

if [[ $(id -u) -ne 0 || ( ${CI:-} != true && ${FERRY_PACKAGE_INSTALL:-0} != 1 ) ]]; then
  echo "package_test: skipped: installing needs root and CI=true or FERRY_PACKAGE_INSTALL=1 (it changes this machine)"
  exit 77
fi
for p in ferryd libferry0 libferry-dev python3-ferry; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    echo "package_test: skipped: $p is installed here already; it is not this test's to purge"
    exit 77
  fi
done

export DEBIAN_FRONTEND=noninteractive
tmp=$(mktemp -d)
daemon=""
# leave_daemon: the package's own removal must stop the ferryd started
# "Without systemd" (checked after); otherwise (a failure on the way) it goes first.
purge() {
  if [[ -n $daemon && ${1:-} != leave_daemon ]]; then
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    daemon=""
  fi
  # Only the installed ones: apt knows a local .deb's name only while installed.
  local installed=()
  for p in python3-ferry libferry-dev ferryd libferry0; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && installed+=("$p")
  done
  if ((${#installed[@]})); then
    apt-get purge -y -qq "${installed[@]}" >"$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log"; return 1; }
  fi
}
trap 'purge; rm -rf "$tmp"' EXIT

echo "== a login account named ferry that exists already: the install is refused, saying why"
if ! getent passwd ferry >/dev/null; then
  useradd --create-home --shell /bin/bash ferry
  if apt-get install -y -qq "${debs[@]}" >"$tmp/apt0.log" 2>&1; then
    userdel -r ferry 2>/dev/null || true
    fail "ferryd installed over a login account named ferry"
  fi
  grep -q "a user named ferry exists already" "$tmp/apt0.log" || { cat "$tmp/apt0.log"; fail "the refusal does not say why"; }
  dpkg --purge ferryd libferry0 >/dev/null 2>&1 || true
  userdel -r ferry 2>/dev/null || true
  getent group ferry >/dev/null && groupdel ferry 2>/dev/null || true
fi

. "$root/tests/readme_lib.sh"
# README, "From Debian packages": its install line, as written (from the tree's
# root, where it finds ./build/deb), with apt's question answered yes as a
# user would; for another OUT, the same packages named here.
pkg_block=$(readme_block "**From Debian packages**")
readme_apt=$(readme_command "$pkg_block" "apt-get install")
[[ $readme_apt == *ferryd_*libferry0_*libferry-dev_*python3-ferry_* ]] ||
  fail "README, From Debian packages: the install line does not name the four packages: $readme_apt"
if [[ $out == "$root/build/deb" ]]; then
  echo "== the README's install line, as written: $readme_apt"
  printf 'APT::Get::Assume-Yes "true";\nquiet "2";\n' >"$tmp/apt.conf"
  (cd "$root" && APT_CONFIG=$tmp/apt.conf bash -c "$readme_apt") >"$tmp/apt.log" 2>&1 ||
    { cat "$tmp/apt.log"; fail "the README's apt-get install line"; }
else
  echo "== apt-get install of the four packages in $out"
  apt-get install -y -qq "${debs[@]}" "${dev[@]}" >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log"; fail "apt-get install"; }
fi
dpkg-query -L ferryd libferry0 libferry-dev python3-ferry | sort -u >"$tmp/files"
id ferry >/dev/null 2>&1 || fail "no user ferry after the install (systemd-sysusers)"
id -nG ferry | tr ' ' '\n' | grep -qx render || fail "user ferry is not in group render: $(id ferry)"
[[ -L /etc/systemd/system/sockets.target.wants/ferryd@0.socket ]] ||
  fail "ferryd@0.socket not enabled: $(ls -l /etc/systemd/system/sockets.target.wants/ 2>&1)"
[[ -f /etc/ferry/ferryd.conf ]] || fail "no /etc/ferry/ferryd.conf"
dpkg-query -W -f='${Conffiles}\n' ferryd | grep -q /etc/ferry/ferryd.conf || fail "ferryd.conf is not a conffile"
/usr/bin/ferryd --config /etc/ferry/ferryd.conf --check-config | grep -q "settings valid" ||
  fail "the installed ferryd.conf does not pass --check-config"
verify=$(cd /lib/systemd/system && systemd-analyze verify --man=no ferryd@0.socket ferryd@0.service ferry-mps.service \
  ferry-metrics.service ferry-metrics.timer 2>&1) || fail "systemd-analyze verify on the installed units: $verify"

sock=/run/ferry/ferryd-0.sock
if [[ -d /run/systemd/system ]]; then
  echo "== systemd runs here: ferryd@0.socket must be listening; the first connection starts ferryd@0.service"
  systemctl is-active --quiet ferryd@0.socket || fail "ferryd@0.socket is not active: $(systemctl status ferryd@0.socket 2>&1 | head -20)"
else
  echo "== no systemd as init here: the README's command for that (the unit's user, socket, group and mode)"
  exec_start=$(sed -n 's/^ExecStart=//p' /lib/systemd/system/ferryd@.service | sed 's/%i/0/g')
  [[ $exec_start == "/usr/bin/ferryd --config /etc/ferry/ferryd.conf --device 0 --socket $sock" ]] ||
    fail "unexpected ExecStart: $exec_start"
  [[ ! -e /run/ferry ]] || fail "/run/ferry exists before the daemon was started (left by something else?)"
  # The postinst said how (and that systemd does not run here).
  grep -q "setpriv --reuid ferry" "$tmp/apt.log" || fail "the postinst did not say how to start ferryd without systemd"
  # Every line the README gives, the postinst prints too (its own comments aside).
  while IFS= read -r line; do
    line=${line%%#*}
    line=${line%"${line##*[![:space:]]}"}
    [[ -z $line ]] && continue
    grep -qF -- "$line" "$tmp/apt.log" || fail "the postinst does not print the README's line: $line"
  done < <(sed -n '/^# ferryd without systemd: begin/,/^# ferryd without systemd: end/p' "$root/README.md" | grep -v '^#')
  # README, "Without systemd": these lines, as they are there.
  readme=$(sed -n '/^# ferryd without systemd: begin/,/^# ferryd without systemd: end/p' "$root/README.md" | grep -v '^#')
  [[ -n $readme ]] || fail "README.md has no 'ferryd without systemd' command"
  (umask 0077; bash -c "$readme") 2>"$tmp/ferryd.log"
  for _ in $(seq 1 500); do
    [[ -S $sock ]] && break
    sleep 0.02
  done
  [[ -S $sock ]] || fail "the socket did not appear: $(cat "$tmp/ferryd.log")"
  daemon=$(cat /run/ferry/ferryd-0.pid 2>/dev/null || pgrep -u ferry -x ferryd)
  mode=$(stat -c '%a %U %G' "$sock")
  [[ $mode == "660 ferry ferry" ]] || fail "the socket is $mode, not 660 ferry ferry"
  # A member of group ferry connects; someone else is told the truth.
  id ferrymember >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin -G ferry ferrymember
  id nonmember >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin nonmember
fi

echo "== ferryctl status against the installed daemon: the README's line, as written"
readme_status=$(readme_command "$pkg_block" "ferryctl status")
[[ -n $readme_status ]] || fail "README, From Debian packages: no 'ferryctl status' line"
# The package's ferryctl, on its default socket (nothing of a /usr/local
# install or of this shell's $FERRY_SOCKET in the way).
[[ $(command -v ferryctl) == /usr/bin/ferryctl ]] || fail "ferryctl on PATH is $(command -v ferryctl), not the package's"
status=$(cd /tmp && env -u FERRY_SOCKET bash -c "$readme_status" 2>&1) || fail "$readme_status: $status"
grep -q "simulated in place of a GPU" <<<"$status" || fail "ferryctl status does not say the device is simulated: $status"
echo "$status" | head -4

echo "== libferry-dev and python3-ferry: a C client through pkg-config, a Python client"
flags=$(pkg-config --cflags --libs ferry | xargs)
[[ $flags == "-lferry" ]] || fail "pkg-config --cflags --libs ferry: '$flags' (system paths should be left out)"
cc -std=c11 -Wall -Werror "$root/examples/consumer/consumer.c" $flags -o "$tmp/consumer"
"$tmp/consumer" "$sock" | grep -q "1 MiB verified" || fail "the C client built against the installed package"
man -w ferry_upload >/dev/null 2>&1 || [[ -e /usr/share/man/man3/ferry_upload.3.gz ]] || fail "no ferry_upload(3)"
(cd "$tmp" && FERRY_LIBRARY= /usr/bin/python3 -c "
import ferry
with ferry.Client('$sock') as c:
    b = c.alloc(4096)
    c.wait(c.upload(b, b'ferry' * 800))
    assert bytes(c.download(b, nbytes=4000)) == b'ferry' * 800
print('python3-ferry', ferry.__version__, 'verified')
") || fail "a Python client through the installed python3-ferry"
echo "== ferry-run: an unmodified Level Zero program on the installed simulated driver, its held upload staged"
sim=$(ls /usr/lib/*/ferry/libze_ferry_sim.so.1)
cc -std=c11 -Wall -Werror "$root/tests/ze_upload.c" -lze_loader -lpthread -o "$tmp/ze_upload"
plain=$(ZE_ENABLE_ALT_DRIVERS=$sim "$tmp/ze_upload" --mode hazard 4194304) || fail "ze_upload: $plain"
[[ $plain == "4194304 overwritten device 0 "* ]] || fail "the hazard did not show without ferry-run: $plain"
ferried=$(ZE_ENABLE_ALT_DRIVERS=$sim /usr/bin/ferry-run --socket "$sock" --report "$tmp/run.json" -- \
  "$tmp/ze_upload" --mode hazard 4194304) || fail "ze_upload under ferry-run: $ferried"
[[ $ferried == "4194304 original device 0 "* ]] || fail "the installed ferry-run did not stage the upload: $ferried"
grep -q '"staged":1,' "$tmp/run.json" || fail "ferry-run's report: $(cat "$tmp/run.json")"
man -w ferry-run >/dev/null 2>&1 || [[ -e /usr/share/man/man1/ferry-run.1.gz ]] || fail "no ferry-run(1)"
echo "== the README's first commands, as written: \"Using it\" line by line, \"From Python\" in a plain venv"
# A copy of the tree's parts the README's Python install reads (python/ and
# VERSION beside it), so that the venv and its build stay out of the tree.
mkdir -p "$tmp/user/python"
cp -r "$root/python/." "$tmp/user/python/"
cp "$root/VERSION" "$tmp/user/"
# The placeholders, made real: a program of the user's (the C example, on
# $FERRY_SOCKET) and one they cannot change (a Level Zero upload whose source
# is overwritten while the list is held). The simulated driver stands in for
# a GPU's, which the loader would find by itself.
printf '#!/bin/sh\nexec %q "$FERRY_SOCKET"\n' "$tmp/consumer" >"$tmp/user/your_program"
printf '#!/bin/sh\nexec %q --mode hazard 4194304\n' "$tmp/ze_upload" >"$tmp/user/any_program"
chmod +x "$tmp/user/your_program" "$tmp/user/any_program"
block=$(readme_block "## Using it")
[[ $block == *"ferryd --sim --socket /tmp/ferry.sock &"* ]] || fail "README, Using it: no 'ferryd --sim' line: $block"
rm -f /tmp/ferry.sock
(
  cd "$tmp/user"
  export ZE_ENABLE_ALT_DRIVERS=$sim
  readme_pid=""
  trap '[[ -n $readme_pid ]] && kill "$readme_pid" 2>/dev/null; wait' EXIT
  while IFS= read -r line; do
    [[ -z $line ]] && continue
    echo "\$ $line"
    cmd=${line%%#*}
    if [[ $cmd =~ \&[[:space:]]*$ ]]; then
      # One that runs in the background: the next line starts once it listens (as a user would see).
      eval "$line" >"$tmp/readme-ferryd.log" 2>&1
      readme_pid=$!
      for _ in $(seq 1 500); do [[ -S /tmp/ferry.sock ]] && break; sleep 0.02; done
      [[ -S /tmp/ferry.sock ]] || { cat "$tmp/readme-ferryd.log"; exit 1; }
      continue
    fi
    eval "$line" 2>&1 | tee -a "$tmp/readme-out.log" || exit 1
  done <<<"$block"
  # From Python: the install command into a plain venv, then the example, as written.
  py=$(readme_block_with "### From Python" "python3 -m venv")
  [[ $py == *"python3 -m venv"* ]] || { echo "README, From Python: no venv command: $py"; exit 1; }
  echo "\$ $py"
  # Debian's python3, as on the fresh bookworm machine the README is written for (a
  # python3 of pyenv's, say, first on PATH would make a venv with no wheel).
  PATH=/usr/bin:$PATH bash -ec "$py" >"$tmp/readme-pip.log" 2>&1 || { cat "$tmp/readme-pip.log"; exit 1; }
  example=$(awk '$0 == "### From Python" { f = 1 } f && /^```python/ { i = 1; next } i && /^```/ { exit } i { print }' \
    "$root/README.md")
  [[ -n $example ]] || { echo "README, From Python: no Python example"; exit 1; }
  FERRY_LIBRARY= venv/bin/python -c "$example" && echo "README's Python example: ran"
) || fail "the README's commands, as written, failed (above)"
grep -q "1 MiB verified" "$tmp/readme-out.log" || fail "README, Using it: your_program did not verify its upload"
grep -q "^4194304 original device 0" "$tmp/readme-out.log" ||
  fail "README, Using it: ferry-run did not stage any_program's upload: $(cat "$tmp/readme-out.log")"
if [[ ! -d /run/systemd/system ]]; then
  echo "== a member of group ferry: the C example and a ferry.torch loop; a non-member is refused, and told why"
  as() { local u=$1; shift; (cd / && setpriv --reuid "$u" --regid "$u" --init-groups "$@"); }
  install -m 0755 "$tmp/consumer" /tmp/ferry-package-consumer
  as ferrymember /tmp/ferry-package-consumer "$sock" | grep -q "1 MiB verified" ||
    fail "a member of group ferry could not upload with the C example"
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    as ferrymember env FERRY_LIBRARY= /usr/bin/python3 -c "
import torch
from ferry.torch import DataLoader
data = [torch.full((16,), float(i)) for i in range(64)]
total = sum(float(b.sum()) for b in DataLoader(data, batch_size=8, num_workers=2, device='cpu', socket='$sock'))
assert total == 16 * sum(range(64)), total
print('ferry.torch as a member of group ferry: 64 samples verified')
" || fail "a member of group ferry could not run a ferry.torch loop"
  fi
  out=$(as nonmember /tmp/ferry-package-consumer "$sock" 2>&1) && fail "a user outside group ferry connected"
  grep -q 'ask to be added to group "ferry"' <<<"$out" || fail "the refusal does not say to join group ferry: $out"
  rm -f /tmp/ferry-package-consumer
  userdel ferrymember 2>/dev/null || true
  userdel nonmember 2>/dev/null || true
fi

echo "== apt-get purge: nothing of the packages is left, no ferryd either (however it was started)"
purge leave_daemon || fail "apt-get purge"
if [[ -n $daemon ]]; then
  kill -0 "$daemon" 2>/dev/null && fail "the ferryd started without systemd (pid $daemon) runs on after the purge"
  grep -q "stopping the ferryd not started by systemd" "$tmp/purge.log" || fail "the purge did not say it stopped ferryd"
  daemon=""
fi
pgrep -u ferry -x ferryd >/dev/null && fail "a ferryd of user ferry runs on after the purge: $(pgrep -a -u ferry -x ferryd)"
dpkg-query -W -f='${Status}' ferryd 2>/dev/null | grep -q "ok installed" && fail "ferryd still installed after the purge"
left=()
while IFS= read -r f; do
  [[ -e $f && ! -d $f ]] && left+=("$f")
done <"$tmp/files"
((${#left[@]} == 0)) || fail "left after purge: ${left[*]}"
for p in /etc/ferry /run/ferry /usr/lib/python3/dist-packages/ferry /lib/systemd/system/ferryd@.service.d \
         /etc/systemd/system/sockets.target.wants/ferryd@0.socket; do
  [[ ! -e $p && ! -L $p ]] || fail "left after purge: $p"
done
if ls /var/lib/systemd/deb-systemd-helper-enabled/ 2>/dev/null | grep -q ferry; then
  fail "deb-systemd-helper still records ferry units: $(ls /var/lib/systemd/deb-systemd-helper-enabled/ | grep ferry)"
fi
echo "package_test: ok (lintian clean; installed, served the simulated device, answered ferryctl, C and Python clients verified, ferry-run staged an unmodified program's upload; purged)"
