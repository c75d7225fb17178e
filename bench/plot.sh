#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Draws a benchmark's bandwidth.tsv (rows of CallDone::write_row, bench/stats.hpp)
# as two panels side by side: how long each upload path's call takes to return,
# and how long until the bytes are on the device, against size; each point the
# median of its repetitions, the bar their range. Lower is better in both.
#   bash bench/plot.sh DATA.tsv OUT.png "title"
set -euo pipefail
tsv=$1 png=$2 title=${3:-upload paths against size}
q() { local v=${1//\\/\\\\}; printf '%s' "${v//\"/\\\"}"; }  # inside a gnuplot "string"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# One file per path (numbered), in the order the paths first appear.
mapfile -t paths < <(awk -F'\t' '!/^#/ && !seen[$2]++ {print $2}' "$tsv")
for i in "${!paths[@]}"; do awk -F'\t' -v p="${paths[$i]}" '$2 == p' "$tsv" >"$dir/$i.tsv"; done
panel() {  # $1: first column of the median, min, max
  local sep="" c=$1 cmd="" i w
  for i in "${!paths[@]}"; do
    w=1; [[ ${paths[$i]} == ferry ]] && w=3
    cmd+="$sep\"$(q "$dir/$i.tsv")\" using 1:$c:$((c + 1)):$((c + 2)) with yerrorlines lw $w title \"$(q "${paths[$i]}")\""
    sep=", "
  done
  echo "$cmd"
}
gnuplot <<GP
set terminal pngcairo size 1200,520 font ",10"
set output "$(q "$png")"
set multiplot layout 1,2 title "$(q "$title")"
set logscale xy
set xrange [2048:2147483648]
set xlabel "upload size (bytes)"
set xtics ("4K" 4096, "64K" 65536, "1M" 1048576, "16M" 16777216, "256M" 268435456, "1G" 1073741824)
set grid
set key top left
set ylabel "µs until the call returns"
set title "call returns (the caller may go on)"
plot $(panel 3)
set ylabel "µs until the bytes are on the device"
set title "on the device (what a consumer waits for)"
plot $(panel 6)
unset multiplot
GP
