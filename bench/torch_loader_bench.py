#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ferry.torch.DataLoader against PyTorch's own loading path, on a GPU.

    torch: torch.utils.data.DataLoader(..., pin_memory=True) + .to(device, non_blocking=True)
    ferry: ferry.torch.DataLoader(..., device=device, socket=S)
    alone: the same workers making the same batches (torch's collate), thrown
           away in the trainer (no pinning, no upload)
    gen:   the same workers making the samples, with a collate_fn that drops
           them: the samples' own rate, what bounds every loader
    host:  the same workers writing their samples into a batch buffer of
           their own (one host-memory copy of every byte, no upload): the
           host-memory bound of a loader that stages every byte once

Same dataset, sampler and collate in all, side by side in one run,
alternating. The trainer's "step" reads every batch on the device and counts
what is wrong (a checksum against what the batch must hold), optionally then
spins the GPU for --step-ms; the clock runs from the first batch after the
warm-up until the last step finished on the device. Host CPU per batch
counts the trainer (its pin thread included), the workers and ferryd. Each
row gives ferry's share of torch, gen and host.

Workloads (--work): bytes16 / bytes64 (one uint8 batch of 16 / 64 MiB per
item, batch_size=None, every byte its index: samples that cost nothing),
pcg16 / pcg64 (the same sizes, each drawn by numpy's PCG64 from its index,
with its checksum: samples that cost real work), small (batches of 256
samples of 64 KiB, each drawn the same way, torch's default collate),
images (256 decoded 3x224x224 uint8 images and int64 labels per batch, a
numpy decode cost per image), step16 (bytes16 with a 2 ms GPU step per
batch).

    python3 bench/torch_loader_bench.py --socket /tmp/ferry.sock --ferryd-pid PID \\
        --work pcg16,pcg64,small,bytes16 --workers 1,8,16,32 --reps 3

--account (with --ferryctl) prints, after the table, where ferry's batches
waited: per run, each batch's time in its worker (the samples, the collate's
layout, staging: the copy into staging memory and its waits for room), the
workers' idle time between their tasks, the way to the trainer (its result
queue) and torch's reordering, the trainer blocked and its own time per
batch, ferryd's holds (a batch's upload waiting for its buffer's release),
the copies, the staging waits as clients report them, and the share of
batches whose copy had landed when the trainer delivered them.

