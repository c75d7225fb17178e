#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Soak: waves of the clients a shared machine sees, against one long-lived
ferryd, and after each wave what ferryd keeps.

Each wave runs, at once: ferry.torch jobs one after another (a new
DataLoader each, some batches read and checked, the loader dropped: a
sweep's short jobs), a program under ferry-run (an unmodified Level Zero
program on the simulated device, a PyTorch one on CUDA), C clients that
upload, verify and disconnect (examples/multi_upload), and a client killed
mid-upload. One wave (--restart-wave) restarts ferryd while its clients
run, as an upgrade does. Throughout, a steady client of this process
uploads 1 KiB and waits, over and over (reconnecting after the restart).

After each wave, once its clients are gone: ferryd's RSS, descriptors and
threads; the device memory its clients hold; every per-user count; status's
"kept" counts; the number of metric series (ferryctl metrics); the steady
client's 1 KiB upload-and-wait p50/p99 during the wave; wrong bytes and
refusals. A table on stdout, everything in --out (JSON).

  python3 bench/soak.py --build build --waves 6                 # CI form, simulated device
  python3 bench/soak.py --build .device --backend cuda --waves 12 \\
      --torch-jobs 8 --workers 16 --batch-mib 64 --batches 12     # GPU form

--check (the CI form's test) fails unless: no wrong byte and no refusal;
after every wave the per-user counts, "kept" and the series count equal
those after the first wave of the same ferryd; descriptors and threads too;
RSS grew less than --rss-slack-mib from the second wave to the last; the
restarted ferryd stages the ferry-run program and serves the loaders again.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- child modes
def torch_jobs(socket, device, jobs, workers, mib, batches):
    """`jobs` ferry.torch jobs one after another; prints one JSON line."""
    sys.path.insert(0, os.environ.get("SOAK_PYTHON", os.path.join(HERE, "..", "python")))
    import torch
    from torch.utils.data import Dataset

    import ferry
    import ferry.torch as ft

    n = mib * (1 << 20) // 4 // 8  # float32 elements a sample, 8 samples a batch

    class Samples(Dataset):
        def __len__(self):
            return 8 * batches

        def __getitem__(self, i):
            return torch.full((n,), float(i), dtype=torch.float32), i

    wrong = refused = delivered = 0
    for _ in range(jobs):
        try:
            loader = ft.DataLoader(Samples(), batch_size=8, num_workers=workers, device=device, socket=socket)
            if device == "cpu":
                loader._ferry_views = True  # the CUDA path's slots and lifetimes, on the simulated device
            for x, idx in loader:
                delivered += 1
                # The batch's first and last elements of each sample are its index.
                want = idx.to(x.device, dtype=torch.float32)
                wrong += int(not (torch.equal(x[:, 0], want) and torch.equal(x[:, -1], want)))
                del x, idx, want
            del loader
        except (ferry.Error, RuntimeError) as e:
            if "refused" in str(e) or "EDQUOT" in str(e) or "allowance" in str(e):
                refused += 1
            else:
                raise
    print(json.dumps({"wrong": wrong, "refused": refused, "batches": delivered}), flush=True)


def killme(socket):
    """Connects, uploads in a loop, says ready: killed by the soak."""
    sys.path.insert(0, os.environ.get("SOAK_PYTHON", os.path.join(HERE, "..", "python")))
    import ferry

    c = ferry.Client(socket, name="soak killed")
    b = c.alloc(1 << 20)
    data = bytes(1 << 20)
    print("ready", flush=True)
    while True:
        b.upload(data)


# Across a restart: uploads again and again until the stop file exists, each
# line "at_ms=T staged|driver": staged when the call returned before the
# 20 ms kernel queued ahead of it finished (ferry staged it; the driver's
# pageable copy waits for the stream), and checks every byte it received.
CUDA_PROBE = r"""
import os, sys, time, torch
stop = sys.argv[1]
x = torch.empty(4 << 20, dtype=torch.float32)
torch.cuda._sleep(1000)
torch.cuda.synchronize()
t = time.perf_counter(); torch.cuda._sleep(10**7); torch.cuda.synchronize()
cycles = int(10**7 * 0.020 / (time.perf_counter() - t))  # a 20 ms kernel
wrong, i = 0, 0
while not os.path.exists(stop):
    i += 1
    x.fill_(float(i))
    torch.cuda._sleep(cycles)
    t0 = time.perf_counter()
    y = x.to("cuda", non_blocking=True)
    call_ms = (time.perf_counter() - t0) * 1e3
    x.fill_(-1.0)
    ok = y.min().item() == float(i) and y.max().item() == float(i)
    wrong += not ok
    print(f"at_ms={time.monotonic() * 1e3:.1f} {'staged' if call_ms < 10 else 'driver'} {'ok' if ok else 'WRONG'}",
          flush=True)
sys.exit(1 if wrong else 0)
"""

CUDA_PROGRAM = r"""
import torch, sys
x = torch.empty(4 << 20, dtype=torch.float32)  # 16 MiB, pageable
wrong = 0
for i in range(24):
    x.fill_(float(i))
    y = x.to("cuda", non_blocking=True)
    x.fill_(-1.0)                               # the hazard: the source changes at once
    wrong += int(y.min().item() != float(i) or y.max().item() != float(i))
print("wrong", wrong)
sys.exit(1 if wrong else 0)
"""


# ---------------------------------------------------------------- the daemon
class Ferryd:
    def __init__(self, build, backend, socket, log, extra=()):
        self.build, self.backend, self.socket, self.log, self.extra = build, backend, socket, log, list(extra)
        self.proc = None

    def start(self):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        args = [os.path.join(self.build, "daemon", "ferryd"), "--socket", self.socket, "--log-level", "warn"]
        args += ["--sim"] if self.backend == "sim" else ["--backend", self.backend]
        args += self.extra
        self.proc = subprocess.Popen(args, stderr=self.log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.status(quiet=True) is not None:
                return
            if self.proc.poll() is not None:
                raise SystemExit("soak: ferryd exited at start")
            time.sleep(0.02)
        raise SystemExit("soak: ferryd did not start")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)

    def ctl(self, *args):
        return subprocess.run([os.path.join(self.build, "tools", "ferryctl"), "--socket", self.socket, *args],
                              capture_output=True, text=True, timeout=60)

    def status(self, quiet=False):
        r = self.ctl("--json", "status")
        if r.returncode != 0:
            if quiet:
                return None
            raise SystemExit(f"soak: ferryctl status: {r.stderr}")
        return json.loads(r.stdout)

    def proc_counts(self):
        pid = self.proc.pid
        with open(f"/proc/{pid}/status") as f:
            st = f.read()
        rss = int(re.search(r"VmRSS:\s+(\d+)", st).group(1))
        threads = int(re.search(r"Threads:\s+(\d+)", st).group(1))
        return {"pid": pid, "rss_kib": rss, "threads": threads, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


# ---------------------------------------------------------------- the steady client
class Steady(threading.Thread):
    """Uploads 1 KiB and waits, over and over; checks every 64th by reading
    it back; connects again when its ferryd went."""

    def __init__(self, socket):
        super().__init__(daemon=True)
        import ferry

        self.ferry, self.socket = ferry, socket
        self.lock = threading.Lock()
        self.lat_us = []
        self.wrong = self.reconnects = 0
        self.stop = False
        self.paused = threading.Event()  # set: no upload in flight (while a wave's end is sampled)
        self.idle = threading.Event()
        self.c = self.buf = None

    def _connect(self):
        self.c = self.ferry.Client(self.socket, name="soak steady")
        self.buf = self.c.alloc(1024)

    def run(self):
        i = 0
        while not self.stop:
            if self.paused.is_set():
                self.idle.set()
                time.sleep(0.005)
                continue
            self.idle.clear()
            try:
                if self.c is None:
                    self._connect()
                payload = bytes([(i * 7 + j) & 0xFF for j in range(8)]) * 128
                t0 = time.perf_counter()
                self.c.wait(self.buf.upload(payload))
                dt = (time.perf_counter() - t0) * 1e6
                if i % 64 == 0 and bytes(self.buf.download()) != payload:
                    with self.lock:
                        self.wrong += 1
                with self.lock:
                    self.lat_us.append(dt)
                i += 1
                time.sleep(0.002)
            except self.ferry.Error:
                old, self.c = self.c, None
                if old is not None:
                    try:
                        old.close()
                    except self.ferry.Error:
                        pass
                with self.lock:
                    self.reconnects += 1
                time.sleep(0.1)

    def take(self):
        with self.lock:
            lat, self.lat_us = self.lat_us, []
        if not lat:
            return None, None
        lat.sort()
        return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]


# ---------------------------------------------------------------- one wave
def wave(a, d, n, restart):
    env = dict(os.environ, FERRY_SOCKET=d.socket, PYTHONUNBUFFERED="1", SOAK_PYTHON=os.path.abspath(a.python))
    procs = {}
    device = "cuda" if a.backend == "cuda" else "cpu"
    if a.torch_jobs > 0:
        procs["torch"] = subprocess.Popen(
            [sys.executable, __file__, "--child-torch", d.socket, device, str(a.torch_jobs), str(a.workers),
             str(a.batch_mib), str(a.batches)], stdout=subprocess.PIPE, text=True, env=env)
    report = os.path.join(a.tmp, f"run-{n}.jsonl")
    run = [os.path.join(a.build, "interpose", "ferry-run"), "--socket", d.socket, "--report", report, "--"]
    if a.backend == "cuda":
        run += [sys.executable, "-c", CUDA_PROGRAM]
    else:
        run += [os.path.join(a.build, "tests", "ze_upload"), "--mode", "hazard", "65536", "4194304", "16777216"]
    procs["ferry-run"] = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    procs["c"] = subprocess.Popen([os.path.join(a.build, "examples", "multi_upload"), "-s", d.socket, "-p", "4", "-n",
                                   "40", "-b", "262144"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim = subprocess.Popen([sys.executable, __file__, "--child-killme", d.socket], stdout=subprocess.PIPE, text=True,
                              env=env)
    victim.stdout.readline()  # "ready": connected and uploading
    victim.kill()
    victim.wait()
    restarted_at = None
    result = {"wave": n, "restart": restart, "wrong": 0, "refused": 0, "failed": []}
    if restart:
        result.update(restart_under_a_program(a, d, env))
    out = {k: (p.communicate(timeout=1200)[0], p.returncode) for k, p in procs.items()}
    if "torch" in out:
        text, rc = out["torch"]
        last = [line for line in text.splitlines() if line.startswith("{")]
        if rc != 0 or not last:
            result["failed"].append(f"torch jobs: exit {rc}")
        else:
            t = json.loads(last[-1])
            result["wrong"] += t["wrong"]
            result["refused"] += t["refused"]
            result["torch_batches"] = t["batches"]
    text, rc = out["ferry-run"]
    if a.backend == "cuda":
        result["wrong"] += sum(int(m) for m in re.findall(r"^wrong (\d+)", text, re.M))
    else:
        result["wrong"] += len(re.findall(r" mixed ", text))
        # Under ferry-run a held upload receives the original bytes; the driver's, overwritten ones.
        if not restart:
            result["wrong"] += len(re.findall(r" overwritten ", text))
    if rc != 0:
        result["failed"].append(f"ferry-run program: exit {rc}")
    try:
        with open(report) as f:
            r = [json.loads(line) for line in f if line.strip()]
        result["staged"] = sum(x["staged"] for x in r)
    except OSError:
        result["staged"] = 0
    text, rc = out["c"]
    if rc != 0 and not restart:  # C clients do not outlive their ferryd: a restart ends them
        result["failed"].append(f"multi_upload: exit {rc}: {text[-200:]}")
    return result, restarted_at


def restart_under_a_program(a, d, env):
    """Restarts ferryd under a program run by ferry-run that uploads all the
    while: how long after the new ferryd listened its copies were staged
    again, and whether any byte it received was wrong."""
    stop = os.path.join(a.tmp, "stop")
    run = [os.path.join(a.build, "interpose", "ferry-run"), "--socket", d.socket, "--"]
    if a.backend == "cuda":
        run += [sys.executable, "-c", CUDA_PROBE, stop]
        staged, wrong = re.compile(r"at_ms=([\d.]+) staged"), re.compile(r" WRONG$", re.M)
    else:
        run += [os.path.join(a.build, "tests", "ze_upload"), "--mode", "hazard", "--until-file", stop, "--every", "5",
                "4194304"]
        staged, wrong = re.compile(r" original at_ms=([\d.]+)"), re.compile(r" mixed ")
    lines, out = [], {}
    p = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")), daemon=True)
    reader.start()

    def until(pred, limit):
        deadline = time.monotonic() + limit
        while not pred() and time.monotonic() < deadline:
            time.sleep(0.01)
        return pred()

    if not until(lambda: any(staged.search(line) for line in lines), 120):
        out["failed_probe"] = "the program was never staged before the restart"
    d.stop()
    d.start()
    listening = time.monotonic() * 1e3
    def again():
        return [float(m.group(1)) for line in list(lines) if (m := staged.search(line)) and float(m.group(1)) > listening]
    until(lambda: again(), 30)
    open(stop, "w").close()
    p.wait(120)
    reader.join(10)
    os.unlink(stop)
    after = again()
    out["restaged_after_s"] = round((after[0] - listening) / 1e3, 2) if after else None
    out["probe_wrong"] = len(wrong.findall("".join(lines)))
    out["probe_rc"] = p.returncode
    return out


def settle(d, steady_uid):
    """Until only the steady client is left (its workers, killed ones and
    departed states gone): the status document then."""
    deadline = time.monotonic() + 60
    while True:
        st = d.status()
        names = [c["name"] for c in st["clients"]]
        kept = st.get("kept", {})
        # The segment pool at rest too: refilled, nothing left to unmap (its
        # thread does both in its own time after a wave's clients went).
        pool_at_rest = kept.get("segments_ready") == kept.get("segments_target") and \
            not kept.get("segments_to_unmap") and not kept.get("segment_orders")
        if names == ["soak steady"] and st["held"]["clients"] == 1 and not kept.get("departed_clients") and \
                not kept.get("copies_in_flight") and pool_at_rest:
            return st
        if time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def sample(a, d, st, steady, before=None):
    # Before ferryctl's own connection below, which ferryd closes in its own
    # time; and once the descriptors settled (a session that ended, a memfd
    # the segment pool is making): what the last wave of this ferryd left,
    # within 10 s, else what stays.
    counts, last, same = d.proc_counts(), None, 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if before is not None and before["pid"] == counts["pid"] and counts["fds"] == before["fds"]:
            break
        same = same + 1 if last is not None and counts["fds"] == last["fds"] else 0
        if before is None and same >= 5:
            break
        time.sleep(0.05)
        last, counts = counts, d.proc_counts()
    m = d.ctl("metrics")
    series = [line for line in m.stdout.splitlines() if line and not line.startswith("#")]
    users = {str(u["uid"]): {k: v for k, v in u.items() if k not in ("uid", "connections")} for u in st["users"]}
    p50, p99 = steady.take()
    return dict(counts, device_bytes=st["held"]["device_bytes"], users=users, kept=st.get("kept", {}),
                series=len(series), p50_us=p50, p99_us=p99)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default="build", help="a build tree or a pack (daemon/, tools/, interpose/, tests/, examples/)")
    ap.add_argument("--backend", default="sim", help="sim (the simulated device), or cuda")
    ap.add_argument("--waves", type=int, default=6)
    ap.add_argument("--torch-jobs", type=int, default=2, help="ferry.torch jobs per wave (0: none; needs torch)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-mib", type=int, default=1)
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--restart-wave", type=int, default=None, help="the wave that restarts ferryd (default: the middle one; 0: none)")
    ap.add_argument("--rss-slack-mib", type=float, default=4.0)
    ap.add_argument("--ferryd-args", default="", help="more ferryd options, one string (e.g. \"--user-memory 8G\")")
    ap.add_argument("--python", default=os.path.join(HERE, "..", "python"),
                    help="the ferry Python package the jobs use (another build's, for a before/after)")
    ap.add_argument("--out", default=None, help="JSON of every wave")
    ap.add_argument("--check", action="store_true", help="fail unless the CI form's conditions hold (see above)")
    ap.add_argument("--child-torch", nargs=6, help=argparse.SUPPRESS)
    ap.add_argument("--child-killme", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_torch:
        s, dev, j, w, m, b = a.child_torch
        return torch_jobs(s, dev, int(j), int(w), int(m), int(b))
    if a.child_killme:
        return killme(a.child_killme)
    a.build = os.path.abspath(a.build)
    sys.path.insert(0, os.path.abspath(a.python))  # the steady client's ferry: the jobs' one
    if a.restart_wave is None:
        a.restart_wave = (a.waves + 1) // 2 + 1 if a.waves >= 3 else 0
    if a.torch_jobs > 0:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("soak: no torch: no ferry.torch jobs", file=sys.stderr)
            a.torch_jobs = 0
    with tempfile.TemporaryDirectory() as tmp:
        a.tmp = tmp
        log = open(os.path.join(tmp, "ferryd.log"), "w")
        d = Ferryd(a.build, a.backend, os.path.join(tmp, "ferryd.sock"), log, a.ferryd_args.split())
        d.start()
        steady = Steady(d.socket)
        steady.start()
        rows, problems = [], []
        for n in range(1, a.waves + 1):
            t0 = time.monotonic()
            r, restarted_at = wave(a, d, n, n == a.restart_wave)
            steady.paused.set()
            steady.idle.wait(30)
            st = settle(d, os.getuid())
            r.update(sample(a, d, st, steady, rows[-1] if rows and not rows[-1]["restart"] else None))
            steady.paused.clear()
            r["seconds"] = round(time.monotonic() - t0, 1)
            rows.append(r)
            print(f"wave {n:3}: rss {r['rss_kib']} KiB, fds {r['fds']}, threads {r['threads']}, series {r['series']}, "
                  f"1 KiB p50/p99 {r['p50_us'] or 0:.0f}/{r['p99_us'] or 0:.0f} us, wrong {r['wrong']}, "
                  f"refused {r['refused']}, staged {r['staged']}, torch batches {r.get('torch_batches', 0)}"
                  f"{', RESTART: staged again after %s s' % r.get('restaged_after_s') if r['restart'] else ''}"
                  f"{', FAILED: ' + '; '.join(r['failed']) if r['failed'] else ''} ({r['seconds']} s)", flush=True)
        steady.stop = True
        steady.join(5)
        d.stop()
        log.close()
        with open(os.path.join(tmp, "ferryd.log")) as f:
            ferryd_log = f.read()
    summary = {"args": {k: v for k, v in vars(a).items() if not k.startswith("child") and k != "tmp"},
               "waves": rows, "steady_wrong": steady.wrong, "steady_reconnects": steady.reconnects}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
    print_table(rows)
    if a.check:
        problems = check(a, rows, steady)
        for p in problems:
            print("soak: FAIL:", p)
        if problems:
            print(ferryd_log[-3000:])
            return 1
        print("soak: every check passed")
    return 0


def print_table(rows):
    print()
    print("| wave | ferryd RSS KiB | fds | threads | series | device bytes | 1 KiB p50 µs | p99 µs | staged | wrong | refused |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['wave']}{' (restart)' if r['restart'] else ''} | {r['rss_kib']} | {r['fds']} | {r['threads']} | "
              f"{r['series']} | {r['device_bytes']} | {r['p50_us'] or 0:.0f} | {r['p99_us'] or 0:.0f} | {r['staged']} | "
              f"{r['wrong']} | {r['refused']} |")


def check(a, rows, steady):
    problems = []
    if steady.wrong:
        problems.append(f"the steady client read back wrong bytes {steady.wrong} times")
    for r in rows:
        if r["wrong"] or r["refused"] or r["failed"]:
            problems.append(f"wave {r['wave']}: wrong {r['wrong']}, refused {r['refused']}, failed {r['failed']}")
        if r["restart"]:
            if r.get("restaged_after_s") is None or r["restaged_after_s"] > 5:
                problems.append(f"wave {r['wave']}: a program under ferry-run staged again "
                                f"{r.get('restaged_after_s')} s after the new ferryd listened (at most 5)")
            if r.get("probe_wrong") or r.get("probe_rc") or r.get("failed_probe"):
                problems.append(f"wave {r['wave']}: the program across the restart: wrong {r.get('probe_wrong')}, "
                                f"exit {r.get('probe_rc')} {r.get('failed_probe', '')}")
    # Per ferryd instance: everything as after its first wave.
    by_pid = {}
    for r in rows:
        by_pid.setdefault(r["pid"], []).append(r)
    for pid, rs in by_pid.items():
        if rs[0]["restart"]:  # started mid-wave: its first whole wave is the next
            rs = rs[1:]
        if not rs:
            continue
        first = rs[0]
        for r in rs[1:]:
            for key in ("fds", "threads", "series", "device_bytes", "users", "kept"):
                # The last exits under ferry-run are kept a while on purpose (at most 16).
                if key == "kept":
                    r[key].pop("run_exited", None), first[key].pop("run_exited", None)
                if r[key] != first[key]:
                    problems.append(f"wave {r['wave']}: {key} {r[key]} after wave {first['wave']}'s {first[key]}")
        base = rs[1] if len(rs) > 2 else rs[0]
        grown = (rs[-1]["rss_kib"] - base["rss_kib"]) / 1024
        if grown > a.rss_slack_mib:
            problems.append(f"ferryd {pid}: RSS grew {grown:.1f} MiB from wave {base['wave']} to {rs[-1]['wave']}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
