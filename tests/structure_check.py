#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the shape docs/DESIGN.md promises: no class of daemon/, client/src/,
interpose/ and tools/ across files (each class's members are defined in one
.cpp: a reader finds a type in one place, whatever its length), interpose/ on
libferry's public headers alone, no include cycle among the
project's own headers, proto/ and util/ at the bottom (they include nothing of
the daemon's or the library's), and ferryd's layers in order: device/ includes
nothing of engine/, admin/ or net/; engine/ nothing of admin/ or net/; admin/
nothing of net/. Prints the include graph with --graph.
usage: structure_check.py REPO_ROOT [--graph]"""
import collections
import os
import re
import sys

root = sys.argv[1]
parts = ["proto/include/ferry", "proto/src", "util/include/ferry/util", "util/src", "daemon", "daemon/device",
         "daemon/engine", "daemon/admin", "daemon/net", "client/src", "client/include/ferry", "tools", "interpose/src"]
# ferryd's layers, lowest first: each may include only its own and those before it.
layers = ["daemon/device/", "daemon/engine/", "daemon/admin/", "daemon/net/"]
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
        base = part if not inc.startswith("ferry/") else part[: part.index("ferry")] if "ferry" in part else part
        for cand in (os.path.join(base, inc), os.path.join(part, inc)):
            if cand in files:
                return cand
    return None


graph = {f: sorted({r for r in (resolve(f, i) for i in include.findall(t)) if r}) for f, t in files.items()}
problems = []

for f, t in files.items():
    # ferry-run's interposers stand on libferry's public API alone.
    if f.startswith("interpose/"):
        for g in graph[f]:
            if not g.startswith(("interpose/", "client/include/")):
                problems.append(f"{f} includes {g}: interpose/ may use only libferry's public headers")
    if f.startswith(("proto/", "util/")):
        for g in graph[f]:
            if not g.startswith(("proto/", "util/")):
                problems.append(f"{f} includes {g}: proto/ and util/ must stay at the bottom")
    for i, layer in enumerate(layers):
        if f.startswith(layer):
            for g in graph[f]:
                if any(g.startswith(above) for above in layers[i + 1:]):
                    problems.append(f"{f} includes {g}: {layer} is below it")

# No class across files: a member defined out of its class (at namespace
# level, Class::name(...) followed by its body) names the one .cpp that
# defines that class's members.
member = re.compile(r"^(?!\s)(?:template\s*<[^>]*>\s*)?[^;{}()\n]*?\b(\w+)::(~?\w+)\s*\(", re.M)
defined_in = collections.defaultdict(set)
for f, t in files.items():
    if f.endswith(".cpp") and f.startswith(("daemon/", "client/src/", "interpose/", "tools/")):
        for m in member.finditer(t):
            rest = t[m.end():]
            brace, semi = rest.find("{"), rest.find(";")
            if brace != -1 and (semi == -1 or brace < semi):
                defined_in[m.group(1)].add(f)
for cls, where in sorted(defined_in.items()):
    if len(where) > 1:
        problems.append(f"class {cls} has members defined in {len(where)} files ({', '.join(sorted(where))}): "
                        "one class, one file")

# Cycles between modules: a .hpp and its .cpp are one node, so two sources
# that include each other's headers form a cycle too.
def module(f):
    return os.path.splitext(f)[0].replace("proto/src/", "proto/include/ferry/").replace("util/src/", "util/include/ferry/util/")


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
