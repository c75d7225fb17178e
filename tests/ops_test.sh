#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Operations checks: the systemd units verify cleanly (warnings fail), their
# security exposure is printed; socket activation through
# systemd-socket-activate with real client uploads; READY=1 and STOPPING=1
# seen on a NOTIFY_SOCKET; `cmake --install` into a prefix, then a consumer
# project built against it with pkg-config and with find_package, run against
# the installed ferryd. usage: ops_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d /tmp/ferry-ops-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
wait_for_socket() {
  for _ in $(seq 200); do [[ -S $1 ]] && return 0; sleep 0.05; done
  fail "no socket at $1"
}
export FERRY_SIM_DRIVER=$build/sim/libze_ferry_sim.so.1 FERRY_SIM_FAST=1

echo "== systemd-analyze verify (warnings are failures)"
cp "$build/tests/units/ferryd@.service" "$tmp/ferryd@0.service"
cp "$build/tests/units/ferryd@.socket" "$tmp/ferryd@0.socket"
cp "$build/tests/units/ferry-metrics.service" "$build/tests/units/ferry-metrics.timer" "$build/tests/units/ferry-mps.service" "$tmp/"
cp -r "$build/tests/units/ferryd@0.service.d" "$tmp/"
out=$(cd "$tmp" && systemd-analyze verify --man=no ./ferryd@0.service ./ferryd@0.socket ./ferry-metrics.service \
  ./ferry-metrics.timer ./ferry-mps.service 2>&1) || fail "verify: $out"
[[ -z $out ]] || fail "systemd-analyze verify warned: $out"
# The MPS unit names no manual page a host may lack (NVIDIA's): verify with
# the man page check on, as on any host.
out=$(cd "$tmp" && systemd-analyze verify ./ferry-mps.service 2>&1) || fail "verify of ferry-mps.service with man pages: $out"
[[ -z $out ]] || fail "systemd-analyze verify warned on ferry-mps.service: $out"
grep -q "^ExecStart=.*nvidia-cuda-mps-control -d -M'$" "$tmp/ferry-mps.service" || fail "ferry-mps.service does not start the multi-user server (-M)"
exposure=$(cd "$tmp" && systemd-analyze security --offline=true ./ferry-mps.service 2>&1 | sed -n 's/.*Overall exposure level for ferry-mps.service: \([0-9.]*\).*/\1/p')
awk -v e="$exposure" 'BEGIN { exit !(e != "" && e + 0 <= 5.0) }' || fail "ferry-mps.service exposure ${exposure:-?} (want at most 5.0)"
echo "ok: units verify without a warning; ferry-mps.service: -M, exposure $exposure"
echo "== systemd-analyze security --offline=true"
(cd "$tmp" && systemd-analyze security --offline=true ./ferryd@0.service 2>&1 | tail -n 4) || true

echo "== socket activation and readiness"
sock=$tmp/activated.sock
python3 - "$tmp/notify" "$tmp/notify.log" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(60)
with open(sys.argv[2], "a") as f:
    while True:
        try:
            d = s.recv(4096).decode()
        except socket.timeout:
            break
        f.write(d + "\n")
        f.flush()
        if "STOPPING=1" in d:
            break
PY
pids+=($!)
for _ in $(seq 100); do [[ -S $tmp/notify ]] && break; sleep 0.05; done
# systemd-socket-activate starts its program with a clean environment: -E passes ours on.
NOTIFY_SOCKET=$tmp/notify systemd-socket-activate -l "$sock" -E NOTIFY_SOCKET -E FERRY_SIM_DRIVER -E FERRY_SIM_FAST \
  "$build/daemon/ferryd" --sim --socket "$sock" --log-level info 2>"$tmp/daemon.log" &
