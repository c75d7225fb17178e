#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ferry.torch.DataLoader against PyTorch's own loading path, on a GPU.

    torch: torch.utils.data.DataLoader(..., pin_memory=True) + .to(device, non_blocking=True)
    ferry: ferry.torch.DataLoader(..., device=device, socket=S)
    alone: the same workers making the same batches, thrown away in the
           trainer (no pinning, no upload): what bounds every loader

Same dataset, sampler and collate in all three, side by side in one run,
alternating. The trainer's "step" reads every batch on the device and counts
what is wrong (a checksum against what the batch must hold), optionally then
spins the GPU for --step-ms; the clock runs from the first batch after the
warm-up until the last step finished on the device. Host CPU per batch
counts the trainer (its pin thread included), the workers and ferryd.

Workloads (--work): bytes16 / bytes64 (one uint8 batch of 16 / 64 MiB per
item, batch_size=None), images (256 decoded 3x224x224 uint8 images and int64
labels per batch, a numpy decode cost per image), step16 (bytes16 with a 2 ms
GPU step per batch).

    python3 bench/torch_loader_bench.py --socket /tmp/ferry.sock --ferryd-pid PID \\
        --work bytes16,bytes64,images,step16 --workers 1,8,16 --reps 3
"""

import argparse
import os
import statistics
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
    if isinstance(samples, torch.Tensor):
        return samples.numel()
    batch = torch.utils.data.default_collate(samples)
    return len(batch)


def check(batch, work, k, wrong, ds):
    """The step: read the batch on the device and count what is wrong (no host sync)."""
    if work == "images":
        imgs, labels, sums = batch
        wrong += (imgs.view(imgs.shape[0], -1).sum(1, dtype=torch.int64) != sums).sum()
        wrong += (labels != torch.arange(k * 256, k * 256 + labels.shape[0], device=labels.device)).sum()
    else:
        wrong += batch.sum(dtype=torch.int64) != ds.expected(k, None)
    return wrong


def run(kind, work, workers, args, cycles):
    mib = 64 if work == "bytes64" else 16
    warm = args.warm
    timed = {"bytes16": 400, "step16": 300, "bytes64": 120, "images": 40}[work]
    if workers == 1:
        timed = max(10, timed // 8)
    if work == "images":
        ds, kw = Images((warm + timed + 64) * 256), dict(batch_size=256)
    else:
        ds, kw = Bytes(warm + timed + 64, mib), dict(batch_size=None)
    dev = torch.device(args.device)
    kw.update(num_workers=workers, prefetch_factor=args.prefetch, worker_init_fn=worker_init)
    if kind == "torch":
        loader = DataLoader(ds, pin_memory=True, **kw)
    elif kind == "ferry":
        loader = ferry.torch.DataLoader(ds, device=dev, socket=args.socket, **kw)
    else:
        loader = DataLoader(ds, collate_fn=discard, **kw)
    wrong = torch.zeros((), dtype=torch.int64, device=dev)
    it = iter(loader)
    pids = [os.getpid()] + [w.pid for w in it._workers] + ([args.ferryd_pid] if args.ferryd_pid else [])
    n = 0
    for k, batch in enumerate(it):
        if k == warm:
            torch.cuda.synchronize()
            t0, c0 = time.monotonic(), [cpu_seconds(p) for p in pids]
        if kind == "torch":
            batch = [t.to(dev, non_blocking=True) for t in batch] if work == "images" else batch.to(dev, non_blocking=True)
        if kind != "alone":
            wrong = check(batch, work, k, wrong, ds)
            if work == "step16":
                torch.cuda._sleep(cycles * 2)
        n += k >= warm
        if n == timed:
            break  # the workers still run: their CPU is read now
    torch.cuda.synchronize()
    t1, c1 = time.monotonic(), [cpu_seconds(p) for p in pids]
    del it, loader, batch
    cpu = [b - a for a, b in zip(c0, c1)]
    return {"bps": n / (t1 - t0), "cpu_ms": 1e3 * sum(cpu) / n,
            "ferryd_ms": 1e3 * (cpu[-1] if args.ferryd_pid else 0) / n, "wrong": int(wrong)}


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
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--ferryd-pid", type=int, default=0)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--work", default="bytes16,bytes64,images,step16")
    ap.add_argument("--workers", default="1,8,16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    torch.cuda.init()
    cycles = cycles_per_ms()
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | {os.cpu_count()} cores | {a.label}")
    print("| workload | workers | torch batches/s | ferry batches/s | ferry ÷ torch | workers alone batches/s |"
          " ferry ÷ alone | CPU ms/batch torch | CPU ms/batch ferry (ferryd) | ferry ÷ torch CPU |"
          " CPU ms/batch alone | wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for work in a.work.split(","):
        for workers in [int(w) for w in a.workers.split(",")]:
            if work in ("images", "step16") and workers != 8:
                continue  # those workloads at 8 workers, as the issue asks
            res = {"torch": [], "ferry": [], "alone": []}
            for r in range(a.reps):
                order = ["ferry", "torch", "alone"] if r % 2 == 0 else ["alone", "torch", "ferry"]
                for kind in order:
                    res[kind].append(run(kind, work, workers, a, cycles))
            t, f, al = res["torch"], res["ferry"], res["alone"]
            ratio = [x["bps"] / y["bps"] for x, y in zip(f, t)]
            alone = [x["bps"] / y["bps"] for x, y in zip(f, al)]
            cpu = [x["cpu_ms"] / y["cpu_ms"] for x, y in zip(f, t)]
            wrong = sum(x["wrong"] for x in t + f)
            name = work
            if work == "step16":
                bound = step_bound(work, a, cycles)
                name = f"step16 (step alone: {bound:.0f}/s; ferry {statistics.median([x['bps'] for x in f]) / bound:.2f} of it)"
            print(f"| {name} | {workers} | {spread([x['bps'] for x in t])} | {spread([x['bps'] for x in f])} | "
                  f"{statistics.median(ratio):.2f}× ({min(ratio):.2f}-{max(ratio):.2f}) | "
                  f"{spread([x['bps'] for x in al])} | {statistics.median(alone):.2f} | "
                  f"{statistics.median([x['cpu_ms'] for x in t]):.1f} | "
                  f"{statistics.median([x['cpu_ms'] for x in f]):.1f} ({statistics.median([x['ferryd_ms'] for x in f]):.1f}) | "
                  f"{statistics.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | "
                  f"{statistics.median([x['cpu_ms'] for x in al]):.1f} | {wrong} |", flush=True)


if __name__ == "__main__":
    main()
