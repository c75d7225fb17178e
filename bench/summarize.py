#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Several runs of one benchmark section (Markdown, as ferry_bench and
cuda_bench print it) as one: each table with every numeric cell replaced by
the median of the runs and their range, "median (min–max)", in the unit the
cell had (a run's own range in a cell is left out). Tables are matched by their position and header, rows by their first
cell; a cell that is not a number is taken from the first run.

    python3 bench/summarize.py run1.md run2.md run3.md

With --tsv, the runs' bandwidth.tsv files (bench/stats.hpp, CallDone) as one:
per size and path the median of the runs' medians, the least minimum and the
greatest maximum, so bench/plot.sh draws the spread of every run.

    python3 bench/summarize.py --tsv run1/bandwidth.tsv run2/bandwidth.tsv > all.tsv
"""
import re
import statistics
import sys

# A number, its unit and what follows (a run's own p10–p90 range, dropped: the
# summary's range is the runs').
NUMBER = re.compile(r"^\s*(\**)(-?\d+(?:\.\d+)?)(\**)\s*([^\s(]*)")


def tables(path):
    """[(heading, header_line, [rows as lists of cells])] in file order."""
    out, heading, cur = [], "", None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("#"):
            heading = line
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cur is None:
                cur = (heading, line, [])
                out.append(cur)
            elif not set("".join(cells)) <= set("-: "):
                cur[2].append(cells)
        else:
            cur = None
    return out


def merge(cells, width):
    parsed = [NUMBER.match(c) for c in cells]
    # A list of numbers (one per process, say) is not summarised.
    if not cells or not all(parsed) or any(re.match(r"-?\d", m.group(4)) for m in parsed):
        return cells[0] if cells else ""
    vals = [float(m.group(2)) for m in parsed]
    digits = max(len(m.group(2).partition(".")[2]) for m in parsed)
    stars, unit = parsed[0].group(1), parsed[0].group(4)
    f = lambda v: f"{v:.{digits}f}"
    body = f(statistics.median(vals)) if len(vals) == 1 else \
        f"{f(statistics.median(vals))} ({f(min(vals))}–{f(max(vals))})"
    return f"{stars}{body}{stars}" + (f" {unit}" if unit else "")


def main(paths):
    runs = [tables(p) for p in paths]
    if not runs or not runs[0]:
        print("(no tables)")
        return
    shown = None
    for i, (heading, header, rows) in enumerate(runs[0]):
        same = [r[i] for r in runs if i < len(r) and r[i][1] == header]
        if heading and heading != shown:
            print(heading)
            shown = heading
        print("\n" + header)
        print("|" + "---|" * (header.count("|") - 1))
        for row in rows:
            merged = [row[0]]
            for col in range(1, len(row)):
                cells = [c for t in same for r in t[2] if r and r[0] == row[0] and col < len(r) for c in [r[col]]]
                merged.append(merge(cells, len(same)))
            print("| " + " | ".join(merged) + " |")
        print()


def merge_tsv(paths):
    rows, order = {}, []
    for path in paths:
        for line in open(path, encoding="utf-8"):
            if line.startswith("#"):
                header = line
                continue
            f = line.rstrip("\n").split("\t")
            key = (int(f[0]), f[1])
            if key not in rows:
                order.append(key)
            rows.setdefault(key, []).append([float(x) for x in f[2:8]])
    print(header, end="")
    for key in order:
        v = rows[key]
        call = statistics.median(r[0] for r in v), min(r[1] for r in v), max(r[2] for r in v)
        done = statistics.median(r[3] for r in v), min(r[4] for r in v), max(r[5] for r in v)
        print("\t".join([str(key[0]), key[1]] + [f"{x:.3f}" for x in call + done]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--tsv"]:
        merge_tsv(sys.argv[2:])
    else:
        main(sys.argv[1:])
