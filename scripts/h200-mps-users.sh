#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine (the `device` tool) with .device carried
# (scripts/h200-pack.sh): ferryd and its clients as different users under
# NVIDIA MPS, as a system service runs them (ferryd as its own user, the
# clients as theirs). Per-user control daemon (-d): what ferryd says, the
# client of another uid queued (bounded by timeout), ferryd's own context
# queued behind another uid's server (its 10 s warning). Multi-user server
# (-d -M): cuda_bench's ordering sections as root against ferryd as another
# user, RUNS times. Results under $OUT.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
RUNS=${RUNS:-3}
mkdir -p "$OUT"
MPS=/usr/local/nvidia/bin/nvidia-cuda-mps-control
# A copy every user can read, and a user that is not root.
D=/tmp/ferry-dev
rm -rf "$D" && cp -r "$B" "$D" && chmod -R a+rX "$D"
export LD_LIBRARY_PATH=$D/lib
U=ferrymps
id "$U" >/dev/null 2>&1 || useradd -M -r -s /usr/sbin/nologin "$U" 2>/dev/null || U=nobody
uid=$(id -u "$U") gid=$(id -g "$U")
echo "ferryd runs as $U (uid $uid); clients as root; $(nvidia-smi -L | head -1)" | tee "$OUT/mps-users.md"
as_user() { setpriv --reuid="$uid" --regid="$gid" --clear-groups "$@"; }
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-users-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-users-log
start_ferryd() {  # $1: label
  local sock=/tmp/ferry-mu-$1.sock
  rm -f "$sock"
  as_user env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" CUDA_MPS_PIPE_DIRECTORY="$CUDA_MPS_PIPE_DIRECTORY" \
    "$D/daemon/ferryd" --backend cuda --socket "$sock" --slots 16 --slot-size 4194304 --log-level info \
    2>"$OUT/ferryd-$1.log" &
  FD=$!
  SOCK=$sock
}
wait_sock() { for _ in $(seq 400); do [[ -S $SOCK ]] && return 0; kill -0 $FD 2>/dev/null || return 1; sleep 0.05; done; return 1; }
fresh_mps() {  # $@: control daemon flags
  # A control daemon whose servers still wait for queued clients does not
  # quit: end them all.
  timeout 5 sh -c "echo quit | $MPS" >/dev/null 2>&1
  pkill -9 -x nvidia-cuda-mps 2>/dev/null; sleep 0.5
  rm -rf "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  chmod 0777 "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  $MPS "$@"
}

PHASES=${PHASES:-1,2,3}
if [[ $PHASES == *1* ]]; then
echo "## 1. per-user control daemon (-d), ferryd first" | tee -a "$OUT/mps-users.md"
fresh_mps -d
start_ferryd peruser
wait_sock && echo "ferryd up" | tee -a "$OUT/mps-users.md"
"$D/client/ferryctl" -s "$SOCK" status 2>&1 | head -3 >>"$OUT/mps-users.md"
ls -la "$CUDA_MPS_PIPE_DIRECTORY" >>"$OUT/mps-users.md"
timeout 12 "$D/bench/cuda_bench" --socket "$SOCK" --order-only --mps >"$OUT/peruser-client.md" 2>&1
echo "root client under the per-user daemon: exit $? (124: still waiting after 12 s)" | tee -a "$OUT/mps-users.md"
kill -TERM $FD; wait $FD
grep -i "mps" "$OUT/ferryd-peruser.log" | sed 's/^/ferryd: /' | tee -a "$OUT/mps-users.md"

fi
if [[ $PHASES == *2* ]]; then
echo "## 2. per-user control daemon, another uid's (root's) server first" | tee -a "$OUT/mps-users.md"
fresh_mps -d
python3 -c "
import ctypes, time
cu = ctypes.CDLL('libcuda.so.1'); assert cu.cuInit(0) == 0
d = ctypes.c_int(); ctx = ctypes.c_void_p()
assert cu.cuDeviceGet(ctypes.byref(d), 0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), d) == 0
print('root holds a context', flush=True); time.sleep(30)" >"$OUT/holder.log" 2>&1 &
H=$!
for _ in $(seq 200); do grep -q holds "$OUT/holder.log" && break; sleep 0.05; done
start_ferryd queued
for _ in $(seq 300); do grep -q "no context after 10 s" "$OUT/ferryd-queued.log" && break; sleep 0.05; done
kill $FD $H 2>/dev/null; wait $FD $H 2>/dev/null
grep -i "mps\|context" "$OUT/ferryd-queued.log" | sed 's/^/ferryd: /' | tee -a "$OUT/mps-users.md"

fi
if [[ $PHASES == *3* ]]; then
echo "## 3. multi-user server (-d -M): ferryd as $U, cuda_bench as root, $RUNS runs" | tee -a "$OUT/mps-users.md"
fresh_mps -d -M
ls -la "$CUDA_MPS_PIPE_DIRECTORY" >>"$OUT/mps-users.md"
start_ferryd multi
wait_sock && echo "ferryd up" | tee -a "$OUT/mps-users.md"
"$D/client/ferryctl" -s "$SOCK" status 2>&1 | head -4 | tee -a "$OUT/mps-users.md"
for r in $(seq "$RUNS"); do
  echo "### run $r" >>"$OUT/multi.md"
  timeout 120 "$D/bench/cuda_bench" --socket "$SOCK" --order-only --mps >>"$OUT/multi.md" 2>>"$OUT/multi.err"
  echo "cuda_bench (root) run $r exit: $?" | tee -a "$OUT/mps-users.md"
done
kill -TERM $FD; wait $FD
echo quit | $MPS
grep -i "mps" "$OUT/ferryd-multi.log" | sed 's/^/ferryd: /' | tee -a "$OUT/mps-users.md"
grep -h "known ≤\|loop correct\|pinned ring" "$OUT/multi.md" | tee -a "$OUT/mps-users.md"
fi
