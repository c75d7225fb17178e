#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every CUDA test and measurement of ferry on an NVIDIA GPU machine (the
# `device` tool), run from the repository root with a pack built here by
# scripts/gpu-pack.sh (a folder of binaries laid out as a build tree):
#
#   bash scripts/gpu-pack.sh                                   # here
#   bash bench/gpu.sh                                          # there, .device carried
#   A=.device-before MPS=1 STEPS=bench bash bench/gpu.sh       # before/after, alternating
#
# Settings, from the environment:
#   B       the pack under test (.device)
#   A       a second pack ("before"): each section of `bench` then runs A, B, A, B, ...
#           so both see the same machine on the same day
#   STEPS   which of these, in this order (default "tests bench"):
#             tests      the CUDA integration tests, CUDA IPC, ferryctl under load, and
#                        python/tests/test_torch_cuda.py
#             bench      cuda_bench's SECTIONS, ROUNDS times; bandwidth.tsv for bench/plot.sh
#             torch      bench/torch_loader_bench.py (ferry.torch against pin_memory=True), A then B
#             loader     bench/loader_bench (the pin-memory pattern in C++)
#             probe      bench/submit_probe (the driver's own staged paths, no daemon)
#             multi-gpu  one ferryd per GPU: producers and link_check on two GPUs at once
#             mps-users  ferryd as a system user, clients as root, under MPS's
#                        per-user and multi-user (-M) servers (runs its own MPS)
#   SECTIONS  cuda_bench sections for `bench`: order bandwidth producers flood
#             (default "order bandwidth producers")
#   ROUNDS    rounds of SECTIONS (2); REPS repetitions inside torch and loader (3);
#             FLOOD_SECONDS the length of each flood phase (10)
#   MPS=1     every step but mps-users under an MPS control daemon of this script's
#             own (pipe and log directories under /tmp), stopped at the end
#   OUT       the results folder (/tmp/ferry-gpu): one file per run; summary.md (the
#             machine, every run's exit status, each section's tables as median
#             (min–max) over the rounds per build, by bench/summarize.py), which
#             becomes bench/gpu_latest.md, written also when a SIGTERM (from
#             `timeout`, well under the device's limit) stops the run; bandwidth.tsv (all rounds of B) for
#             `bash bench/plot.sh bandwidth.tsv docs/bench_gpu.png`; and all.tgz,
#             into which everything else is packed at the end
#   FERRYD_NICE  every ferryd but mps-users' at this nice (a negative one as root), else 0
#   WORK, WORKERS, MIB  the torch and loader steps' workloads, worker counts and sizes
#             (see bench/torch_loader_bench.py and bench/loader_bench --help)
set -u
if (($#)); then
  sed -n '3,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [[ $1 == -h || $1 == --help ]] && exit 0 || exit 2
fi
abs() { (cd "$1" && pwd); }
B=$(abs "${B:-.device}") || exit 2
A=${A:+$(abs "$A")}
[[ $A == "$B" ]] && { echo "bench/gpu.sh: A and B are the same pack" >&2; exit 2; }
OUT=${OUT:-/tmp/ferry-gpu}
STEPS=${STEPS:-tests bench}
SECTIONS=${SECTIONS:-order bandwidth producers}
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-3}
MPSCTL=/usr/local/nvidia/bin/nvidia-cuda-mps-control
# A fresh folder: the summary counts every round file in it, and the end
# packs and removes what is there.
if [[ -e $OUT ]] && [[ -n $(ls -A "$OUT") ]]; then
  echo "bench/gpu.sh: OUT=$OUT is not empty; give it a new folder" >&2
  exit 2
fi
for s in $SECTIONS; do
  case $s in order | bandwidth | producers | flood) ;; *) echo "bench/gpu.sh: no section '$s'" >&2; exit 2 ;; esac
done
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
gpus=$(nvidia-smi -L)
{
  echo "gpus: $(echo "$gpus" | wc -l) × $(echo "$gpus" | head -1 | sed 's/^GPU 0: //; s/ (UUID.*//')"
  echo "cores: $(nproc)"
  # The pack's own commit (scripts/gpu-pack.sh writes it): the machine's copy
  # of the tree may carry an older .git.
  echo "commit: $(cat "$B/COMMIT" 2>/dev/null || echo unknown)$([[ -n $A ]] && echo ", A: $(cat "$A/COMMIT" 2>/dev/null || echo unknown)")"
} >"$OUT/machine.txt"

want() { [[ " $STEPS " == *" $1 "* ]]; }
# Each pack's results under its role, A or B (the paths go in the summary).
label() { [[ $1 == "$B" ]] && echo B || echo A; }
log() { echo "$*" | tee -a "$OUT/runs.txt"; }
machine() { sed -n "s/^$1: //p" "$OUT/machine.txt"; }

