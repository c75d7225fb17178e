#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the shape docs/DESIGN.md promises: every source file of daemon/ and
client/src/ small enough to read in one sitting, no include cycle among the
project's own headers, and proto/ at the bottom (it includes nothing of the
daemon's or the library's). Prints the include graph with --graph.
usage: structure_check.py REPO_ROOT [--graph]"""
import os
import re
import sys

MAX_LINES = 400
root = sys.argv[1]
parts = ["proto/include/ferry", "proto/src", "daemon", "client/src", "client/include/ferry"]
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

files = {}
for part in parts:
    d = os.path.join(root, part)
    for name in sorted(os.listdir(d)):
        if name.endswith((".hpp", ".h", ".cpp")):
            files[os.path.join(part, name)] = open(os.path.join(d, name)).read()


def resolve(src, inc):
    """The project file `#include "inc"` in `src` names, or None (outside)."""
    here = os.path.join(os.path.dirname(src), inc)
    if here in files:
        return here
    for part in parts:
        cand = os.path.join(os.path.dirname(part), inc) if inc.startswith("ferry/") else os.path.join(part, inc)
        if cand in files:
            return cand
    return None


graph = {f: sorted({r for r in (resolve(f, i) for i in include.findall(t)) if r}) for f, t in files.items()}
problems = []

for f, t in files.items():
    if f.startswith(("daemon/", "client/src/")):
        n = t.count("\n")
        if n > MAX_LINES:
            problems.append(f"{f}: {n} lines (at most {MAX_LINES})")
    if f.startswith("proto/"):
        for g in graph[f]:
            if not g.startswith("proto/"):
                problems.append(f"{f} includes {g}: proto/ must stay at the bottom")

# Cycles between modules: a .hpp and its .cpp are one node, so two sources
# that include each other's headers form a cycle too.
def module(f):
    return os.path.splitext(f)[0].replace("proto/src/", "proto/include/ferry/")


mods = {}
for f, gs in graph.items():
    mods.setdefault(module(f), set()).update(module(g) for g in gs if module(g) != module(f))

graph = {m: sorted(v) for m, v in mods.items()}
state = {}


def visit(f, path):
    state[f] = 1
    for g in graph[f]:
        if state.get(g) == 1:
            problems.append("include cycle: " + " -> ".join(path[path.index(g):] + [g]))
        elif g not in state:
            visit(g, path + [g])
    state[f] = 2


for m in graph:
    if m not in state:
        visit(m, [m])

if "--graph" in sys.argv:
    for m in sorted(graph):
        if graph[m]:
            print(f"{m} -> {', '.join(graph[m])}")
for p in problems:
    print("structure:", p)
print(f"structure: {len(files)} files in {len(graph)} modules, {len(problems)} problems")
sys.exit(1 if problems else 0)
