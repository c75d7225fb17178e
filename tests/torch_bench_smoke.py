#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/torch_loader_bench.py runs, on a machine without a GPU: against a
ferryd on the simulated device, with --device cpu and small batches, every
loader (torch, ferry, alone, gen, host) over every CPU workload, and every
batch torch and ferry delivered checks out. A smoke test of the script (a
benchmark that no longer runs is found here, not on the GPU machine), not a
measurement. Skipped without torch and numpy.

Run by ctest (torch_bench_smoke) with FERRYD and FERRY_LIBRARY set."""
import os
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BENCH = os.path.join(ROOT, "bench", "torch_loader_bench.py")

try:
    import numpy  # noqa: F401
    import torch  # noqa: F401

    HAVE = True
except ImportError:
    HAVE = False


@unittest.skipUnless(HAVE, "skipped: torch or numpy is not installed")
class TorchBenchSmoke(unittest.TestCase):
    def test_every_loader_every_cpu_workload(self):
        with tempfile.TemporaryDirectory() as d:
            sock = os.path.join(d, "ferryd.sock")
            daemon = subprocess.Popen([os.environ["FERRYD"], "--sim", "--socket", sock, "--log-level", "warn"])
            try:
                for _ in range(500):
                    if os.path.exists(sock):
                        break
                    time.sleep(0.01)
                # pcg64 is pcg16's code, larger; images are full size (seconds a batch on a CPU).
                works = ["pcg16", "small", "bytes16"]
                out = subprocess.run(
                    [sys.executable, BENCH, "--socket", sock, "--ferryd-pid", str(daemon.pid), "--device", "cpu",
                     "--size-div", "512", "--batches", "4", "--warm", "2", "--workers", "1,8", "--reps", "1",
                     "--work", ",".join(works), "--account", "--ferryctl", os.environ["FERRYCTL"]],
                    capture_output=True, text=True, timeout=400)
                self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            finally:
                daemon.terminate()
                daemon.wait()
        main, _, acc = out.stdout.partition("Where ferry's batches waited")
        self.assertTrue(acc, out.stdout)
        header = [ln for ln in main.splitlines() if ln.startswith("| workload")]
        self.assertEqual(len(header), 1, out.stdout)
        cols = [c.strip() for c in header[0].strip("|").split("|")]
        for k in ("torch", "ferry", "alone", "gen", "host"):
            self.assertIn(f"{k} batches/s", cols)
        for k in ("torch", "alone", "gen", "host"):
            self.assertIn(f"ferry ÷ {k}", cols)
        rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in main.splitlines()
                if ln.startswith("| ") and not ln.startswith("| workload")]
        # The account: one row per ferry run, each phase a number; the worker's
        # samples and staging took time, and every batch's copy landed by the
        # time ferry's CPU path read it back (device cpu waits for the fence).
        aheader = [ln for ln in acc.splitlines() if ln.startswith("| workload")]
        self.assertEqual(len(aheader), 1, acc)
        acols = [c.strip() for c in aheader[0].strip("|").split("|")]
        arows = [[c.strip() for c in ln.strip("|").split("|")] for ln in acc.splitlines()
                 if ln.startswith("| ") and not ln.startswith("| workload")]
        self.assertEqual(len(arows), len(works) * 2, acc)
        for r in arows:
            v = {c: float(x) for c, x in zip(acols[2:], r[2:])}
            self.assertGreater(v["sample"] + v["stage"], 0, r)
            self.assertTrue(0 <= v["idle%"] <= 100 and 0 <= v["landed%"] <= 100, r)
            self.assertGreaterEqual(min(v.values()), 0, r)
        seen = {(r[0], r[1]) for r in rows}
        for w in works:
            for n in ("1", "8"):
                self.assertIn((w, n), seen, out.stdout)
        for r in rows:
            self.assertEqual(r[cols.index("wrong")], "0", r)
            for k in ("torch", "ferry", "gen", "host"):
                self.assertGreater(float(r[cols.index(f"{k} batches/s")].split()[0]), 0, r)


if __name__ == "__main__":
    unittest.main()