# A ferryd of pack $1 on socket $2 (further ferryd flags after); sets D.
start_ferryd() {
  local pack=$1 sock=$2
  shift 2
  rm -f "$sock"
  LD_LIBRARY_PATH=$pack/lib ${FERRYD_NICE:+nice -n "$FERRYD_NICE"} "$pack/daemon/ferryd" --backend cuda --socket "$sock" --slot-size 4194304 --slots 16 \
    --log-level warn "$@" 2>>"$OUT/ferryd-$(basename "$sock" .sock).log" &
  D=$!
  for _ in $(seq 400); do [[ -S $sock ]] && return 0; kill -0 $D 2>/dev/null || break; sleep 0.05; done
  log "ferryd of $pack did not start on $sock"
  return 1
}
stop_ferryd() { kill -TERM "$D" 2>/dev/null; wait "$D"; }

# An MPS control daemon of this script's own, in pipe and log directories of
# its own: one the user runs elsewhere is neither used nor stopped.
MPS_OURS=0
mps_up() {  # flags of the control daemon
  mps_down
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ferry-gpu-mps CUDA_MPS_LOG_DIRECTORY=/tmp/ferry-gpu-mps-log
  rm -rf "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  chmod 0777 "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  "$MPSCTL" "$@" || { log "no MPS control daemon"; return 1; }
  MPS_OURS=1
}
mps_down() {
  ((MPS_OURS)) || return 0
  # A control daemon whose servers still wait for queued clients does not
  # quit: its servers (those of this pipe directory) are ended.
  timeout 5 sh -c "echo quit | $MPSCTL" >/dev/null 2>&1
  for p in $(pgrep -x nvidia-cuda-mps 2>/dev/null); do
    grep -qz "CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY" "/proc/$p/environ" 2>/dev/null && kill -9 "$p"
  done
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  MPS_OURS=0
}
[[ ${MPS:-0} == 1 ]] && { mps_up -d || exit 1; }
mps_flag() { ((MPS_OURS)) && echo --mps; }

step_tests() {
  local t
  for t in upload_tests ordering_tests fence_tests cpp_api_tests fork_tests; do
    LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda timeout 240 "$B/tests/$t" "~[simonly]" >"$OUT/test-$t.log" 2>&1
    log "$t: exit $?"
  done
  LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda timeout 240 "$B/tests/reliability_tests" "[churn]" >"$OUT/test-churn.log" 2>&1
  log "reliability_tests [churn]: exit $?"
  # sharing_tests links the Level Zero loader (in the pack's lib/); only its grant tests run on CUDA.
  LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda timeout 240 "$B/tests/sharing_tests" "[grant]" >"$OUT/test-grant.log" 2>&1
  log "sharing_tests [grant]: exit $?"
  local sock=/tmp/ferry-gpu-tests.sock
  start_ferryd "$B" "$sock" || return
  timeout 120 "$B/bench/cuda_ipc_check" "$sock" "$B/tests/producer_client" >"$OUT/test-cuda_ipc.log" 2>&1
  log "cuda_ipc_check: exit $?"
  "$B/examples/multi_upload" -s "$sock" -p 8 -n 400 -b 4194304 >"$OUT/test-multi_upload.log" 2>&1 &
  local m=$!
  sleep 0.5  # the producers at work, for ferryctl's view
  "$B/tools/ferryctl" -s "$sock" status >"$OUT/ferryctl-status.txt" 2>&1
  wait $m
  log "multi_upload (8 producers, verified): exit $?"
  if command -v python3 >/dev/null && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    local t
    # Each test in a process of its own: Class.test for every test of every class.
    for t in $(awk '/^class [A-Za-z]+\(unittest.TestCase\)/ {c = $2; sub(/\(.*/, "", c)}
                    /^    def test_/ {n = $2; sub(/\(.*/, "", n); print c "." n}' python/tests/test_torch_cuda.py); do
      FERRY_LIBRARY=$B/client/libferry.so.0 FERRY_SOCKET=$sock FERRY_TEST_HANG_S=50 timeout 60 \
        python3 python/tests/test_torch_cuda.py -v "$t" >>"$OUT/test-torch_cuda.log" 2>&1
      log "python $t: exit $?"
    done
    # torch's loader and ferry.torch's interleaved in one process, batches on the GPU.
    FERRY_LIBRARY=$B/client/libferry.so.0 timeout 240 python3 -X faulthandler python/tests/interleaved_loaders.py \
      "$sock" cuda:0 2 >"$OUT/test-interleaved.log" 2>&1
    log "interleaved loaders (cuda:0): exit $?"
    # Lightning's predict and ddp paths re-create the loader (77: no Lightning).
    FERRY_LIBRARY=$B/client/libferry.so.0 timeout 180 python3 python/tests/lightning_paths.py "$sock" \
      >"$OUT/test-lightning.log" 2>&1
    log "lightning predict and ddp: exit $?"
  else
    log "python/tests/test_torch_cuda.py: skipped (no torch with CUDA)"
  fi
  stop_ferryd
}

bench_run() {  # pack section round
  local pack=$1 section=$2 round=$3 args=() f
  f=$OUT/$section.$(label "$pack").$round
  case $section in
    order) args=(--order-only) ;;
    bandwidth) args=(--bandwidth-only --data "$f") ;;
    producers) args=(--producers-only --procs 1,4,8) ;;
  esac
  start_ferryd "$pack" /tmp/ferry-gpu-bench.sock || return
  mkdir -p "$f"
  if [[ $section == flood ]]; then
    timeout 200 "$pack/bench/flood_bench" --socket /tmp/ferry-gpu-bench.sock --daemon-pid "$D" --phase-seconds "${FLOOD_SECONDS:-10}" \
      >"$f.md" 2>"$f.err"
  else
    FERRY_STAGING_THREADS=8 timeout 200 "$pack/bench/cuda_bench" --socket /tmp/ferry-gpu-bench.sock "${args[@]}" \
      $(mps_flag) >"$f.md" 2>"$f.err"
  fi
  log "$section $(label "$pack") round $round: exit $?"
  stop_ferryd
}
step_bench() {
  local r s p
  for r in $(seq "$ROUNDS"); do
    for s in $SECTIONS; do
      for p in $A $B; do bench_run "$p" "$s" "$r"; done
    done
  done
}

