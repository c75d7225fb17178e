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

--device cpu runs the same on a machine without a GPU (ferryd on the
simulated device, torch's loader without pinning): a check that the script
works, not a measurement; --size-div and --batches make it small.
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
    kw.update(num_workers=workers, prefetch_factor=args.prefetch, worker_init_fn=worker_init)
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
    for k, batch in enumerate(it):
        if k == warm:
            sync(dev)
            t0, c0 = time.monotonic(), [cpu_seconds(p) for p in pids]
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
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    for k in kinds:
        if k not in ("torch", "ferry", "alone", "gen", "host"):
            ap.error(f"--kinds: no loader '{k}'")
    cuda = torch.device(a.device).type == "cuda"
    if cuda:
        torch.cuda.init()
    cycles = cycles_per_ms() if cuda else 0
    name = torch.cuda.get_device_name() if cuda else "cpu (ferryd's device: a smoke test, not a measurement)"
    print(f"# {name} | torch {torch.__version__} | {os.cpu_count()} cores | {a.label}")
    cols = [f"{k} batches/s" for k in kinds]
    shares = [f"ferry ÷ {k}" for k in kinds if k != "ferry"] if "ferry" in kinds else []
    cpus = [f"CPU ms/batch {k}" for k in kinds if k in ("torch", "ferry")]
    print("| workload | workers | " + " | ".join(cols + shares + cpus) + " | wrong |")
    print("|" + "---|" * (3 + len(cols) + len(shares) + len(cpus)))
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


if __name__ == "__main__":
    main()
