#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The wheel on an NVIDIA GPU machine (the `device` tool), as a PyTorch user
# gets it: installed offline into a venv that sees the machine's torch from
# pip, its ferry-run around the unmodified PyTorch loop beside the pack's
# ferry-run, plain and hand-pinned (bench/run_torch.py), and ferry.torch's
# CUDA tests against the installed package. From the repository root:
#
#   bash scripts/gpu-pack.sh && bash scripts/wheel.sh .device/wheel     # here
#   OUT=$OUT bash bench/wheel_gpu.sh                                    # there
#
# Writes run.txt (every line, prefixed by what ran) and summary.txt.
set -u
P=$(cd "${B:-.device}" && pwd)
OUT=${OUT:-/tmp/ferry-wheel-gpu}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "$*" | tee -a "$OUT/summary.txt"; }
one() {
  local label=$1
  shift
  timeout 200 "$@" 2>&1 | sed "s/^/$label | /" | tee -a "$OUT/run.txt"
}
env=/tmp/ferry-wheel-venv
rm -rf "$env"
python3 -m venv --system-site-packages "$env" >/dev/null || { log "no venv"; exit 1; }
# The machine's torch where its python3 finds it (a venv leaves out the user's
# site and PYTHONPATH): the venv reads that folder as its own.
site=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' >"$site/machine-torch.pth" 2>/dev/null
"$env/bin/pip" install -q --no-index "$P"/wheel/ferry-*.whl >"$OUT/pip.log" 2>&1 || { log "pip install failed"; cat "$OUT/pip.log"; exit 1; }
log "$(nvidia-smi -L | head -1); pack $(cat "$P/COMMIT"); $(basename "$P"/wheel/ferry-*.whl); glibc $(ldd --version | head -1 | awk '{print $NF}')"
log "installed: $(cd /tmp && "$env/bin/python" -c 'import ferry, ferry._api as a, torch; print(ferry.__file__, a._c._name, "torch", torch.__version__, torch.__file__)' 2>&1 | tail -1)"

sock=/tmp/ferry-wheel-gpu.sock
"$P/daemon/ferryd" --backend cuda --socket "$sock" --log-level warn >"$OUT/ferryd.log" 2>&1 &
ferryd=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
[[ -S $sock ]] || { log "ferryd did not start"; cat "$OUT/ferryd.log"; exit 1; }

TORCH="python3 $P/tree/bench/run_torch.py"
WHEEL="env PATH=$env/bin:$PATH ferry-run --socket $sock"
PACK="$P/interpose/ferry-run --socket $sock"
one "check wheel" $WHEEL --stats -- $TORCH check
for r in $(seq "$ROUNDS"); do
  one "loop plain r$r" $TORCH loop
  one "loop pack r$r" $PACK -- $TORCH loop
  one "loop wheel r$r" $WHEEL -- $TORCH loop
  one "loop pinned r$r" $TORCH loop --pinned
done
# ferry.torch's CUDA tests, the package imported from the venv (the wheel's
# libferry), each test in a process of its own as bench/gpu.sh runs them.
tests=$PWD/python/tests/test_torch_cuda.py
passed=0 failed=0
for t in $(awk '/^class [A-Za-z]+\(unittest.TestCase\)/ {c = $2; sub(/\(.*/, "", c)}
                /^    def test_/ {n = $2; sub(/\(.*/, "", n); print c "." n}' "$tests"); do
  if (cd /tmp && FERRY_TEST_INSTALLED=1 FERRY_SOCKET=$sock FERRY_TEST_HANG_S=50 timeout 60 \
    "$env/bin/python" "$tests" -v "$t" >>"$OUT/torch_cuda.log" 2>&1); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    log "test_torch_cuda.py $t against the wheel: FAILED"
  fi
done
log "test_torch_cuda.py against the wheel: $passed passed, $failed failed"
kill "$ferryd"
wait "$ferryd" 2>/dev/null
python3 - "$OUT/run.txt" <<'EOF' | tee -a "$OUT/summary.txt"
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"loop (\w+) r\d+ \| .*it_per_s=([0-9.]+) (ok|WRONG)", line)
    if m:
        rows.setdefault(m.group(1), []).append(float(m.group(2)))
plain = statistics.median(rows.get("plain", [0])) or 1
for k, v in rows.items():
    print(f"loop {k}: median {statistics.median(v):.2f} it/s ({min(v):.2f}-{max(v):.2f}, n={len(v)}), {statistics.median(v) / plain:.2f}x plain")
EOF
grep -h "check wheel" "$OUT/run.txt" | tail -12 >>"$OUT/summary.txt"
grep -c "WRONG" "$OUT/run.txt" | sed 's/^/lines WRONG: /' >>"$OUT/summary.txt"