# Each section's tables over the rounds that ran, per pack (also after a stop).
summarize_sections() {
  local s p
  for s in $SECTIONS; do
    compgen -G "$OUT/$s.B.[0-9]*.md" >/dev/null || continue
    {
      echo "### $s"
      for p in $A $B; do
        echo
        echo "#### $(label "$p") ($p): median (min–max) of $(compgen -G "$OUT/$s.$(label "$p").[0-9]*.md" | wc -l) runs"
        echo
        python3 bench/summarize.py "$OUT/$s.$(label "$p")".[0-9]*.md | sed 's/^#/###/'
      done
      echo
    } >>"$OUT/sections.md"
  done
  # Every round's call and completion times of B, for bench/plot.sh (here: docs/bench_gpu.png).
  if compgen -G "$OUT/bandwidth.B.[0-9]*/bandwidth.tsv" >/dev/null; then
    python3 bench/summarize.py --tsv "$OUT/bandwidth.B".[0-9]*/bandwidth.tsv >"$OUT/bandwidth.tsv"
  fi
}

# ferry.torch against torch's loader, with each pack's own Python package
# (its tree/, which scripts/gpu-pack.sh copies; else this checkout's), A then B.
step_torch() {
  local p tree
  for p in $A $B; do
    tree=$p/tree
    [[ -f $tree/bench/torch_loader_bench.py ]] || tree=.
    start_ferryd "$p" /tmp/ferry-gpu-torch.sock || return
    FERRY_LIBRARY=$p/client/libferry.so.0 timeout 420 python3 "$tree/bench/torch_loader_bench.py" \
      --socket /tmp/ferry-gpu-torch.sock --ferryd-pid "$D" --work "${WORK:-bytes16,bytes64,images,step16}" \
      --workers "${WORKERS:-1,8,16}" --reps "$REPS" --label "$([[ -n $(mps_flag) ]] && echo MPS || echo no MPS)" \
      >"$OUT/torch.$(label "$p").md" 2>"$OUT/torch.$(label "$p").err"
    log "torch_loader_bench $(label "$p"): exit $?"
    stop_ferryd
  done
}

step_loader() {
  start_ferryd "$B" /tmp/ferry-gpu-loader.sock || return
  LD_LIBRARY_PATH=$B/lib timeout 420 "$B/bench/loader_bench" --socket /tmp/ferry-gpu-loader.sock --ferryd-pid "$D" \
    --workers "${WORKERS:-1,4,8,16}" --mib "${MIB:-1,16,64}" --reps "$REPS" >"$OUT/loader.md" 2>"$OUT/loader.err"
  log "loader_bench: exit $?"
  stop_ferryd
}

step_probe() {
  local b
  for b in 262144 1048576; do
    "$B/bench/submit_probe" --bytes $b --runs 41 >>"$OUT/probe.md" 2>&1
    log "submit_probe $b bytes: exit $?"
  done
}

