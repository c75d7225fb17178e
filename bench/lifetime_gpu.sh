#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ferryd serving for months, on an NVIDIA GPU machine (the `device` tool),
# from the repository root with the packs of scripts/gpu-pack.sh:
#
#   bash scripts/gpu-pack.sh                                  # here: .device (B)
#   A=.device-before bash bench/lifetime_gpu.sh               # there
#
# Steps (STEPS, default "tests torch sweep soak"):
#   tests  bench/gpu.sh's CUDA tests of B (test_torch_cuda.py included)
#   torch  ferry.torch against torch's loader, A then B (bench/gpu.sh torch)
#   sweep  a sweep's short ferry.torch jobs against one ferryd with
#          --user-memory SWEEP_MEMORY (default 8 GiB), A's Python package and
#          ferryd, then B's: how many jobs are refused (bench/soak.py, no
#          restart)
#   soak   bench/soak.py's GPU form on B: WAVES waves of JOBS ferry.torch
#          jobs (16 workers, 64 MiB batches, 12 batches), a PyTorch program
#          under ferry-run, C clients, a killed client, and a ferryd
#          restart under a program uploading all the while
# Results under OUT (default /tmp/ferry-lifetime): summary.txt, soak.json,
# and the logs in all.tgz.
set -u
B=$(cd "${B:-.device}" && pwd)
A=${A:+$(cd "$A" && pwd)}
OUT=${OUT:-/tmp/ferry-lifetime}
STEPS=${STEPS:-tests torch sweep soak}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
want() { [[ " $STEPS " == *" $1 "* ]]; }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
say "$(nvidia-smi -L | head -1); B $(cat "$B/COMMIT")${A:+, A $(cat "$A/COMMIT")}"

if want tests; then
  OUT=$OUT/tests STEPS=tests bash bench/gpu.sh >"$OUT/tests.log" 2>&1
  say "tests: exit $? ($(grep -c ': exit 0' "$OUT/tests/summary.md" 2>/dev/null) passed)"
  grep ': exit [1-9]' "$OUT/tests/summary.md" | tee -a "$OUT/summary.txt"
fi
if want torch && [[ -n $A ]]; then
  # Two rounds, the second in the other order: A then B, B then A.
  for r in $(seq "${TORCH_ROUNDS:-2}"); do
    first=$A second=$B
    ((r % 2 == 0)) && first=$B second=$A
    OUT=$OUT/torch$r A=$first B=$second STEPS=torch WORK=${WORK:-bytes16} WORKERS=${WORKERS:-16} REPS=${REPS:-3} \
      bash bench/gpu.sh >"$OUT/torch$r.log" 2>&1
    say "torch round $r: exit $?"
    tar -xzf "$OUT/torch$r/all.tgz" -C "$OUT/torch$r" ./torch.A.md ./torch.B.md 2>/dev/null
    for p in A B; do
      pack=$first
      [[ $p == B ]] && pack=$second
      say "--- round $r, $(cat "$pack/COMMIT")"
      tail -1 "$OUT/torch$r/torch.$p.md" >>"$OUT/summary.txt" 2>/dev/null
    done
  done
fi
soak() {  # pack python label [soak.py options...]
  local pack=$1 py=$2 label=$3
  shift 3
  FERRY_LIBRARY=$pack/client/libferry.so.0 timeout 560 python3 bench/soak.py --build "$pack" --backend cuda \
    --python "$py" --out "$OUT/$label.json" "$@" >"$OUT/$label.txt" 2>&1
  say "$label: exit $?"
  grep -E '^wave|^soak' "$OUT/$label.txt" | tee -a "$OUT/summary.txt"
}
if want sweep; then
  sweep=(--waves "${SWEEP_WAVES:-3}" --torch-jobs "${SWEEP_JOBS:-6}" --workers 16 --batch-mib 64 --batches 12
    --restart-wave 0 --ferryd-args "--user-memory ${SWEEP_MEMORY:-8589934592}")
  [[ -n $A ]] && soak "$A" "$A/tree/python" sweep-A "${sweep[@]}"
  soak "$B" "$B/tree/python" sweep-B "${sweep[@]}"
fi
if want soak; then
  soak "$B" "$B/tree/python" soak-B --waves "${WAVES:-6}" --torch-jobs "${JOBS:-6}" --workers 16 --batch-mib 64 \
    --batches 12 --check
fi
tar -czf /tmp/ferry-lifetime-all.tgz -C "$OUT" . && mv /tmp/ferry-lifetime-all.tgz "$OUT/all.tgz"
find "$OUT" -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name summary.txt ! -name 'soak-B.json' -exec rm -rf {} +
