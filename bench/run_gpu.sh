#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ferry-run on an NVIDIA GPU machine (the `device` tool): its CUDA checks and
# its benchmarks, each program plain and under ferry-run side by side, from
# the repository root with a pack of scripts/gpu-pack.sh carried as .device:
#
#   bash scripts/gpu-pack.sh                       # here
#   OUT=$OUT bash bench/run_gpu.sh                 # there
#
# Settings: OUT (results, default /tmp/ferry-run-gpu), ROUNDS (3: each
# benchmark plain, ferry-run and the hand-pinned rewrite, interleaved),
# STEPS ("checks bench sizes": sizes runs the seed loop at 1 KiB-2 MiB
# plain and with every size staged, to place --min-bytes; copies runs the
# blocking uploads at 16 MiB-1 GiB, the first upload of a size in a fresh
# process, CuPy's uploads and a DataLoader(pin_memory=False) loop, each
# plain, under ferry-run and, where a user can, pinned by hand; BIG,
# FIRSTS, CUPY_MODES, LOADER=0 and VARIANTS narrow it). Writes run.txt
# (every line every program printed, prefixed by what ran), summary.txt
# (medians and spreads) and results.tgz (both, ferryd's log, the reports).
set -u
P=$(cd "${B:-.device}" && pwd)
OUT=${OUT:-/tmp/ferry-run-gpu}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-checks bench sizes}
BENCH=${BENCH:-loop behind small seed}  # which of bench's programs
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
sock=/tmp/ferry-run-gpu.sock
RUN="$P/interpose/ferry-run --socket $sock"
TORCH="python3 $P/tree/bench/run_torch.py"
log() { echo "$*" | tee -a "$OUT/run.txt"; }
# One program: its output lines prefixed by a label.
one() {
  local label=$1
  shift
  timeout 300 "$@" 2>&1 | sed "s/^/$label | /" | tee -a "$OUT/run.txt"
}

nvidia-smi -L | head -1 | tee "$OUT/machine.txt"
echo "commit: $(cat "$P/COMMIT" 2>/dev/null)" | tee -a "$OUT/machine.txt"
"$P/daemon/ferryd" --backend cuda --socket "$sock" --log-level warn >"$OUT/ferryd.log" 2>&1 &
ferryd=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
[[ -S $sock ]] || { log "ferryd did not start"; cat "$OUT/ferryd.log"; exit 1; }

if [[ " $STEPS " == *" checks "* ]]; then
  log "== checks: what arrives, plain and under ferry-run (same answers expected; original everywhere but graph)"
  for v in static shared ptds; do
    for m in async legacy sync driver graph pinned; do
      one "check $v $m plain" "$P/bench/run_cuda_check_$v" --mode "$m" 65536 4194304 67108864
      one "check $v $m ferry" $RUN --report "$OUT/report-check.jsonl" -- "$P/bench/run_cuda_check_$v" --mode "$m" 65536 4194304 67108864
    done
  done
  one "torch check plain" $TORCH check
  one "torch check ferry" $RUN --report "$OUT/report-check.jsonl" -- $TORCH check
fi

if [[ " $STEPS " == *" bench "* ]]; then
  log "== bench: $ROUNDS rounds, interleaved"
  for r in $(seq "$ROUNDS"); do
    if [[ " $BENCH " == *" loop "* ]]; then
      one "loop plain r$r" $TORCH loop
      one "loop ferry r$r" $RUN --report "$OUT/report-loop.jsonl" -- $TORCH loop
      one "loop pinned r$r" $TORCH loop --pinned
    fi
    if [[ " $BENCH " == *" behind "* ]]; then
      one "behind plain r$r" $TORCH behind 65536 1048576 4194304 16777216 67108864 268435456 1073741824
      one "behind ferry r$r" $RUN --report "$OUT/report-behind.jsonl" -- $TORCH behind 65536 1048576 4194304 16777216 67108864 268435456 1073741824
    fi
    for k in 1 2; do
      [[ " $BENCH " == *" small "* ]] || break
      one "small plain r$r" $TORCH small
      one "small ferry r$r" $RUN --report "$OUT/report-small.jsonl" -- $TORCH small
    done
    for s in "" _shared; do
      [[ " $BENCH " == *" seed "* ]] || break
      one "seed$s plain r$r" "$P/bench/seed_loop$s" 1024 1000
      one "seed$s ferry r$r" $RUN --report "$OUT/report-seed.jsonl" -- "$P/bench/seed_loop$s" 1024 1000
      one "seed$s ferry0 r$r" $RUN --min-bytes 0 --report "$OUT/report-seed0.jsonl" -- "$P/bench/seed_loop$s" 1024 1000
    done
  done
