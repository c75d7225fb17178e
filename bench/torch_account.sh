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
#   OUT       the results folder (/tmp/ferry-account): one NAME.md per case
#   CASES     which cases, by name (default: all, in this order):
#               default    ferryd's default staging (16 slots of 1 MiB a client),
#                          pcg16 at 1, 8, 16 and 32 workers, ferry, gen and host
#               big        16 slots of 4 MiB (bench/gpu.sh's ferryd), pcg16 at 16 workers
#               prefetch4  the default ferryd, prefetch_factor 4, pcg16 at 16 and 32 workers
#               pcg64      the default ferryd, pcg64 at 8 and 16 workers
#               small      the default ferryd, 256 samples of 64 KiB a batch, 16 workers
#   REPS      runs of each row (3)
#   SECONDS_EACH  a case's time limit (150)
set -u
if (($#)); then
  sed -n '3,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [[ $1 == -h || $1 == --help ]] && exit 0 || exit 2
fi
B=$(cd "${B:-.device}" && pwd) || exit 2
OUT=${OUT:-/tmp/ferry-account}
CASES=${CASES:-default big prefetch4 pcg64 small}
REPS=${REPS:-3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
tree=$B/tree
[[ -f $tree/bench/torch_loader_bench.py ]] || tree=.
sock=/tmp/ferry-account.sock

one() {  # name "ferryd flags" bench flags...
  local name=$1 flags=$2 D
  shift 2
  rm -f "$sock"
  # shellcheck disable=SC2086  # the flags are words
  LD_LIBRARY_PATH=$B/lib "$B/daemon/ferryd" --backend cuda --socket "$sock" --log-level warn $flags \
    2>>"$OUT/ferryd.log" &
  D=$!
  for _ in $(seq 400); do [[ -S $sock ]] && break; sleep 0.05; done
  echo "## $name (ferryd $flags)" >"$OUT/$name.md"
  FERRY_LIBRARY=$B/client/libferry.so.0 timeout "${SECONDS_EACH:-150}" python3 "$tree/bench/torch_loader_bench.py" \
    --socket "$sock" --ferryd-pid "$D" --ferryctl "$B/tools/ferryctl" --account --reps "$REPS" "$@" \
    >>"$OUT/$name.md" 2>"$OUT/$name.err"
  echo "$name: exit $?"
  kill -TERM "$D" 2>/dev/null
  wait "$D"
}

for c in $CASES; do
  case $c in
    default) one default "" --work pcg16 --workers 1,8,16,32 --kinds ferry,gen,host ;;
    big) one big "--slot-size 4194304 --slots 16" --work pcg16 --workers 16 --kinds ferry,gen ;;
    prefetch4) one prefetch4 "" --work pcg16 --workers 16,32 --kinds ferry,gen --prefetch 4 ;;
    pcg64) one pcg64 "" --work pcg64 --workers 8,16 --kinds ferry,gen ;;
    small) one small "" --work small --workers 16 --kinds ferry,gen ;;
    *) echo "bench/torch_account.sh: no case '$c'" >&2 ;;
  esac
done
