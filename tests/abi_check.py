# SPDX-License-Identifier: MIT
"""libferry's C ABI as the other side sees it.

1. Python's ctypes declarations (python/ferry/_lib.py) against ferry/ferry.h:
   a C program compiled against the header prints every struct's size and
   every field's offset and size; each ctypes Structure must agree, field by
   field, and every C function _lib.py declares must be declared in the header.
2. The symbol map (client/libferry.map) names every exported function in a
   version node, no wildcard, and the library exports exactly those.

usage: abi_check.py SOURCE_DIR LIBFERRY_SO GENERATED_INCLUDE_DIR [CC]
"""

import ctypes
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

src, lib = sys.argv[1], sys.argv[2]
generated = sys.argv[3]  # ferry/version.h
cc = sys.argv[4] if len(sys.argv) > 4 else "cc"
# _lib.py alone, not the package (which loads libferry: a sanitizer build's
# library cannot be loaded into an uninstrumented python).
_spec = importlib.util.spec_from_file_location("ferry_lib", os.path.join(src, "python", "ferry", "_lib.py"))
_lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_lib)

header = os.path.join(src, "client", "include", "ferry", "ferry.h")
text = open(header).read()
problems = []

# ctypes class -> C struct
structs = {
    "Token": "ferry_token",
    "IpcHandle": "ferry_ipc_handle",
    "CTimeline": "ferry_timeline",
    "CReservation": "ferry_reservation",
    "CIovec": "ferry_iovec",
    "CUploadOpts": "ferry_upload_opts",
    "CFence": "ferry_fence",
    "CInfo": "ferry_info",
    "CDirectOps": "ferry_direct_ops",
    "CStagingHooks": "ferry_staging_hooks",
    "CRunCounts": "ferry_run_counts",
}
# Handle types: a struct of one 64-bit id in C (so that handles and integers
# do not convert into each other), passed as ctypes' integer of that size,
# which the C calling conventions of x86-64 and AArch64 pass the same way.
handles = {"ferry_buffer": "c_buffer"}
declared = set(re.findall(r"typedef struct (ferry_\w+) \{", text))
for c_name in declared - set(structs.values()) - set(handles):
    problems.append(f"{c_name}: a struct of ferry.h that _lib.py does not declare")

lines = ['#include <stddef.h>', '#include <stdio.h>', '#include <ferry/ferry.h>', "int main(void) {"]
for py, c in structs.items():
    lines.append(f'  printf("{c} - 0 %zu\\n", sizeof({c}));')
    for field, _ in getattr(_lib, py)._fields_:
        lines.append(f'  printf("{c} {field} %zu %zu\\n", offsetof({c}, {field}), sizeof((({c} *)0)->{field}));')
for c in handles:
    lines.append(f'  printf("{c} - 0 %zu\\n", sizeof({c}));')
    lines.append(f'  printf("{c} id %zu %zu\\n", offsetof({c}, id), sizeof((({c} *)0)->id));')
lines += ["  return 0;", "}"]
with tempfile.TemporaryDirectory() as d:
    prog = os.path.join(d, "layout")
    c_file = prog + ".c"
    open(c_file, "w").write("\n".join(lines) + "\n")
    r = subprocess.run([cc, "-std=c11", "-I", os.path.join(src, "client", "include"), "-I", generated, c_file, "-o", prog],
                       capture_output=True, text=True)
    if r.returncode != 0:
        # A field that _lib.py names and the header does not fails here.
        print(r.stderr)
        sys.exit("abi_check: the layout program does not compile against ferry.h (see above)")
    c_layout = {}
    for line in subprocess.run([prog], capture_output=True, text=True, check=True).stdout.splitlines():
        name, field, a, b = line.split()
        c_layout[(name, field)] = (int(a), int(b))
for py, c in structs.items():
    cls = getattr(_lib, py)
    if ctypes.sizeof(cls) != c_layout[(c, "-")][1]:
        problems.append(f"{py}: {ctypes.sizeof(cls)} bytes, {c} {c_layout[(c, '-')][1]}")
    for field, _ in cls._fields_:
        got = (getattr(cls, field).offset, getattr(cls, field).size)
        if got != c_layout[(c, field)]:
            problems.append(f"{py}.{field}: offset, size {got}; {c}.{field} {c_layout[(c, field)]}")

for c, py in handles.items():
    n = ctypes.sizeof(getattr(_lib, py))
    if c_layout[(c, "-")][1] != n or c_layout[(c, "id")] != (0, n):
        problems.append(f"{py}: {n} bytes; {c} is {c_layout[(c, '-')][1]}, its id at {c_layout[(c, 'id')]}")
    if len(re.findall(r"typedef struct " + c + r" \{([^}]*)\}", text)[0].strip().splitlines()) != 1:
        problems.append(f"{c}: more than its one id field: _lib.py passes it as an integer")

functions = set(re.findall(r"\b(ferry_\w+)\s*\(", text))
table = re.findall(r'"(ferry_\w+)":', open(os.path.join(src, "python", "ferry", "_lib.py")).read())
for f in table:
    if f not in functions:
        problems.append(f"_lib.py declares {f}, which ferry.h does not")

# 2. The symbol map and the exports.
mapping = open(os.path.join(src, "client", "libferry.map")).read()
body = re.sub(r"/\*.*?\*/", "", mapping, flags=re.S)
nodes = re.findall(r"(FERRY_[\w.]+)\s*\{(.*?)\}\s*[\w.]*\s*;", body, flags=re.S)
if not nodes:
    problems.append("libferry.map: no version node")
listed = set()
for node, content in nodes:
    glob = content.split("local:")[0]
    for name in re.findall(r"[\w*]+(?=\s*;)", glob.replace("global:", "")):
        if "*" in name:
            problems.append(f"libferry.map: {node} exports by wildcard ({name}): name each function")
        elif name in listed:
            problems.append(f"libferry.map: {name} in two version nodes")
        listed.add(name)
nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
exported = {ln.split()[-1].split("@")[0] for ln in nm.splitlines() if " T " in ln}
for s in sorted(exported - listed):
    problems.append(f"{s}: exported but in no version node")
for s in sorted(listed - exported):
    problems.append(f"{s}: in the map but not exported")
ours = {f for f in functions if f.startswith("ferry_")}
for s in sorted(exported - ours):
    problems.append(f"{s}: exported but not declared in ferry.h")

for p in problems:
    print("abi_check:", p)
if problems:
    sys.exit(1)
print(f"abi_check: {len(structs)} structs agree with ferry.h; {len(exported)} exports, each in one version node")
