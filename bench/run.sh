#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every benchmark on the simulated device and writes docs/BENCHMARKS.md
# and docs/bench_bandwidth.png.
#   bash bench/run.sh           full run (a few minutes)
#   bash bench/run.sh --quick   every scenario briefly, output to stdout only (CI)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
quick=0
[[ ${1:-} == --quick ]] && quick=1
build=${FERRY_BUILD_DIR:-$root/build/release}

bash "$root/scripts/setup.sh"
if ((!quick)) && ! { command -v gnuplot && command -v valgrind && command -v strace; } >/dev/null; then
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gnuplot-nox valgrind strace >/dev/null
fi
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF >/dev/null

# The simulated device's default cost model, the same for ferryd and for the
# direct paths inside ferry_bench.
unset FERRY_SIM_FAST ZE_ENABLE_VALIDATION_LAYER ZE_ENABLE_PARAMETER_VALIDATION
export FERRY_SIM_DRIVER=$build/sim/libze_ferry_sim.so.1
sock=$(mktemp -u /tmp/ferry-bench-XXXXXX.sock)
"$build/daemon/ferryd" --sim --socket "$sock" --log-level warn &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; rm -f "$sock"' EXIT
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done

if ((quick)); then
  "$build/bench/ferry_bench" --socket "$sock" --daemon-pid $daemon --quick
  exit 0
fi

data=$(mktemp -d)
body=$("$build/bench/ferry_bench" --socket "$sock" --daemon-pid $daemon --data "$data")
kill -TERM $daemon
wait $daemon || true
profile=$(bash "$root/bench/profile.sh" "$build" 20000)
out=$root/docs/BENCHMARKS.md
{
  echo "# Benchmarks"
  echo
  echo "Produced by \`bash bench/run.sh\` on $(date -u +%Y-%m-%d), commit $(git -C "$root" rev-parse --short HEAD)."
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'),"
  echo "$(free -g | awk '/Mem:/ {print $2}') GiB. Device: ferry's simulated Level Zero GPU with its default cost"
  echo "model (5 µs per command, 12 GB/s, 20 µs per pageable append); ferryd with its defaults (16 slots of 1 MiB)."
  echo "Every row of a table comes from the same run of \`ferry_bench\`; the goals table at its end"
  echo "is computed from them."
  echo
  echo "$body"
  echo
  cat "$root/bench/GOALS.md"
  echo
  echo "$profile"
  echo
  echo "![upload bandwidth against size](bench_bandwidth.png)"
  echo
  # What is measured by hand and written up (the before/after runs of a change,
  # scripts/gpu-ab.sh and bench/flood.sh; the H200, scripts/h200*.sh) is kept
  # as it is: bench/written_sections.md.
  cat "$root/bench/written_sections.md"
} >"$out"
gnuplot <<GP
set terminal pngcairo size 900,520 font ",11"
set output "$root/docs/bench_bandwidth.png"
set title "Upload bandwidth against size, pageable source (simulated device, ${FERRY_SIM_BANDWIDTH_GBPS:-12} GB/s link)"
set logscale x 2
set xlabel "upload size (bytes)"
set ylabel "GB/s (until the bytes are on the device)"
set key top left
set xtics ("4 KiB" 4096, "16 KiB" 16384, "64 KiB" 65536, "256 KiB" 262144, "1 MiB" 1048576, "4 MiB" 4194304, \
           "16 MiB" 16777216, "64 MiB" 67108864, "256 MiB" 268435456, "1 GiB" 1073741824)
set yrange [0:*]
set grid
plot "$data/bandwidth.tsv" using 1:2 with linespoints title "sync (append + wait)", \
     "" using 1:3 with linespoints title "staged (in-process host USM)", \
     "" using 1:4 with linespoints lw 2 title "ferry"
GP
rm -rf "$data"
echo "wrote $out and docs/bench_bandwidth.png"