fi

if [[ " $STEPS " == *" copies "* ]]; then
  log "== copies: $ROUNDS rounds, interleaved"
  CUPY="python3 $P/tree/bench/run_cupy.py"
  big=${BIG:-16777216 67108864 268435456 1073741824}      # blocking uploads' sizes
  firsts=${FIRSTS:-4194304 67108864 268435456 1073741824} # first uploads' sizes, a process each
  cupy_modes=${CUPY_MODES:-memcpy asarray set}
  variants=" ${VARIANTS:-plain ferry pinned} "            # leave plain and pinned out of a second pack's run
  for r in $(seq "$ROUNDS"); do
    [[ $variants == *" plain "* ]] && one "blocking plain r$r" $TORCH blocking $big
    one "blocking ferry r$r" $RUN --report "$OUT/report-copies.jsonl" -- $TORCH blocking $big
    [[ $variants == *" pinned "* ]] && one "blocking pinned r$r" $TORCH blocking --pinned $big
    for n in $firsts; do
      [[ $variants == *" plain "* ]] && one "first plain r$r" $TORCH first "$n"
      one "first ferry r$r" $RUN --report "$OUT/report-copies.jsonl" -- $TORCH first "$n"
    done
    [[ $variants == *" plain "* ]] && one "first plain r$r" $TORCH first --behind 67108864
    one "first ferry r$r" $RUN --report "$OUT/report-copies.jsonl" -- $TORCH first --behind 67108864
    if python3 -c "import cupy" 2>/dev/null; then
      for m in $cupy_modes; do
        [[ $variants == *" plain "* ]] && one "cupy plain r$r" $CUPY "$m" 16777216 268435456
        one "cupy ferry r$r" $RUN --report "$OUT/report-copies.jsonl" -- $CUPY "$m" 16777216 268435456
      done
    fi
    if [[ ${LOADER:-1} == 1 ]]; then
      [[ $variants == *" plain "* ]] && one "loader plain r$r" $TORCH loader
      one "loader ferry r$r" $RUN --report "$OUT/report-copies.jsonl" -- $TORCH loader
      [[ $variants == *" pinned "* ]] && one "loader pinned r$r" $TORCH loader --pin
    fi
  done
fi

if [[ " $STEPS " == *" sizes "* ]]; then
  log "== sizes: the seed loop per upload size, plain and every size staged"
  for r in $(seq "$ROUNDS"); do
    for b in 4096 16384 65536 262144 1048576 2097152; do
      one "size$b plain r$r" "$P/bench/seed_loop_shared" "$b" 500
      one "size$b ferry0 r$r" $RUN --min-bytes 0 -- "$P/bench/seed_loop_shared" "$b" 500
    done
  done
fi
"$P/tools/ferryctl" --socket "$sock" status >"$OUT/ferryctl.txt" 2>&1
kill "$ferryd"
wait "$ferryd" 2>/dev/null
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import re, statistics, sys, collections
out = sys.argv[1]
rows = collections.defaultdict(list)
for line in open(out + "/run.txt"):
    if " | " not in line:
        continue
    label, text = line.rstrip("\n").split(" | ", 1)
    key = re.sub(r" r\d+$", "", label)
    for m in re.finditer(r"(\w+)=([\d.]+)", text):
        words = text.split()
        what = " ".join([w for w in words[:3] if "=" not in w] + [w for w in words if w.startswith("size=")])
        rows[(key, what, m.group(1))].append(float(m.group(2)))
for (key, what, field), v in sorted(rows.items()):
    if field in ("it_per_s", "call_ms", "ms", "gbps", "first_ms", "second_ms") and len(v) >= 1:
        print(f"{key:24s} {what:28s} {field:9s} median {statistics.median(v):10.3f}  min {min(v):10.3f}  max {max(v):10.3f}  n={len(v)}")
EOF
grep -c "WRONG\|mixed" "$OUT/run.txt" | sed 's/^/lines with WRONG or mixed: /' | tee -a "$OUT/summary.txt"
# The device tool brings back a few files: one archive of them all.
(cd "$OUT" && tar czf results.tgz run.txt summary.txt ferryd.log ferryctl.txt machine.txt report-*.jsonl 2>/dev/null &&
  rm -f run.txt ferryd.log ferryctl.txt report-*.jsonl)
