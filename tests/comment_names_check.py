#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that comments name no symbol the code no longer has.

A comment that names `Engine::hold`, `tuning()` or `UploadFenced` sends its
reader looking for it; once the code is renamed or removed, the comment
misleads. This reads every comment of the C and C++ sources (// and /* */)
and the Python sources (#), takes what in it reads as a symbol:
  - a qualified name, A::b (each part),
  - a name called with no arguments, name(),
  - a CamelCase word of two or more capitalised parts (UploadFenced),
and fails on each that appears nowhere in the project's code: outside the
comments of its C, C++, Python, shell, CMake and systemd files, string
literals included (a name printed in a message is still the code's word).
Names of other projects that a comment cites go in EXTERNAL with whose they
are.
usage: comment_names_check.py REPO_ROOT"""
import os
import re
import sys

# Names from elsewhere that comments cite for the reader.
EXTERNAL = {
    "ExternalStream": "torch.cuda.ExternalStream (PyTorch)",
}

DIRS = ["proto", "util", "daemon", "client", "interpose", "tools", "tests", "bench", "examples", "sim", "python",
        "systemd", "debian", "scripts", "cmake", ".ci"]
C_EXT = (".c", ".h", ".cpp", ".hpp")
OTHER_CODE = (".py", ".sh", ".cmake", ".in", ".service", ".socket", ".timer", ".txt", ".map")

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
QUALIFIED = re.compile(r"\b([A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)+)")
CALLED = re.compile(r"(?<![\w.$/-])([A-Za-z_]\w*)\(\)")
# CamelCase not part of a path, an address or a file name.
CAMEL = re.compile(r"(?<![\w.$/-])([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)(?![\w/.-]*\.\w)")


def split_c(text):
    """(code with the comments removed, [(line, comment text)])."""
    code, comments = [], []
    i, n, line = 0, len(text), 1
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.append((line, text[i + 2 : j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            comments.append((line, text[i + 2 : j]))
            line += text.count("\n", i, j)
            i = j + 2
        elif text[i] in "\"'":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            code.append(text[i : j + 1])
            i = j + 1
        else:
            if text[i] == "\n":
                line += 1
            code.append(text[i])
            i += 1
    return "".join(code), comments


def split_hash(text):
    """The same for a file whose comments start with # (Python)."""
    code, comments = [], []
    for number, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*#(?!!)(.*)", line)
        if m:
            comments.append((number, m.group(1)))
        else:
            code.append(line)
    return "\n".join(code), comments


def sources(root):
    for top in DIRS:
        for d, subdirs, names in os.walk(os.path.join(root, top)):
            subdirs[:] = [s for s in subdirs if not s.startswith((".", "build", "__pycache__"))]
            for name in sorted(names):
                yield os.path.relpath(os.path.join(d, name), root)


def main():
    root = sys.argv[1]
    known, comments = set(), []
    for f in sources(root):
        if not f.endswith(C_EXT + OTHER_CODE) and "CMakeLists" not in f and not f.startswith("debian/"):
            continue
        try:
            text = open(os.path.join(root, f), encoding="utf-8").read()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        if f.endswith(C_EXT):
            code, found = split_c(text)
            comments += [(f, n, c) for n, c in found]
        elif f.endswith(".py"):
            code, found = split_hash(text)
            comments += [(f, n, c) for n, c in found]
        else:
            code = text  # scripts, units, CMake: their names count, their comments are not checked
        known.update(IDENT.findall(code))
    stale = []
    for f, n, text in comments:
        names = set(CALLED.findall(text)) | set(CAMEL.findall(text))
        for m in QUALIFIED.finditer(text):
            names.update(part.lstrip("~") for part in m.group(1).split("::") if part)
        stale += [(f, n, name) for name in sorted(names) if name not in known and name not in EXTERNAL]
    for f, n, name in stale:
        print(f"{f}:{n}: the comment names {name}, which the code does not have (renamed or removed?)")
    if stale:
        sys.exit(1)
    print(f"comment_names_check: ok ({len(comments)} comments, every symbol they name is in the code)")


if __name__ == "__main__":
    main()