--device cpu runs the same on a machine without a GPU (ferryd on the
simulated device, torch's loader without pinning): a check that the script
works, not a measurement; --size-div and --batches make it small.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import ferry.torch  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


class Bytes(Dataset):
    """Item i: one batch of `mib` MiB, every byte i % 251."""

    def __init__(self, n, mib):
        self.n, self.bytes = n, mib << 20

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((self.bytes,), i % 251, dtype=torch.uint8)

    def expected(self, k, batch_size):
        return (k % 251) * self.bytes


class Drawn(Dataset):
    """Item i: `per` samples of `bytes` each (per=None: one, unbatched), each
    drawn by numpy's PCG64 from its index, with its checksum: work a real
    dataset does (decode, augment), about a millisecond per MiB."""

    def __init__(self, n, nbytes):
        self.n, self.bytes = n, nbytes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        a = np.random.Generator(np.random.PCG64(i)).integers(0, 256, size=self.bytes, dtype=np.uint8)
        return torch.from_numpy(a), torch.tensor(int(a.sum(dtype=np.int64)))


class Images(Dataset):
    """Sample i: a 224x224 RGB image "decoded" (generated from its seed, then
    moved to channels-first as a decoder's output would be), its label, and
    its checksum for the trainer to verify."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        img = np.random.default_rng(i).integers(0, 256, size=(224, 224, 3), dtype=np.uint8)
        chw = np.ascontiguousarray(img.transpose(2, 0, 1))
        return torch.from_numpy(chw), i, int(chw.sum(dtype=np.int64))


def worker_init(worker_id):
    """Every worker says where it crashed, if it does (torch's own handler only says that it did)."""
    import faulthandler

    faulthandler.enable(all_threads=True)


def discard(samples):
    """The "alone" run's collate: make the batch as the loaders would, then drop it."""
    if not isinstance(samples, list):  # one unbatched item (batch_size=None): nothing to collate
        return 0
    batch = torch.utils.data.default_collate(samples)
    return len(batch)


def drop(samples):
    """The "gen" run's collate: the samples are made; nothing more."""
    return 0


_host_buffer = {}


def into_host(samples):
    """The "host" run's collate: every byte of the samples written once into
    this worker's own batch buffer (made once, its pages touched), as a
    loader that stages into pinned memory writes them; nothing uploaded."""
    if not isinstance(samples, list):  # one unbatched item: (tensor, checksum), or a tensor
        samples = [samples]
    tensors = [s[0] if isinstance(s, tuple) else s for s in samples]
    n = sum(t.numel() * t.element_size() for t in tensors)
    buf = _host_buffer.get(n)
    if buf is None:
        buf = _host_buffer[n] = torch.zeros(n, dtype=torch.uint8)
    at = 0
    for t in tensors:
        k = t.numel() * t.element_size()
        buf[at:at + k].copy_(t.reshape(-1).view(torch.uint8))
        at += k
    return n


def check(batch, work, k, wrong, ds):
    """The step: read the batch on the device and count what is wrong (no host sync)."""
    if work in ("pcg16", "pcg64", "small"):
        data, sums = batch
        got = data.sum(dtype=torch.int64) if data.dim() == 1 else data.view(data.shape[0], -1).sum(1, dtype=torch.int64)
        wrong += (got != sums).sum()
    elif work == "images":
        imgs, labels, sums = batch
        wrong += (imgs.view(imgs.shape[0], -1).sum(1, dtype=torch.int64) != sums).sum()
        wrong += (labels != torch.arange(k * 256, k * 256 + labels.shape[0], device=labels.device)).sum()
    else:
        wrong += batch.sum(dtype=torch.int64) != ds.expected(k, None)
    return wrong


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def run(kind, work, workers, args, cycles):
    mib = 64 if work in ("bytes64", "pcg64") else 16
    nbytes = max(64, (mib << 20) // args.size_div)
    warm = args.warm
    timed = {"bytes16": 400, "step16": 300, "bytes64": 120, "images": 40, "pcg16": 200, "pcg64": 60, "small": 200}[work]
    if workers == 1:
        timed = max(10, timed // 8)
    if args.batches:
        timed = args.batches
    if work == "images":
        ds, kw = Images((warm + timed + 64) * 256), dict(batch_size=256)
    elif work == "small":
        ds, kw = Drawn((warm + timed + 64) * 256, max(1, nbytes // 256)), dict(batch_size=256)
    elif work in ("pcg16", "pcg64"):
        ds, kw = Drawn(warm + timed + 64, nbytes), dict(batch_size=None)
    else:
        ds, kw = Bytes(warm + timed + 64, mib), dict(batch_size=None)
        ds.bytes = nbytes
    dev = torch.device(args.device)
    kw.update(num_workers=workers, worker_init_fn=worker_init)
    if args.prefetch:
        kw.update(prefetch_factor=args.prefetch)
    elif kind in ("alone", "gen", "host"):
        kw.update(prefetch_factor=ferry.torch.DataLoader.PREFETCH_FACTOR)  # the bounds at ferry's depth
    if kind == "torch":
        loader = DataLoader(ds, pin_memory=dev.type == "cuda", **kw)
    elif kind == "ferry":
        loader = ferry.torch.DataLoader(ds, device=dev, socket=args.socket, **kw)
    else:
        loader = DataLoader(ds, collate_fn={"alone": discard, "gen": drop, "host": into_host}[kind], **kw)
    wrong = torch.zeros((), dtype=torch.int64, device=dev)
    it = iter(loader)
    pids = [os.getpid()] + [w.pid for w in it._workers] + ([args.ferryd_pid] if args.ferryd_pid else [])
    n = 0
    s0 = None
    for k, batch in enumerate(it):
        if k == warm:
            sync(dev)
            t0, c0 = time.monotonic(), [cpu_seconds(p) for p in pids]
            if kind == "ferry" and args.account:
                s0 = ferryd_status(args)
                first = len(it._ferry.account)
        if kind == "torch":
            batch = ([t.to(dev, non_blocking=True) for t in batch] if isinstance(batch, (list, tuple))
                     else batch.to(dev, non_blocking=True))
        if kind in ("torch", "ferry"):
            wrong = check(batch, work, k, wrong, ds)
            if work == "step16":
                torch.cuda._sleep(cycles * 2)
        n += k >= warm
        if n == timed:
            break  # the workers still run: their CPU is read now
    sync(dev)
    t1, c1 = time.monotonic(), [cpu_seconds(p) for p in pids]
    acc = None
    if s0 is not None:
        acc = account(it._ferry.account[first:], s0, ferryd_status(args), n, t1 - t0)
    del it, loader, batch
    cpu = [b - a for a, b in zip(c0, c1)]
    return {"bps": n / (t1 - t0), "cpu_ms": 1e3 * sum(cpu) / n,
            "ferryd_ms": 1e3 * (cpu[-1] if args.ferryd_pid else 0) / n, "wrong": int(wrong), "account": acc}


def ferryd_status(args):
    out = subprocess.run([args.ferryctl, "--socket", args.socket, "--json", "status"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


ACCOUNT_COLS = [
    ("sample", "worker: its samples (task received to collate)"),
    ("layout", "worker: the collate's layout"),
    ("stage", "worker: staging (copy into staging memory, waits for room included)"),
    ("room", "of which waits for staging room (ferryd's slot_wait, per batch)"),
    ("idle", "worker: idle between its batch staged and its next task"),
    ("idle%", "workers' share of their time idle"),
    ("to trainer", "staged to received by the trainer (result queue)"),
    ("reorder", "received to delivered (torch's in-order delivery)"),
    ("blocked", "trainer: blocked for batches, per batch"),
    ("deliver", "trainer: ferry's delivery (tensors over the buffer)"),
    ("own", "trainer: everything else per batch (the loop's body, torch's iterator)"),
    ("hold", "ferryd: uploads held for their buffer's release, per batch"),
    ("copy", "ferryd: a piece's copy, queued to done (mean)"),
    ("landed%", "batches whose copy had landed when delivered"),
    ("wakes", "ferryd: doorbells + device wake-ups + sleeps, per batch"),
]


def hist_delta(a, b, name):
    ha, hb = a["histograms"].get(name, {}), b["histograms"].get(name, {})
    return hb.get("count", 0) - ha.get("count", 0), hb.get("sum_ns", 0) - ha.get("sum_ns", 0)


def account(rows, s0, s1, n, wall):
    """Where ferry's timed batches waited (ACCOUNT_COLS), in ms per batch
    unless named a share, from the loader's account and ferryd's status."""
    ms = 1e-6
    med = lambda xs: statistics.mean(xs) if xs else 0.0  # noqa: E731  (means: they add up to the wall)
    out = {}
    out["sample"] = med([r["collate"] - r["got"] for r in rows]) * ms
    out["layout"] = med([r["laid"] - r["collate"] for r in rows]) * ms
    out["stage"] = med([r["staged"] - r["laid"] for r in rows]) * ms
    out["room"] = hist_delta(s0, s1, "slot_wait")[1] * ms / max(n, 1)
    by_worker = collections.defaultdict(list)
    for r in rows:
        by_worker[r["worker"]].append(r)
    idle, busy = [], 0
    for rs in by_worker.values():
        rs.sort(key=lambda r: r["got"])
        busy += sum(r["staged"] - r["got"] for r in rs)
        idle += [b["got"] - a["staged"] for a, b in zip(rs, rs[1:])]
    out["idle"] = med(idle) * ms
    out["idle%"] = 100.0 * sum(idle) / max(1, sum(idle) + busy)
    out["to trainer"] = med([r["arrived"] - r["staged"] for r in rows if r["arrived"]]) * ms
    out["reorder"] = med([r["deliver"] - r["arrived"] for r in rows if r["arrived"]]) * ms
    out["blocked"] = med([r["blocked"] for r in rows]) * ms
    out["deliver"] = med([r["delivered"] - r["deliver"] for r in rows]) * ms
    out["own"] = max(0.0, wall * 1e3 / max(n, 1) - out["blocked"] - out["deliver"])
    out["hold"] = hist_delta(s0, s1, "hold_wait")[1] * ms / max(n, 1)
    c, sm = hist_delta(s0, s1, "upload_latency")
    out["copy"] = sm * ms / max(c, 1)
    out["landed%"] = 100.0 * sum(r["landed"] for r in rows) / max(1, len(rows))
    p0, p1 = s0["poller"], s1["poller"]
    out["wakes"] = sum(p1[k] - p0[k] for k in ("doorbells", "device_wakes", "sleeps")) / max(n, 1)
    return out


def step_bound(work, args, cycles):
    """Batches/s of the step alone, on a batch already on the device: what
    no loader can beat (the check and the GPU step, nothing loaded)."""
    dev = torch.device(args.device)
    batch = Bytes(1, 16)[0].to(dev)
    wrong = torch.zeros((), dtype=torch.int64, device=dev)
    for k in range(20):
        check(batch, work, 0, wrong, Bytes(1, 16))
        torch.cuda._sleep(cycles * 2)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    for k in range(200):
        wrong = check(batch, work, 0, wrong, Bytes(1, 16))
        torch.cuda._sleep(cycles * 2)
    torch.cuda.synchronize()
    return 200 / (time.monotonic() - t0)


def cycles_per_ms():
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    s.record()
    torch.cuda._sleep(20_000_000)
    e.record()
    e.synchronize()
    return int(20_000_000 / s.elapsed_time(e))


def spread(xs):
    f = ".0f" if min(xs) >= 10 else ".2f"  # a slow loader (a CPU smoke run) still shows a rate
    return f"{statistics.median(xs):{f}} ({min(xs):{f}}-{max(xs):{f}})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--ferryd-pid", type=int, default=0)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--work", default="pcg16,pcg64,small,bytes16,bytes64,images,step16")
    ap.add_argument("--workers", default="1,8,16,32")
    ap.add_argument("--kinds", default="torch,ferry,alone,gen,host",
                    help="which loaders to run (ferry's shares are printed for those run)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--batches", type=int, default=0, help="timed batches per run (default: per workload)")
    ap.add_argument("--size-div", type=int, default=1, help="every batch this many times smaller (a smoke test)")
    ap.add_argument("--prefetch", type=int, default=0,
                    help="prefetch_factor of every loader (default: each its own: torch's 2 for torch, "
                         "ferry.torch's 4 for ferry and for the bounds alone, gen and host)")
    ap.add_argument("--label", default="")
    ap.add_argument("--account", action="store_true",
                    help="print where ferry's batches waited (needs --ferryctl; see above)")
    ap.add_argument("--ferryctl", default="", help="ferryctl, for ferryd's side of --account")
    a = ap.parse_args()
    if a.account:
        if not a.ferryctl:
            ap.error("--account needs --ferryctl")
        os.environ["FERRY_TORCH_ACCOUNT"] = "1"  # the workers' part (spawned ones read it at import)
        ferry.torch._account.ON = True
    kinds = a.kinds.split(",")
    for k in kinds:
        if k not in ("torch", "ferry", "alone", "gen", "host"):
            ap.error(f"--kinds: no loader '{k}'")
    cuda = torch.device(a.device).type == "cuda"
    if cuda:
        torch.cuda.init()
    cycles = cycles_per_ms() if cuda else 0
    name = torch.cuda.get_device_name() if cuda else "cpu (ferryd's device: a smoke test, not a measurement)"
    depth = (f"prefetch_factor {a.prefetch}" if a.prefetch else
             f"prefetch_factor: torch 2, the others {ferry.torch.DataLoader.PREFETCH_FACTOR}")
    print(f"# {name} | torch {torch.__version__} | {os.cpu_count()} cores | {depth} | {a.label}")
    cols = [f"{k} batches/s" for k in kinds]
    shares = [f"ferry ÷ {k}" for k in kinds if k != "ferry"] if "ferry" in kinds else []
    cpus = [f"CPU ms/batch {k}" for k in kinds if k in ("torch", "ferry")]
    print("| workload | workers | " + " | ".join(cols + shares + cpus) + " | wrong |")
    print("|" + "---|" * (3 + len(cols) + len(shares) + len(cpus)))
    accounts = []
    for work in a.work.split(","):
        if work == "step16" and not cuda:
            continue  # a GPU step
        for workers in [int(w) for w in a.workers.split(",")]:
            if work in ("images", "step16") and workers != 8:
                continue  # those workloads at 8 workers only
            res = {k: [] for k in kinds}
            for r in range(a.reps):
                for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                    res[kind].append(run(kind, work, workers, a, cycles))
            row = [spread([x["bps"] for x in res[k]]) for k in kinds]
            for k in kinds:
                if k == "ferry" or "ferry" not in kinds:
                    continue
                ratio = [x["bps"] / y["bps"] for x, y in zip(res["ferry"], res[k])]
                row.append(f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})")
            for k in kinds:
                if k == "torch":
                    row.append(f"{statistics.median([x['cpu_ms'] for x in res[k]]):.1f}")
                elif k == "ferry":
                    row.append(f"{statistics.median([x['cpu_ms'] for x in res[k]]):.1f} "
                               f"(ferryd {statistics.median([x['ferryd_ms'] for x in res[k]]):.1f})")
            wrong = sum(x["wrong"] for k in ("torch", "ferry") if k in res for x in res[k])
            label = work
            if work == "step16":
                bound = step_bound(work, a, cycles)
                label = f"step16 (step alone: {bound:.0f}/s)"
            print(f"| {label} | {workers} | " + " | ".join(row) + f" | {wrong} |", flush=True)
            for x in res.get("ferry", []):
                if x["account"] is not None:
                    accounts.append((work, workers, x["bps"], x["account"]))
    if accounts:
        print("\nWhere ferry's batches waited (ms per batch, unless a share; one row per run):\n")
        for name, what in ACCOUNT_COLS:
            print(f"- {name}: {what}")
        print("\n| workload | workers | batches/s | " + " | ".join(n for n, _ in ACCOUNT_COLS) + " |")
        print("|" + "---|" * (3 + len(ACCOUNT_COLS)))
        for work, workers, bps, acc in accounts:
            print(f"| {work} | {workers} | {bps:.0f} | " + " | ".join(f"{acc[n]:.2f}" for n, _ in ACCOUNT_COLS) + " |")


if __name__ == "__main__":
    main()
