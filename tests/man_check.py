#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The manual pages against the programs they describe: every long option a
program's --help gives is in its page, every option the page gives (in its
SYNOPSIS and OPTIONS) is one the program takes, and groff renders each page
without a warning (where man is installed).

    man_check.py SOURCE_DIR BUILD_DIR
"""
import os
import re
import shutil
import subprocess
import sys

src, build = sys.argv[1], sys.argv[2]
# page -> the program whose --help it describes
PROGRAMS = {
    "ferryd.8": "daemon/ferryd",
    "ferryctl.1": "tools/ferryctl",
    "ferry-run.1": "interpose/ferry-run",
}
OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
problems = []


def page_text(page):
    with open(os.path.join(src, "man", page)) as f:
        return f.read()


def page_options(text):
    """Long options a page defines: those in its SYNOPSIS, and the tags of its
    OPTIONS (the line after each .TP), groff escapes undone. Options named in
    prose (another program's, say) are not definitions."""
    found, current, tag = set(), None, False
    for line in text.splitlines():
        m = re.match(r"\.SH\s+\"?([A-Z ]+)\"?", line)
        if m:
            current = m.group(1).strip()
            continue
        if current == "SYNOPSIS" or (current == "OPTIONS" and tag):
            found |= set(OPTION.findall(line.replace("\\-", "-")))
        tag = line.startswith(".TP")
    return found


for page, program in PROGRAMS.items():
    exe = os.path.join(build, program)
    if not os.path.exists(exe):
        problems.append(f"{page}: {program} was not built")
        continue
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30)
    helped = set(OPTION.findall(out.stdout + out.stderr))
    text = page_text(page)
    everywhere = set(OPTION.findall(text.replace("\\-", "-")))
    documented = page_options(text)
    for o in sorted(helped - everywhere):
        problems.append(f"{page}: --{o} is in `{program} --help` but not in the page")
    for o in sorted(documented - helped):
        problems.append(f"{page}: --{o} is in the page's SYNOPSIS or OPTIONS but not in `{program} --help`")

if shutil.which("man"):
    for page in sorted(os.listdir(os.path.join(src, "man"))):
        if not re.search(r"\.[1-8]$", page):
            continue
        r = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", os.path.join(src, "man", page)],
                           capture_output=True, text=True, env=dict(os.environ, MANWIDTH="80"), timeout=60)
        for line in r.stderr.splitlines():
            problems.append(f"{page}: groff: {line}")
else:
    print("man_check: man is not installed: the pages' rendering was not checked")

for p in problems:
    print(p)
print(f"man_check: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
