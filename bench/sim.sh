#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every benchmark on the simulated device (this machine kind's script; bench/gpu.sh
# is the NVIDIA GPU's).
#   bash bench/sim.sh                 full run: writes docs/BENCHMARKS-SIM.md and docs/bench_sim.png
#   bash bench/sim.sh --quick         every scenario briefly, to stdout only (CI)
#   A=BUILD [B=BUILD] [SECTIONS=1234] [ROUNDS=3] bash bench/sim.sh --ab
#                                     ferry_bench sections of two builds, alternating
#                                     (A B A B ...), each with a ferryd of its own, then each
#                                     section's tables as median (min–max) per build
#   bash bench/sim.sh --flood [RUNS] [flood_bench options]
#                                     socket floods beside a ring client, and an unanswered hold
#   [NICES="0 -10"] bash bench/sim.sh --loaded [RUNS]
#                                     the reused-region loop (section 2) quiet and beside one
#                                     CPU-bound process, ferryd at each of NICES (default 0;
#                                     a negative one as root), alternating
# FERRYD_NICE=N starts every ferryd this script starts at nice N (the full run's
# too); a negative N needs root.
# --ab, --flood and --loaded build nothing: their BUILD trees must have the benchmarks
# already (build/release, which the full run makes, or a worktree's build/cuda
# made by scripts/gpu-pack.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-full}
build=${FERRY_BUILD_DIR:-$root/build/release}
# The simulated device's default cost model, the same for ferryd and for the
# direct paths inside ferry_bench.
unset FERRY_SIM_FAST ZE_ENABLE_VALIDATION_LAYER ZE_ENABLE_PARAMETER_VALIDATION

daemon=""
trap '[[ -n $daemon ]] && kill $daemon 2>/dev/null; rm -f "${sock:-}"' EXIT
start_ferryd() {  # $1: build tree; sets sock and daemon
  export FERRY_SIM_DRIVER=$1/sim/libze_ferry_sim.so.1
  sock=$(mktemp -u /tmp/ferry-bench-XXXXXX.sock)
  ${FERRYD_NICE:+nice -n "$FERRYD_NICE"} "$1/daemon/ferryd" --sim --socket "$sock" --log-level error &
  daemon=$!
  for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.05; done
}
stop_ferryd() {
  kill -TERM "$daemon"
  wait "$daemon" || true
  daemon=""
  rm -f "$sock"
}

case $mode in
  --ab)
    A=${A:?A: the "before" build tree} B=${B:-$build}
    SECTIONS=${SECTIONS:-1234} ROUNDS=${ROUNDS:-3}
    out=$(mktemp -d)
    trap '[[ -n $daemon ]] && kill $daemon 2>/dev/null; rm -rf "$out" "${sock:-}"' EXIT
    for r in $(seq "$ROUNDS"); do
      for x in A B; do
        start_ferryd "${!x}"
        "${!x}/bench/ferry_bench" --socket "$sock" --daemon-pid "$daemon" --only "$SECTIONS" >"$out/$x-$r.md"
        stop_ferryd
      done
    done
    for x in A B; do
      echo "## $x: ${!x} (median (min–max) of $ROUNDS rounds)"
      echo
      python3 "$root/bench/summarize.py" "$out/$x"-*.md | sed 's/^#/##/'
    done
    exit 0 ;;
  --flood)
    runs=3
    shift
    [[ ${1:-} =~ ^[0-9]+$ ]] && { runs=$1; shift; }
    for run in $(seq "$runs"); do
      start_ferryd "$build"
      echo "run $run"
      "$build/bench/flood_bench" --socket "$sock" --daemon-pid "$daemon" "$@" || echo "flood_bench failed: $?"
      stop_ferryd
    done
    exit 0 ;;
  --loaded)
    runs=${2:-3}
    nices=${NICES:-0}
    for n in $nices; do
      [[ $n =~ ^-?[0-9]+$ ]] || { echo "bench/sim.sh: NICES: $n is not a number" >&2; exit 2; }
      ((n >= 0 || $(id -u) == 0)) || { echo "bench/sim.sh: nice $n needs root" >&2; exit 2; }
    done
    out=$(mktemp -d)
    hog=""
    trap '[[ -n $daemon ]] && kill $daemon 2>/dev/null; [[ -n $hog ]] && kill $hog 2>/dev/null; rm -rf "$out" "${sock:-}"' EXIT
    for run in $(seq "$runs"); do
      for load in quiet loaded; do
        for FERRYD_NICE in $nices; do
          start_ferryd "$build"
          [[ $load == loaded ]] && { bash -c 'while :; do :; done' & hog=$!; }
          "$build/bench/ferry_bench" --socket "$sock" --daemon-pid "$daemon" --only 2 >"$out/run.md" ||
            echo "ferry_bench failed ($load, nice $FERRYD_NICE): $?" >&2
          [[ -n $hog ]] && { kill $hog; wait $hog 2>/dev/null || true; hog=""; }
          stop_ferryd
          sed -n 's/.*device-side waits: \*\*\([0-9.]*\)×\*\* in-process.*/\1/p' "$out/run.md" >>"$out/$load.$FERRYD_NICE"
          sed -n 's/^ferry direct: \*\*\([0-9.]*\)×\*\* in-process.*/\1/p' "$out/run.md" >>"$out/direct.$load.$FERRYD_NICE"
        done
      done
    done
    unset FERRYD_NICE
    echo "The reused-region loop ÷ in-process staging, median (min–max) of the runs: direct uploads"
    echo "(the application's list copies) and daemon-appended uploads with device-side waits:"
    echo
    echo "| machine | ferryd nice | direct | device-side waits | runs |"
    echo "|---|---|---|---|---|"
    for load in quiet loaded; do
      for n in $nices; do
        python3 -c 'import statistics, sys
