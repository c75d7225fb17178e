#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs each test of Intel's Level Zero conformance binaries alone, with
ferry's simulated device as the driver under the system loader, each under a
30 s timeout (some of the suite's tests hang once a SPIR-V module failed),
and sorts the outcomes: passed, or failed / timed out / killed by a signal,
with the likely reason (needs SPIR-V, images, or another failure and where).

    RUN=dir-with-binaries-and-spv SIM=path/libze_ferry_sim.so.1 [VALIDATION=1] \
        run_each.py test_driver test_device ...

Writes per-test details as JSON to $OUTJSON (default details.json)."""
import os, re, subprocess, sys, json, collections
from concurrent.futures import ThreadPoolExecutor
RUN = os.environ.get("RUN", "/tmp/lzt/run")
env = dict(os.environ, ZE_ENABLE_ALT_DRIVERS=os.environ.get("SIM", "build/dev/sim/libze_ferry_sim.so.1"))
if os.environ.get("VALIDATION") == "1":
    env.update(ZE_ENABLE_VALIDATION_LAYER="1", ZE_ENABLE_PARAMETER_VALIDATION="1")
suites = sys.argv[1:]
out = {}
def listing(b):
    t = subprocess.run([f"./{b}", "--gtest_list_tests"], cwd=RUN, env=env, capture_output=True, text=True).stdout
    names, group = [], None
    for line in t.splitlines():
        if not line.strip(): continue
        if not line.startswith(" "):
            group = line.split()[0]
        else:
            n = group + line.split()[0]
            if "DISABLED_" not in n: names.append(n)
    return names
def one(b, name):
    try:
        p = subprocess.run([f"./{b}", f"--gtest_filter={name}"], cwd=RUN, env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return name, "timeout", text
    text = p.stdout + p.stderr
    if p.returncode < 0: return name, f"signal {-p.returncode}", text
    if "[  PASSED  ] 1 test" in text: return name, "passed", text
    if "[  SKIPPED ]" in text: return name, "skipped", text
    return name, "failed", text
def why(text):
    if "MODULE_BUILD_FAILURE" in text or ".spv" in text: return "needs SPIR-V"
    if "IMAGE" in text.upper() and ("image" in text.lower()): return "image"
    if "UNSUPPORTED_FEATURE" in text: return "UNSUPPORTED_FEATURE"
    m = re.search(r"(\S+\.cpp:\d+): Failure", text)
    return "other " + (m.group(1) if m else "")
for b in suites:
    names = listing(b)
    with ThreadPoolExecutor(2) as ex:
        res = list(ex.map(lambda n: one(b, n), names))
    c = collections.Counter()
    details = collections.defaultdict(list)
    for name, st, text in res:
        key = st if st in ("passed", "skipped") else f"{st}: {why(text)}"
        c[key] += 1
        if st not in ("passed", "skipped"): details[key].append(name)
    print(b, len(names), dict(c), flush=True)
    out[b] = {k: v for k, v in details.items()}
json.dump(out, open(os.environ.get("OUTJSON", "details.json"), "w"), indent=1)