d=$!
pids+=($d)
wait_for_socket "$sock"
"$build/examples/multi_upload" -s "$sock" -p 2 -n 20 -b 100000 || fail "uploads through the activated socket"
grep -q "using the socket passed by systemd" "$tmp/daemon.log" || fail "ferryd did not adopt the passed socket"
grep -q "^READY=1" "$tmp/notify.log" || fail "no READY=1 on NOTIFY_SOCKET"
grep -q "^STATUS=" "$tmp/notify.log" || fail "no STATUS= on NOTIFY_SOCKET"
kill -TERM "$d"
wait "$d" || fail "ferryd did not exit 0 after SIGTERM"
for _ in $(seq 100); do grep -q "STOPPING=1" "$tmp/notify.log" && break; sleep 0.05; done
grep -q "STOPPING=1" "$tmp/notify.log" || fail "no STOPPING=1 on NOTIFY_SOCKET"
echo "ok: adopted the socket, uploads verified, READY=1 / STATUS= / STOPPING=1 seen:"
sed 's/^/    /' "$tmp/notify.log" | head -n 6

echo "== install, then consumer projects against the installed tree"
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/ferryd bin/ferryctl lib/libferry.so include/ferry/ferry.h include/ferry/ferry.hpp \
  lib/pkgconfig/ferry.pc lib/cmake/ferry/ferryConfig.cmake lib/systemd/system/ferryd@.service \
  lib/systemd/system/ferryd@.socket lib/systemd/system/ferry-metrics.service lib/systemd/system/ferry-metrics.timer lib/systemd/system/ferry-mps.service lib/systemd/system/ferryd@.service.d/mps.conf etc/ferry/ferryd.conf share/man/man8/ferryd.8 share/man/man1/ferryctl.1 \
  share/man/man3/libferry.3 share/man/man3/ferry_upload.3 share/man/man3/ferry_connect.3 share/man/man7/ferry_direct.7 \
  lib/ferry/libze_ferry_sim.so.1; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done
cc -std=c11 -Wall -Werror "$src/examples/consumer/consumer.c" \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs ferry) -Wl,-rpath,"$prefix/lib" \
  -o "$tmp/consumer-pkgconfig"
cmake -S "$src/examples/consumer" -B "$tmp/consumer-cmake" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer-cmake" >/dev/null
sock2=$tmp/installed.sock
unset FERRY_SIM_DRIVER  # the installed ferryd finds its simulated driver beside itself
"$prefix/bin/ferryd" --sim --socket "$sock2" --log-level warn &
d2=$!
pids+=($d2)
wait_for_socket "$sock2"
"$tmp/consumer-pkgconfig" "$sock2" || fail "consumer built with pkg-config"
"$tmp/consumer-cmake/consumer" "$sock2" || fail "consumer built with find_package(ferry)"
"$prefix/bin/ferryctl" --socket "$sock2" version || fail "installed ferryctl"
"$prefix/bin/ferryctl" --version | grep -q '^ferryctl [0-9]' || fail "ferryctl --version"
# The Python package lands where python3 looks under that prefix (Debian:
# lib/python3.X/dist-packages for /usr/local and the like), and finds the
# library installed beside it with no FERRY_LIBRARY (tests/python_package_test.sh
# checks pip's copy and the /usr layout).
site=$(/usr/bin/python3 -c 'import sysconfig as s; print(("lib/python%s/dist-packages" if "deb_system" in s.get_scheme_names() else "lib/python%s/site-packages") % s.get_python_version())')
[[ -f $prefix/$site/ferry/__init__.py ]] || fail "not installed: the Python package ($site)"
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  PYTHONPATH=$prefix/$site FERRY_LIBRARY= /usr/bin/python3 -c "
import ferry
with ferry.Client('$sock2') as c, c.alloc(64) as b:
    c.wait(b.upload(b'x' * 64)); assert bytes(b.download()) == b'x' * 64
" || fail "the installed Python package"
fi
# SIGHUP (a reload) leaves the daemon serving; SIGTERM still stops it with 0.
kill -HUP "$d2"
sleep 0.2
"$prefix/bin/ferryctl" --socket "$sock2" version >/dev/null || fail "ferryd died of SIGHUP"
kill -TERM "$d2"
wait "$d2" || fail "installed ferryd did not exit 0"
echo "ok: installed tree works through pkg-config, find_package and Python; SIGHUP is survived"

