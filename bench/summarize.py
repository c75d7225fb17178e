#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Several runs of one benchmark section (Markdown, as ferry_bench and
cuda_bench print it) as one: each table with every numeric cell replaced by
the median of the runs and their range, "median (min–max) unit". A run's own
range in a cell ("7.1 µs (6.9–7.3)") is left out: the summary's range is the
runs'. A cell that is not one number (a verdict, a list of numbers) shows each
distinct value with how many runs had it ("met ×3, **missed** ×1"); cells
whose units differ between runs are shown so too. Tables are matched by their
heading, header and place under that heading; rows by their first cell and
place among rows of that name. A cell missing from some runs says in how many
it was ("[3 of 4 runs]").

    python3 bench/summarize.py run1.md run2.md run3.md

With --tsv, the runs' bandwidth.tsv files (bench/stats.hpp, CallDone) as one:
per size and path the median of the runs' medians, the least minimum and the
greatest maximum, so bench/plot.sh draws the spread of every run.

    python3 bench/summarize.py --tsv run1/bandwidth.tsv run2/bandwidth.tsv > all.tsv
"""
import collections
import re
import statistics
import sys

# One number, an optional unit, an optional parenthesised range of the run's own.
NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?:\s*([^\s\d(][^\s(]*))?(?:\s*\([^()]*\))?$")
TSV_HEADER = "# bytes\tpath\tcall_us\tcall_min\tcall_max\tdone_us\tdone_min\tdone_max\n"


def tables(path):
    """{(heading, header, n): (heading, header, {(first cell, n): cells})}, in file order."""
    out, heading, cur, seen = {}, "", None, collections.Counter()
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("#"):
            heading = line
        if not line.startswith("|"):
            cur = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cur is None:
            n = seen[(heading, line)]
            seen[(heading, line)] += 1
            cur = out[(heading, line, n)] = (heading, line, {})
            names = collections.Counter()
        elif not set("".join(cells)) <= set("-: "):
            k = (cells[0], names[cells[0]])
            names[cells[0]] += 1
            cur[2][k] = cells
    return out


def parse(cell):
    """(value, unit, bold) of a cell holding one number, else None."""
    bold = len(cell) > 4 and cell.startswith("**") and cell.endswith("**")
    m = NUMBER.match(cell[2:-2].strip() if bold else cell)
    return (m.group(1), m.group(2) or "", bold) if m else None


def merge(cells, runs):
    parsed = [parse(c) for c in cells]
    if cells and all(parsed) and len({(u, b) for _, u, b in parsed}) == 1:
        vals = [float(v) for v, _, _ in parsed]
        digits = max(len(v.partition(".")[2]) if "e" not in v.lower() else 2 for v, _, _ in parsed)
        f = lambda x: f"{x:.{digits}f}"
        body = f(vals[0]) if len(vals) == 1 else f"{f(statistics.median(vals))} ({f(min(vals))}–{f(max(vals))})"
        unit, bold = parsed[0][1], parsed[0][2]
        text = (f"**{body}**" if bold else body) + (f" {unit}" if unit else "")
    else:
        counts = collections.Counter(cells)
        text = cells[0] if len(counts) == 1 else ", ".join(f"{v} ×{n}" for v, n in counts.items())
    return text + (f" [{len(cells)} of {runs} runs]" if len(cells) < runs else "")


def main(paths):
    runs = [tables(p) for p in paths]
    if not runs or not runs[0]:
        print("(no tables)")
        return
    keys = list(dict.fromkeys(k for r in runs for k in r))  # every table of any run, first seen first
    shown = None
    for key in keys:
        heading, header, _ = key
        same = [r[key][2] for r in runs if key in r]
        if heading and heading != shown:
            print(heading)
            shown = heading
        print("\n" + header)
        print("|" + "---|" * (header.count("|") - 1))
        for row in dict.fromkeys(k for t in same for k in t):
            width = max(len(t[row]) for t in same if row in t)
            merged = [row[0]]
            for col in range(1, width):
                merged.append(merge([t[row][col] for t in same if row in t and col < len(t[row])], len(paths)))
            print("| " + " | ".join(merged) + " |")
        print()


def merge_tsv(paths):
    rows, order, header = {}, [], TSV_HEADER
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
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if args else 2)
    if args[0] == "--tsv":
        merge_tsv(args[1:])
    else:
        main(args)