def cell(path):
    v = sorted(float(x) for x in open(path).read().split())
    return (f"{statistics.median(v):.2f}× ({v[0]:.2f}–{v[-1]:.2f})" if v else "no ratio printed"), len(v)
direct, n = cell(sys.argv[1])
waits, _ = cell(sys.argv[2])
print(f"| {sys.argv[3]} | {sys.argv[4]} | {direct} | {waits} | {n} |")' \
          "$out/direct.$load.$n" "$out/$load.$n" "$([[ $load == quiet ]] && echo quiet || echo "one CPU-bound process beside it")" "$n"
      done
    done
    exit 0 ;;
  --quick | full) ;;
  *) echo "usage: bench/sim.sh [--quick | --ab | --flood [RUNS] [options] | --loaded [RUNS]]" >&2; exit 2 ;;
esac

bash "$root/scripts/setup.sh"
if [[ $mode == full ]] && ! { command -v gnuplot && command -v valgrind && command -v strace; } >/dev/null; then
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gnuplot-nox valgrind strace >/dev/null
fi
bash "$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_BUILD_TESTS=OFF >/dev/null
start_ferryd "$build"

if [[ $mode == --quick ]]; then
  "$build/bench/ferry_bench" --socket "$sock" --daemon-pid $daemon --quick
  exit 0
fi

data=$(mktemp -d)
body=$("$build/bench/ferry_bench" --socket "$sock" --daemon-pid $daemon --data "$data")
stop_ferryd
profile=$(bash "$root/bench/profile.sh" "$build" 20000)
out=$root/docs/BENCHMARKS-SIM.md
{
  echo "# Benchmarks: the simulated device, and the last \`bench/gpu.sh\` run"
  echo
  echo "Written by \`bash bench/sim.sh\` (which rewrites this file); today's figures for each claim"
  echo "of the README are in \`docs/BENCHMARKS.md\`, earlier rounds in \`docs/BENCHMARKS-HISTORY.md\`."
  echo
  echo "Produced by \`bash bench/sim.sh\` on $(date -u +%Y-%m-%d), commit $(git -C "$root" rev-parse --short HEAD)."
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
  echo "![call return and time until on the device against size, simulated device](bench_sim.png)"
  echo
  # The NVIDIA GPU's figures: the summary of the latest bench/gpu.sh run, kept as
  # it came back (bench/gpu_latest.md, with its plot docs/bench_gpu.png).
  if [[ -f $root/bench/gpu_latest.md ]]; then
    cat "$root/bench/gpu_latest.md"
    echo
  fi
} >"$out"
bash "$root/bench/plot.sh" "$data/bandwidth.tsv" "$root/docs/bench_sim.png" \
  "Pageable uploads on the simulated device (${FERRY_SIM_BANDWIDTH_GBPS:-12} GB/s link): sync = append + wait, staged = in-process host USM"
rm -rf "$data"
echo "wrote $out and docs/bench_sim.png"