echo "== install with prefix /usr into a DESTDIR: units, configuration and pkg-config for that prefix"
dest=$tmp/dest
DESTDIR=$dest cmake --install "$build" --prefix /usr >/dev/null
unit=$dest/usr/lib/systemd/system/ferryd@.service
grep -q '^ExecStart=/usr/bin/ferryd --config /etc/ferry/ferryd.conf ' "$unit" ||
  fail "installed unit: $(grep ExecStart "$unit")"
[[ -f $dest/etc/ferry/ferryd.conf ]] || fail "ferryd.conf not installed in /etc/ferry for prefix /usr"
[[ ! -e $dest/usr/etc ]] || fail "something installed under /usr/etc"
# verify the installed units inside that root: it checks ExecStart's program there.
cp -n /lib/systemd/system/*.target /lib/systemd/system/*.slice "$dest/usr/lib/systemd/system/" 2>/dev/null || true
mkdir -p "$tmp/verify"
cp "$unit" "$tmp/verify/ferryd@0.service"
cp "$dest/usr/lib/systemd/system/ferryd@.socket" "$tmp/verify/ferryd@0.socket"
out=$(cd "$tmp/verify" && systemd-analyze verify --man=no --root="$dest" ./ferryd@0.service ./ferryd@0.socket 2>&1) ||
  fail "verify of the installed units: $out"
[[ -z $out ]] || fail "systemd-analyze verify warned on the installed units: $out"
"$dest/usr/bin/ferryd" --config "$dest/etc/ferry/ferryd.conf" --check-config --sim | grep -q "settings valid" ||
  fail "ferryd --check-config on the installed configuration"
pcdir=$(dirname "$(find "$dest/usr" -name ferry.pc)")
# Absolute paths of the prefix (not of the DESTDIR), /usr's left out by pkg-config.
libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir ferry)
[[ $libdir == /usr/* && -e $dest$libdir/libferry.so ]] || fail "ferry.pc's libdir ($libdir) has no libferry.so in the root"
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs ferry | xargs)
[[ $flags == "-lferry" ]] || fail "pkg-config --cflags --libs ferry for prefix /usr: '$flags'"
cc -std=c11 -Wall -Werror "$src/examples/consumer/consumer.c" -I"$dest/usr/include" -L"$dest$libdir" $flags \
  -Wl,-rpath,"$dest$libdir" -o "$tmp/consumer-usr"
sock4=$tmp/usr.sock
"$dest/usr/bin/ferryd" --config "$dest/etc/ferry/ferryd.conf" --sim --socket "$sock4" -q &
d4=$!
pids+=($d4)
wait_for_socket "$sock4"
"$tmp/consumer-usr" "$sock4" || fail "consumer built through the installed ferry.pc, against the installed ferryd"
kill -TERM "$d4"
wait "$d4" || fail "installed ferryd (prefix /usr) did not exit 0"
echo "ok: prefix /usr: ExecStart=/usr/bin/ferryd, --config /etc/ferry/ferryd.conf, units verify in the root, ferry.pc resolves"

# The installed ferryd reads the configuration installed with it (<prefix>/etc), unasked.
"$prefix/bin/ferryd" --check-config --sim | grep -q "configuration file: $prefix/etc/ferry/ferryd.conf" ||
  fail "the ferryd installed to $prefix does not read $prefix/etc/ferry/ferryd.conf: $("$prefix/bin/ferryd" --check-config --sim)"
echo "== ferryd --check-config and -v"
printf 'slots = 8\nmax-clients = -1\n' >"$tmp/bad.conf"
if "$build/daemon/ferryd" --config "$tmp/bad.conf" --check-config 2>"$tmp/check.err"; then fail "a negative max-clients passed --check-config"; fi
grep -q "bad.conf:2" "$tmp/check.err" || fail "--check-config did not name the line: $(cat "$tmp/check.err")"
printf 'max-clients = 4\n\nslots = 0\n' >"$tmp/range.conf"
if "$build/daemon/ferryd" --config "$tmp/range.conf" --check-config 2>"$tmp/range.err"; then fail "slots = 0 passed"; fi
grep -q "range.conf:3: slots must be between 1 and 4096" "$tmp/range.err" ||
  fail "an out-of-range setting without its file, line and range: $(cat "$tmp/range.err")"
sock5=$tmp/verbose.sock
"$build/daemon/ferryd" --sim --socket "$sock5" -v 2>"$tmp/verbose.log" &
d5=$!
pids+=($d5)
wait_for_socket "$sock5"
"$build/examples/multi_upload" -s "$sock5" -p 1 -n 2 -b 1000 >/dev/null || fail "uploads with -v"
# A second ferryd on the same socket: refused before it opens any device, naming the first.
if "$build/daemon/ferryd" --sim --socket "$sock5" -v 2>"$tmp/second.log"; then fail "a second ferryd on one socket ran"; fi
grep -q "another ferryd (pid $d5) already serves $sock5" "$tmp/second.log" || fail "the second ferryd: $(cat "$tmp/second.log")"
! grep -q "device 0:" "$tmp/second.log" || fail "the second ferryd opened the device first: $(cat "$tmp/second.log")"
kill -TERM "$d5"
wait "$d5" || true
grep -q "^debug: client 1: alloc" "$tmp/verbose.log" || fail "-v showed no debug lines: $(head -5 "$tmp/verbose.log")"
echo "ok: --check-config names file and line; -v logs each client's allocations"

echo "== ferryctl: devices, --all, --json on every command, metrics for Prometheus, watch across a restart, disconnect"
dir=$tmp/run-ferry
mkdir -p "$dir"
ctl() { "$build/tools/ferryctl" --socket-dir "$dir" "$@"; }
"$build/daemon/ferryd" --sim --socket "$dir/ferryd-0.sock" -q &
e0=$!
pids+=($e0)
wait_for_socket "$dir/ferryd-0.sock"
"$build/examples/multi_upload" -s "$dir/ferryd-0.sock" -p 2 -n 3 -b 300000 >/dev/null || fail "uploads for ferryctl"
ctl -d 0 status | grep -q "^since start 6 uploads" || fail "status by --device: $(ctl -d 0 status | grep since)"
for cmd in status ping version metrics; do
  ctl -d 0 --json "$cmd" | python3 -c 'import json,sys; json.load(sys.stdin)' || fail "ferryctl --json $cmd is not JSON"
done
ctl -d 0 --json status | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["totals"]["uploads"] == 6, d["totals"]         # calls
assert d["totals"]["upload_pieces"] >= 6, d["totals"]
assert d["totals"]["connections"] == 2, d["totals"]     # the two producers, not ferryctl
' || fail "status totals"
ctl --all metrics >"$tmp/all.prom"
promtool check metrics <"$tmp/all.prom" || fail "promtool rejects ferryctl metrics: $(head -20 "$tmp/all.prom")"
grep -q '^ferry_uploads_total{device="0"} 6$' "$tmp/all.prom" || fail "no device label: $(grep uploads_total "$tmp/all.prom")"
! grep -q 'pid="' "$tmp/all.prom" || fail "per-connection labels without --per-client"
ctl --all metrics --per-client --output "$tmp/textfile.prom" && promtool check metrics <"$tmp/textfile.prom" ||
  fail "--output/--per-client metrics"
# --output into a directory another user can write: whatever is planted there
# (links named as a temporary file of coming pids, a FIFO, a link at the
# target's own name), no other file changes and nothing blocks.
if [[ -n ${FERRY_TEST_USER:-} ]]; then
  as_user() { setpriv --reuid "$FERRY_TEST_USER" --regid "$(id -g "$FERRY_TEST_USER")" --clear-groups "$@"; }
  export_dir=$tmp/textfile
  mkdir "$export_dir" && chown "$FERRY_TEST_USER" "$export_dir" && chmod 0755 "$export_dir"
  chmod o+x "$tmp"
  secret=$tmp/secret
  echo "root only" >"$secret" && chmod 0600 "$secret"
  # One process plants them all, for the next 2000 pids (ferryctl's among them).
  as_user /usr/bin/python3 -c '
import os, sys
d, target = sys.argv[1], sys.argv[2]
last = int(open("/proc/sys/kernel/ns_last_pid").read())
for p in range(last + 1, last + 2001):
    os.symlink(target, "%s/ferry.prom.tmp.%d" % (d, p))
' "$export_dir" "$secret"
  as_user ln -s "$secret" "$export_dir/ferry.prom"
  timeout 20 "$build/tools/ferryctl" --socket-dir "$dir" --all metrics --output "$export_dir/ferry.prom" ||
    fail "--output into a planted directory: exit $?"
  [[ $(cat "$secret") == "root only" && $(stat -c %a "$secret") == 600 ]] || fail "--output changed a file a planted link named"
  [[ -f $export_dir/ferry.prom && ! -L $export_dir/ferry.prom ]] || fail "--output left the planted link at its name"
  grep -q '^ferry_up' "$export_dir/ferry.prom" || fail "--output wrote no metrics"
  [[ $(stat -c %a "$export_dir/ferry.prom") == 644 ]] || fail "a new --output file is mode $(stat -c %a "$export_dir/ferry.prom")"
  chmod 0640 "$export_dir/ferry.prom"
  ctl --all metrics --output "$export_dir/ferry.prom" || fail "--output over an existing file"
  [[ $(stat -c %a "$export_dir/ferry.prom") == 640 ]] || fail "--output did not keep the target's mode"
  # Another user's file at the name, setuid and world-writable: its mode is not taken.
  rm "$export_dir/ferry.prom"
  as_user sh -c "echo x >'$export_dir/ferry.prom' && chmod 6777 '$export_dir/ferry.prom'"
  ctl --all metrics --output "$export_dir/ferry.prom" || fail "--output over another user's file"
  [[ $(stat -c %a:%u "$export_dir/ferry.prom") == 644:0 ]] || fail "--output took another user's mode: $(stat -c %a:%u "$export_dir/ferry.prom")"
  # A FIFO at the target's own name is replaced, not opened (which would block).
  rm "$export_dir/ferry.prom"
  as_user mkfifo "$export_dir/ferry.prom"
  timeout 20 "$build/tools/ferryctl" --socket-dir "$dir" --all metrics --output "$export_dir/ferry.prom" ||
    fail "--output onto a FIFO: exit $?"
  [[ -f $export_dir/ferry.prom && ! -p $export_dir/ferry.prom ]] || fail "--output left the FIFO at its name"
  ! ls -A "$export_dir" | grep -q '^\.ferry\.prom\.tmp' || fail "--output left a temporary file"
  echo "ok: --output in a directory another user planted links and a FIFO in changed nothing else"
fi
"$build/tools/ferryctl" --socket-dir "$dir" --interval=0.2 -d 0 watch >"$tmp/watch.out" 2>&1 &
w=$!
pids+=($w)
# Each step waits for what watch printed (it flushes every frame).
frames() { grep -c "^ferryd 0" "$tmp/watch.out" || true; }
for _ in $(seq 200); do (($(frames) >= 2)) && break; sleep 0.05; done
kill -TERM "$e0"
wait "$e0" || true
for _ in $(seq 200); do grep -q "not answering" "$tmp/watch.out" && break; sleep 0.05; done
"$build/daemon/ferryd" --sim --socket "$dir/ferryd-0.sock" -q &
e0=$!
pids+=($e0)
wait_for_socket "$dir/ferryd-0.sock"
n=$(frames)
for _ in $(seq 200); do (($(frames) > n)) && break; sleep 0.05; done
kill -INT "$w"
wait "$w" || fail "watch did not exit 0 on Ctrl-C"
grep -q "not answering" "$tmp/watch.out" || fail "watch did not report the restart"
[[ $(grep -c "^ferryd 0" "$tmp/watch.out") -ge 3 ]] || fail "watch stopped at the restart"
awk 'length($0) > 80 { bad = 1 } END { exit bad }' "$tmp/watch.out" || fail "watch wider than 80 columns"
python3 - "$dir/ferryd-0.sock" "$build" <<'PY' &
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[2] + "/client/libferry.so.0")
c = ctypes.c_void_p()
assert lib.ferry_connect(sys.argv[1].encode(), ctypes.byref(c)) == 0
time.sleep(30)
PY
holder=$!
pids+=($holder)
for _ in $(seq 100); do ctl -d 0 --json status | grep -q '"clients":\[{' && break; sleep 0.05; done
id=$(ctl -d 0 --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["clients"][0]["id"])')
ctl -d 0 disconnect "$id" | grep -q "client $id disconnected" || fail "ferryctl disconnect"
for _ in $(seq 100); do ctl -d 0 --json status | grep -q '"clients":\[\]' && break; sleep 0.05; done
ctl -d 0 --json status | grep -q '"clients":\[\]' || fail "the disconnected client is still listed"
if ctl -d 0 disconnect 99999 2>/dev/null; then fail "disconnect of no such client succeeded"; fi
kill "$holder" 2>/dev/null || true
ctl -d 0 drain | grep -q "is draining" || fail "ferryctl drain"
wait "$e0" || fail "ferryd did not exit 0 after ferryctl drain"
echo "ok: -d, --all, --json everywhere, promtool accepts the metrics (device label), watch rides out a restart in 80 columns, disconnect, drain"

echo "== monitoring: ferry_up, DCGM labels, --running-only never starts a socket-activated daemon; ferryctl's help, users, exit codes"
grep -q '^ferry_up{device="0"} 1$' "$tmp/all.prom" || fail "no ferry_up 1: $(grep ferry_up "$tmp/all.prom")"
grep -q '^ferry_info{device="0",.*gpu="0",UUID="[0-9a-f-]*"' "$tmp/all.prom" || fail "ferry_info without gpu/UUID: $(grep ferry_info "$tmp/all.prom")"
grep -q "uploads/s" "$tmp/watch.out" || fail "watch shows no rates"
[[ ! -e $dir/ferryd-0.pid ]] || fail "the drained daemon left its running marker"
# The socket held for a daemon that is not running, as systemd's socket unit holds it.
# The unit's UMask=0077: the marker must still be readable by the metrics timer.
(umask 077; exec systemd-socket-activate -l "$dir/ferryd-0.sock" -E FERRY_SIM_DRIVER -E FERRY_SIM_FAST \
  "$build/daemon/ferryd" --sim --socket "$dir/ferryd-0.sock" -q) 2>"$tmp/activate.log" &
act=$!
pids+=($act)
for _ in $(seq 200); do grep -q "^Listening on" "$tmp/activate.log" && break; sleep 0.05; done
out=$(ctl --all --running-only metrics) || fail "--running-only metrics exit $? with the daemon not running"
grep -q '^ferry_up{device="0",reason="not running"} 0$' <<<"$out" || fail "no ferry_up 0 not running: $out"
[[ ! -e $dir/ferryd-0.pid ]] || fail "--running-only metrics started the socket-activated daemon"
ctl -d 0 status >/dev/null || fail "status through the activated socket"
[[ -e $dir/ferryd-0.pid ]] || fail "the activated ferryd wrote no running marker"
[[ $(stat -c %a "$dir/ferryd-0.pid") == 644 ]] || fail "running marker mode $(stat -c %a "$dir/ferryd-0.pid") under umask 077"
# A marker another user planted (naming a live process) is not believed.
if [[ -n ${FERRY_TEST_USER:-} ]]; then
  cp "$dir/ferryd-0.pid" "$tmp/real.pid"
  rm "$dir/ferryd-0.pid"
  echo $$ >"$dir/ferryd-0.pid" && chown "$FERRY_TEST_USER" "$dir/ferryd-0.pid"
  ctl --all --running-only metrics | grep -q 'reason="not running"' || fail "a planted marker was believed"
  rm -f "$dir/ferryd-0.pid" && cp "$tmp/real.pid" "$dir/ferryd-0.pid"
fi
out=$(ctl --all --running-only metrics) || true
grep -q '^ferry_up{device="0"} 1$' <<<"$out" || fail "--running-only skips a running daemon: $(grep '^ferry_up' <<<"$out")"
# Users by name; per-command help; refusals that name the fix; exit 3 when nothing answers.
python3 - "$dir/ferryd-0.sock" "$build" <<'PY' &
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[2] + "/client/libferry.so.0")
cs = [ctypes.c_void_p() for _ in range(12)]
for c in cs:
    assert lib.ferry_connect(sys.argv[1].encode(), ctypes.byref(c)) == 0
print("12 connected", flush=True)
time.sleep(30)
PY
holders=$!
pids+=($holders)
for _ in $(seq 200); do [[ $(ctl -d 0 --json status | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["clients"]))') == 12 ]] && break; sleep 0.05; done
me=$(id -un)
ctl -d 0 status | grep -qE "^[0-9]+ +[0-9]+ +${me:0:10} " || fail "status does not name the user $me: $(ctl -d 0 status | tail -3)"
# A 12-line terminal: the header stays, the rows that do not fit are counted.
script -qfc "stty rows 12 cols 80; $build/tools/ferryctl --socket-dir $dir -d 0 --interval 0.2 watch" /dev/null >"$tmp/tty.out" &
tw=$!
pids+=($tw)
for _ in $(seq 200); do grep -q "more clients not shown" "$tmp/tty.out" && break; sleep 0.05; done
kill -INT "$tw" 2>/dev/null || true
wait "$tw" 2>/dev/null || true
grep -q "more clients not shown" "$tmp/tty.out" || fail "watch in 12 rows did not cut the rows: $(tail -15 "$tmp/tty.out")"
frame=$(tr -d '\r' <"$tmp/tty.out" | awk '/\033\[H/ { n = 0 } { n++; if (n > max) max = n } END { print max }')
((frame <= 13)) || fail "a watch frame of $frame lines in a 12-row terminal"
kill "$holders" 2>/dev/null || true
ctl metrics --help | grep -q -- "--running-only asks only" || fail "ferryctl metrics --help"
ctl help drain | grep -q "admins only" || fail "ferryctl help drain"
rc=0; "$build/tools/ferryctl" --all --socket-dir "$tmp/none" status 2>/dev/null || rc=$?
((rc == 3)) || fail "--all with no socket: exit $rc, want 3"
rc=0; "$build/tools/ferryctl" --socket "$tmp/nothing.sock" status 2>/dev/null || rc=$?
((rc == 3)) || fail "no daemon: exit $rc, want 3"
if [[ -n ${FERRY_TEST_USER:-} ]]; then
  # Another user may connect (as a member of the socket's group would) but is no admin.
  chmod o+x "$tmp" "$dir" && chmod 0666 "$dir/ferryd-0.sock"
  err=$(setpriv --reuid "$FERRY_TEST_USER" --regid "$(id -g "$FERRY_TEST_USER")" --clear-groups \
    "$build/tools/ferryctl" --socket "$dir/ferryd-0.sock" drain 2>&1) && fail "a non-admin drained the daemon"
  grep -q "not an admin of this daemon.*admin-group" <<<"$err" || fail "the refusal does not name the fix: $err"
fi
kill -TERM "$act" 2>/dev/null || true
wait "$act" 2>/dev/null || true
echo "ok: ferry_up 1 / 0 not running, gpu and UUID on ferry_info, --running-only left the activated socket alone, users by name, watch cut to 12 rows, per-command help, exit 3, refusals name the fix"

echo "== journald sees each line's priority"
sock3=$tmp/journal.sock
JOURNAL_STREAM=8:1 "$build/daemon/ferryd" --sim --socket "$sock3" --log-level info 2>"$tmp/journal.err" &
d3=$!
pids+=($d3)
wait_for_socket "$sock3"
kill -TERM "$d3"
wait "$d3" || true
grep -q '^<6>info: ' "$tmp/journal.err" || fail "no <6> priority prefix under journald: $(head -3 "$tmp/journal.err")"
"$build/daemon/ferryd" --sim --socket "$tmp/nojournal.sock" --version >/dev/null
echo "ok: lines carry <N> priorities for journald"
echo "== a host without a GPU: the simulated device in place of one, said so; every line's priority from the first"
# This machine has the Level Zero loader and no GPU driver (the simulated one is named only with --sim).
sock6=$tmp/nogpu.sock
env -u FERRY_SIM_DRIVER FERRY_SIM_DRIVER="$build/sim/libze_ferry_sim.so.1" JOURNAL_STREAM=8:1 \
  "$build/daemon/ferryd" --socket "$sock6" 2>"$tmp/nogpu.log" &
d6=$!
pids+=($d6)
wait_for_socket "$sock6"
grep -q '^<4>warning: no Level Zero GPU driver on this host: serving the simulated device' "$tmp/nogpu.log" ||
  fail "no warning of the fallback: $(head -3 "$tmp/nogpu.log")"
"$build/tools/ferryctl" --socket "$sock6" status | grep -q "simulated in place of a GPU: no Level Zero GPU driver" ||
  fail "ferryctl status does not say the device is simulated"
"$build/examples/multi_upload" -s "$sock6" -p 1 -n 2 -b 1000 >/dev/null || fail "uploads to the fallback device"
kill -TERM "$d6"
wait "$d6" || fail "the fallback ferryd did not exit 0"
if JOURNAL_STREAM=8:1 "$build/daemon/ferryd" --socket "$tmp/nogpu2.sock" --fallback-sim false 2>"$tmp/nogpu2.log"; then
  fail "fallback-sim false started without a GPU"
fi
grep -q '^<3>error: Level Zero' "$tmp/nogpu2.log" || fail "the startup error has no priority: $(cat "$tmp/nogpu2.log")"
if JOURNAL_STREAM=8:1 "$build/daemon/ferryd" --log-level loud --check-config 2>"$tmp/usage.err"; then fail "--log-level loud"; fi
grep -q '^<3>ferryd: command line: log-level must be' "$tmp/usage.err" || fail "a usage error's priority: $(cat "$tmp/usage.err")"
echo "ok: no GPU: the simulated device, in the log (warning) and in ferryctl status; errors at priority err from the start"

echo "== --check-config: groups that exist, file:line for every setting, a key given twice at its second line"
# A configuration --check-config must refuse, its message naming file:line.
refused() {  # name, contents, text the message must have
  printf '%b' "$2" >"$tmp/$1.conf"
  if "$build/daemon/ferryd" --config "$tmp/$1.conf" --check-config 2>"$tmp/$1.err"; then fail "$1.conf passed --check-config"; fi
  grep -q "$3" "$tmp/$1.err" || fail "$1.conf: $(cat "$tmp/$1.err")"
}
refused group 'socket-group = no-such-group-here\n' 'group.conf:1: socket-group names a group this host does not have'
refused admin 'slots = 8\nadmin-group = no-such-group-here\n' 'admin.conf:2: admin-group'
refused backend 'slots = 8\n\nbackend = opencl\n' 'backend.conf:3: backend must be level-zero or cuda'
refused level 'log-level = info\nslots = 4\nlog-level = loud\n' 'level.conf:3'  # a key given twice: its second line
refused level1 'log-level = loud\n' 'level1.conf:1: log-level must be'
refused size 'slots = 8\nuser-memory = 256Q\n' 'size.conf:2: user-memory must be a size'
# The first bad setting in the file's order: a bad value before an unknown key, and after one.
refused order1 'slots = 0\nnosuch = 3\n' 'order1.conf:1: slots must be between 1 and 4096'
refused order2 'nosuch = 3\nslots = 0\n' 'order2.conf:1: unknown setting "nosuch"'
# Sizes as systemd and ulimit users write them, in the file and as flags.
printf 'user-memory = 256M\nuser-staging = 512 MiB\nslot-size = 256K\nsim-memory = 1.5G\n' >"$tmp/sizes.conf"
"$build/daemon/ferryd" --config "$tmp/sizes.conf" --check-config >/dev/null || fail "sizes with units refused in the file"
"$build/daemon/ferryd" --user-memory 1GiB --slot-size 1M --check-config >/dev/null || fail "sizes with units refused as flags"
# The shipped configuration names every setting ferryd has, with its default
# (client-memory is the old name of user-memory).
for opt in $("$build/daemon/ferryd" --help | grep -E '^  -' | grep -oE -- '--[a-z-]+' | head -c 100000 | sed 's/^--//' |
    sort -u | grep -v -x -e help -e version -e check-config -e verbose -e quiet -e config -e client-memory); do
  grep -q "^# $opt = " "$src/systemd/ferryd.conf" || fail "systemd/ferryd.conf does not list $opt"
done
echo "ok: groups checked, file:line for backend, log-level and a key given twice; ferryd.conf lists every setting"

echo "ops_test: all checks held"
