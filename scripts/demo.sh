#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: ferryd on the simulated device, several client processes
# uploading into device buffers and verifying by download, the daemon's
# occupancy shown while they run, then an orderly stop.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FERRY_BUILD_DIR:-$root/build/release}

echo "== installing what is missing (scripts/setup.sh: Debian packages, once)"
bash "$root/scripts/setup.sh"
echo "== building ferry into $build (a few minutes the first time on 2 cores, seconds after)"
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF >/dev/null

sock=$(mktemp -u /tmp/ferry-demo-XXXXXX.sock)
log=$(mktemp /tmp/ferry-demo-XXXXXX.log)
# A slow simulated link (0.5 GB/s) so the ring is visibly busy while we look.
FERRY_SIM_BANDWIDTH_GBPS=${FERRY_SIM_BANDWIDTH_GBPS:-0.5} \
  "$build/daemon/ferryd" --sim --socket "$sock" --slots 8 --slot-size 262144 2>"$log" &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; rm -f "$sock" "$log"' EXIT
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done

echo "== ferryd --sim is up:"
sed 's/^/   /' "$log"
echo
echo "== 4 client processes upload 400 x 256 KiB each (multi_upload, examples/):"
"$build/examples/multi_upload" -s "$sock" -p 4 -n 400 -b 262144 &
clients=$!
sleep 0.25
echo
echo "== ferryctl status, while they upload:"
"$build/tools/ferryctl" --socket "$sock" status || true
wait $clients
echo
echo "== ferryctl status, after they finished:"
"$build/tools/ferryctl" --socket "$sock" status
echo
kill -TERM $daemon
wait $daemon
echo "== ferryd stopped (exit $?):"
tail -n 3 "$log" | sed 's/^/   /'
