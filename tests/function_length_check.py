#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Keeps ferryd, libferry and ferry-run readable a function at a time: at
most MAX_LONG functions of daemon/, client/src/ and interpose/src/ run past
MAX_LINES lines, so that a new long one is split where a reader gains
instead of joining them. Functions are found by Universal Ctags (its end: field); exit 77
(skipped) where it is not installed.
usage: function_length_check.py REPO_ROOT"""
import glob
import os
import shutil
import subprocess
import sys

MAX_LINES = 40
MAX_LONG = 5
DIRS = ["daemon", "client/src", "interpose/src"]


def main():
    root = sys.argv[1]
    ctags = shutil.which("ctags")
    if ctags is None or "Universal Ctags" not in subprocess.run([ctags, "--version"], capture_output=True,
                                                                 text=True).stdout:
        print("function_length_check: skipped: needs Universal Ctags (apt-get install universal-ctags)")
        sys.exit(77)
    files = sorted(f for d in DIRS for ext in ("cpp", "hpp", "h") for f in
                   glob.glob(os.path.join(root, d, "**", "*." + ext), recursive=True))
    out = subprocess.run([ctags, "--fields=+ne", "--c++-kinds=f", "--kinds-c=f", "-o", "-", *files],
                         capture_output=True, text=True, check=True).stdout
    long = []
    for line in out.splitlines():
        cols = line.split("\t")
        fields = dict(c.split(":", 1) for c in cols[3:] if ":" in c)
        if "line" in fields and "end" in fields:
            n = int(fields["end"]) - int(fields["line"]) + 1
            if n > MAX_LINES:
                long.append((n, os.path.relpath(cols[1], root), int(fields["line"]), cols[0]))
    long.sort(reverse=True)
    for n, f, at, name in long:
        print(f"{f}:{at}: {name}: {n} lines")
    if len(long) > MAX_LONG:
        print(f"function_length_check: {len(long)} functions over {MAX_LINES} lines (at most {MAX_LONG}): "
              "split the new one where a reader gains")
        sys.exit(1)
    print(f"function_length_check: ok ({len(long)} functions over {MAX_LINES} lines, at most {MAX_LONG})")


if __name__ == "__main__":
    main()
