#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Where ferry.torch's batches wait, on a GPU machine: bench/torch_loader_bench.py
# --account under several ferryd and loader settings, one after the other,
# each with a ferryd of its own. Run from the repository root with a pack
# built by scripts/gpu-pack.sh (.device, carried):
#
#   bash bench/torch_account.sh
#
# Settings, from the environment:
#   B         the pack (.device)
#   OUT       the results folder (/tmp/ferry-account): account.md (every case's
#             tables, in order), NAME.err per case, ferryd.log
#   CASES     which cases, by name (default: all but profile, in this order):
#               default    ferryd's default staging (16 slots of 1 MiB a client), each
#                          loader's default prefetch_factor, pcg16 at 1, 8, 16 and 32
#                          workers: torch, ferry, gen and host
#               big        16 slots of 4 MiB (bench/gpu.sh's ferryd), pcg16 at 16 workers
#               prefetch2  the default ferryd, prefetch_factor 2 (torch's default) for
#                          every loader, pcg16 at 16 and 32 workers
#               pcg64      the default ferryd, pcg64 at 8 and 16 workers
#               small      the default ferryd, 256 samples of 64 KiB a batch, 16 workers
#               bytes16    the default ferryd, samples that cost nothing (bytes16), 8, 16
#                          and 32 workers: what bounds the trainer's side
#               profile    the trainer under cProfile, bytes16 at 16 workers, ferry alone
#                          (profile.txt: the top functions by own time and by total)
#   REPS      runs of each row (3)
#   SECONDS_EACH  a case's time limit (150)
set -u
if (($#)); then
  sed -n '3,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [[ $1 == -h || $1 == --help ]] && exit 0 || exit 2
fi
B=$(cd "${B:-.device}" && pwd) || exit 2
OUT=${OUT:-/tmp/ferry-account}
CASES=${CASES:-default big prefetch2 pcg64 small bytes16}
REPS=${REPS:-3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
tree=$B/tree
[[ -f $tree/bench/torch_loader_bench.py ]] || tree=.
sock=/tmp/ferry-account.sock

one() {  # name "ferryd flags" bench flags...  (PY: how python3 is run)
  local name=$1 flags=$2 D
  shift 2
  local py=(${PY:-python3})
  rm -f "$sock"
  # shellcheck disable=SC2086  # the flags are words
  LD_LIBRARY_PATH=$B/lib "$B/daemon/ferryd" --backend cuda --socket "$sock" --log-level warn $flags \
    2>>"$OUT/ferryd.log" &
  D=$!
  for _ in $(seq 400); do [[ -S $sock ]] && break; sleep 0.05; done
  echo "## $name (ferryd $flags)" >>"$OUT/account.md"
  FERRY_LIBRARY=$B/client/libferry.so.0 timeout "${SECONDS_EACH:-150}" "${py[@]}" "$tree/bench/torch_loader_bench.py" \
    --socket "$sock" --ferryd-pid "$D" --ferryctl "$B/tools/ferryctl" --account --reps "$REPS" "$@" \
    >>"$OUT/account.md" 2>"$OUT/$name.err"
  echo "$name: exit $?"
  kill -TERM "$D" 2>/dev/null
  wait "$D"
}

for c in $CASES; do
  case $c in
    default) one default "" --work pcg16 --workers 1,8,16,32 --kinds torch,ferry,gen,host ;;
    big) one big "--slot-size 4194304 --slots 16" --work pcg16 --workers 16 --kinds ferry,gen ;;
    prefetch2) one prefetch2 "" --work pcg16 --workers 16,32 --kinds ferry,gen --prefetch 2 ;;
    pcg64) one pcg64 "" --work pcg64 --workers 8,16 --kinds torch,ferry,gen ;;
    small) one small "" --work small --workers 16 --kinds torch,ferry,gen ;;
    bytes16) one bytes16 "" --work bytes16 --workers 8,16,32 --kinds ferry,gen,host ;;
    profile)
      PY="python3 -m cProfile -o $OUT/profile.out" REPS=1 one profile "" --work bytes16 --workers 16 --kinds ferry
      python3 -c 'import pstats, sys; p = pstats.Stats(sys.argv[1]); p.sort_stats("tottime").print_stats(40); p.sort_stats("cumulative").print_stats(60)' \
        "$OUT/profile.out" >"$OUT/profile.txt" 2>&1
      rm -f "$OUT/profile.out" ;;
    *) echo "bench/torch_account.sh: no case '$c'" >&2 ;;
  esac
done
