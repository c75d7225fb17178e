#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Where the time goes per small upload: instructions (callgrind) and system
# calls (strace -c) of the client and of ferryd, for N 1 KiB uploads.
# Prints Markdown. usage: bench/profile.sh BUILD_DIR [N]
set -euo pipefail
build=$1
n=${2:-20000}
export FERRY_SIM_DRIVER=$build/sim/libze_ferry_sim.so.1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

top3() {  # the three functions with the most instructions of their own
  callgrind_annotate --inclusive=no "$1" 2>/dev/null | python3 -c '
import re, sys
rows = 0
for line in sys.stdin:
    m = re.match(r"\s*([0-9,]+) \(\s*([0-9.]+)%\)\s+(.*?):(.*?)(?: \[[^]]*\])?$", line.rstrip())
    if not m or "PROGRAM TOTALS" in line:
        continue
    count, share, file, func = m.groups()
    func = re.sub(r"\[clone [^]]*\]", "", func).strip()
    func = re.sub(r"\((?!anonymous)[^()]*\)$", "", func)  # drop the parameter list
    func = func.replace("(anonymous namespace)::", "")
    where = file.rsplit("/", 1)[-1]
    print(f"| {count} | {share}% | `{func}`" + ("" if where == "???" else f" ({where})") + " |")
    rows += 1
    if rows == 3:
        break
'
}
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }

run() {  # $1 = what to trace: callgrind | strace
  local sock=$work/$1.sock
  if [[ $1 == callgrind ]]; then
    valgrind --tool=callgrind --callgrind-out-file="$work/daemon.cg" "$build/daemon/ferryd" --sim --socket "$sock" \
      --log-level warn 2>/dev/null &
  else
    strace -f -c -o "$work/daemon.st" "$build/daemon/ferryd" --sim --socket "$sock" --log-level warn 2>/dev/null &
  fi
  local d=$!
  for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
  if [[ $1 == callgrind ]]; then
    valgrind --tool=callgrind --callgrind-out-file="$work/client.cg" "$build/bench/small_uploads" "$sock" "$n" 2>/dev/null
  else
    strace -f -c -o "$work/client.st" "$build/bench/small_uploads" "$sock" "$n"
  fi
  pkill -TERM -P $d 2>/dev/null || true  # ferryd itself, under strace or valgrind
  kill -TERM $d 2>/dev/null || true
  wait $d || true
}
run callgrind
run strace

echo "## 7. Where the time goes per small upload"
echo
echo "\`bash bench/profile.sh $(basename "$build") $n\`: $n back-to-back 1 KiB uploads (\`bench/small_uploads.c\`)."
echo "Instructions counted by callgrind (the daemon's count includes the simulated GPU's"
echo "engine thread); system calls counted by \`strace -f -c\`."
echo
for side in client daemon; do
  t=$(total "$work/$side.cg")
  echo "**$side**: $((t / n)) instructions per upload. Largest costs of their own:"
  echo
  echo "| instructions | share | function |"
  echo "|---|---|---|"
  top3 "$work/$side.cg"
  echo
  echo "System calls per upload, all of them: $(awk -v n="$n" '$NF == "total" {print $4 / n}' "$work/$side.st" | xargs printf '%.3f')."
  echo
  echo "System calls of one kind, 0.05 or more per upload: $(awk -v n="$n" '$NF ~ /^[a-z_0-9]+$/ && $NF != "total" && $4 ~ /^[0-9]+$/ {c[$NF]=$4} $NF ~ /^[a-z_0-9]+$/ && $4 !~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ {c[$NF]=$4} END {for (k in c) if (c[k] / n >= 0.05) printf "%s %.2f, ", k, c[k] / n}' "$work/$side.st" | sed 's/, $//' | sed 's/^$/none/')."
  echo
done