step_multi-gpu() {
  local n g pids=()
  n=$(nvidia-smi -L | wc -l)
  ((n >= 2)) || { log "multi-gpu: skipped ($n GPU)"; return; }
  for g in 0 1; do
    start_ferryd "$B" /tmp/ferry-gpu-$g.sock --device $g || break
    pids+=("$D")
  done
  if ((${#pids[@]} < 2)); then
    for D in "${pids[@]}"; do stop_ferryd; done
    return
  fi
  "$B/bench/link_check" >"$OUT/link_check.md" 2>&1
  log "link_check: exit $?"
  local jobs=()
  for g in 0 1; do
    "$B/bench/cuda_bench" --socket /tmp/ferry-gpu-$g.sock --producers-only --procs 4 >"$OUT/producers-gpu$g.md" 2>&1 &
    jobs+=($!)
  done
  wait "${jobs[@]}"
  log "producers on two GPUs at once: see producers-gpu0.md, producers-gpu1.md"
  for D in "${pids[@]}"; do stop_ferryd; done
}

step_mps-users() {
  mps_down
  local U=ferrymps dir=/tmp/ferry-gpu-pack sock=/tmp/ferry-gpu-mu.sock uid gid
  id "$U" >/dev/null 2>&1 || useradd -M -r -s /usr/sbin/nologin "$U" 2>/dev/null || U=nobody
  uid=$(id -u "$U") gid=$(id -g "$U")
  rm -rf "$dir" && cp -r "$B" "$dir" && chmod -R a+rX "$dir"
  chmod 1777 "$OUT"
  as_user() { setpriv --reuid="$uid" --regid="$gid" --clear-groups "$@"; }
  local mode
  for mode in per-user multi-user; do
    if [[ $mode == per-user ]]; then mps_up -d; else mps_up -d -M; fi || return
    rm -f "$sock"
    as_user env LD_LIBRARY_PATH="$dir/lib" CUDA_MPS_PIPE_DIRECTORY="$CUDA_MPS_PIPE_DIRECTORY" \
      "$dir/daemon/ferryd" --backend cuda --socket "$sock" --slots 16 --slot-size 4194304 --log-level info \
      2>"$OUT/ferryd-mps-$mode.log" &
    D=$!
    for _ in $(seq 400); do [[ -S $sock ]] && break; kill -0 $D 2>/dev/null || break; sleep 0.05; done
    local limit=120
    [[ $mode == per-user ]] && limit=12  # the per-user server queues another uid's client
    for r in $(seq "$ROUNDS"); do
      timeout $limit "$dir/bench/cuda_bench" --socket "$sock" --order-only --mps >"$OUT/mps-$mode-$r.md" 2>&1
      log "mps-users $mode: ferryd as $U, cuda_bench as root, round $r: exit $? (124: still queued after $limit s)"
      [[ $mode == per-user ]] && break
    done
    stop_ferryd
    mps_down
  done
}

# summary.md: what bench/sim.sh puts into docs/BENCHMARKS-SIM.md (kept as bench/gpu_latest.md),
# written however the run ends (a stop by SIGTERM, from `timeout`, included; the
# step under way ends first).
finish() {
  trap - EXIT
  mps_down
  summarize_sections
  {
    echo "## NVIDIA GPU: the latest \`bench/gpu.sh\` run"
    echo
    echo "\`STEPS=\"$STEPS\" SECTIONS=\"$SECTIONS\" ROUNDS=$ROUNDS MPS=${MPS:-0}${FERRYD_NICE:+ FERRYD_NICE=$FERRYD_NICE}$([[ -n $A ]] && echo " A=$A") B=$B bash bench/gpu.sh\`"
    echo "on $(date -u +%Y-%m-%d): $(machine gpus) GPU, $(machine cores) cores; commit $(machine commit)."
    echo
    echo "Runs and tests, with their exit status:"
    echo
    sed 's/^/    /' "$OUT/runs.txt" 2>/dev/null
    echo
    [[ -f $OUT/sections.md ]] && cat "$OUT/sections.md"
    [[ -f $OUT/bandwidth.tsv ]] && echo "![call return and time until on the device against size, NVIDIA GPU](bench_gpu.png)"
  } >"$OUT/summary.md"
  # The device tool brings back a bounded number of files: everything in one.
  tar -C "$OUT" -czf /tmp/ferry-gpu-all.tgz . &&
    find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.md ! -name bandwidth.tsv -exec rm -rf {} + &&
    mv /tmp/ferry-gpu-all.tgz "$OUT/all.tgz"
}
trap finish EXIT
trap 'log "stopped by a signal"; exit 143' TERM INT

for s in tests bench torch loader probe multi-gpu mps-users; do
  if want "$s"; then "step_$s"; fi
done
# Exit status 1 when any run or test did not exit 0 (MPS's per-user server
# keeping another uid's client queued is what it is expected to do).
! grep ': exit [1-9]' "$OUT/runs.txt" | grep -qv 'per-user.*exit 124'

