#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A data-loader pipeline across processes, through ferry.

The training process (this one) allocates a few device buffers and grants
them; N worker processes, with no GPU context of their own, each produce
numpy batches and upload them straight into a granted buffer (one host copy:
into ferryd's pinned slot). The trainer consumes the batches in order: here,
on any device, it reads each batch back and checks every byte, where a real
trainer would launch its kernels on the buffer.

Several GPUs: give one --socket per ferryd (one daemon per GPU, ferryd@N);
batch b goes to GPU b % len(sockets), each GPU with its own buffers.

    ferryd --sim --socket /tmp/ferry.sock &
    python3 examples/dataloader.py --socket /tmp/ferry.sock --workers 4 --batches 64
"""

import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np

try:
    import ferry  # installed: the packages, the wheel, pip
except ImportError:  # run from the source tree: its python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ferry


def batch(b, nbytes):
    """Batch b's contents: what a worker decodes and augments, made up here."""
    rng = np.random.default_rng(b)
    return rng.integers(0, 256, size=nbytes, dtype=np.uint8)


def worker(sockets, tokens, nbytes, jobs, ready):
    clients = [ferry.Client(s) for s in sockets]  # one connection per GPU's ferryd
    try:
        bufs = [[c.open(t) for t in toks] for c, toks in zip(clients, tokens)]
        for b, dev, slot in iter(jobs.get, None):  # (batch, GPU, its buffer to fill); None: done
            data = batch(b, nbytes)                # produce (decode, augment, ...)
            clients[dev].wait(bufs[dev][slot].upload(data))  # on the device once this returns
            ready.put((b, dev, slot))
    finally:
        for c in clients:
            c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", action="append", default=None,
                    help="a ferryd's socket; repeat for several GPUs (default: $FERRY_SOCKET)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batches", type=int, default=64)
    ap.add_argument("--batch-bytes", type=int, default=1 << 20)
    ap.add_argument("--buffers", type=int, default=8, help="device buffers in rotation, per GPU")
    a = ap.parse_args()
    sockets = a.socket or [None]
    ndev = len(sockets)

    def slot_of(b):  # batch b's GPU and buffer; batch b + ndev * buffers reuses it
        return b % ndev, (b // ndev) % a.buffers

    ctx = mp.get_context("spawn")  # workers connect on their own; nothing of ours is inherited
    clients = [ferry.Client(s) for s in sockets]
    try:
        bufs = [[c.alloc(a.batch_bytes) for _ in range(a.buffers)] for c in clients]
        tokens = [[b.grant(ferry.RIGHT_UPLOAD) for b in dev] for dev in bufs]
        # Jobs go out in batch order, one per free buffer: the oldest batch
        # not yet consumed always has a buffer, whichever worker is slow.
        jobs, ready = ctx.Queue(), ctx.Queue()
        in_flight = ndev * a.buffers
        for b in range(min(in_flight, a.batches)):
            jobs.put((b, *slot_of(b)))
        t0 = time.monotonic()
        procs = [
            ctx.Process(target=worker, args=(sockets, tokens, a.batch_bytes, jobs, ready)) for _ in range(a.workers)
        ]
        for p in procs:
            p.start()
        waiting, wrong, per_dev = {}, 0, [0] * ndev
        host = np.empty(a.batch_bytes, dtype=np.uint8)
        for b in range(a.batches):           # consumed in batch order
            while b not in waiting:
                got, dev, slot = ready.get(timeout=60)
                waiting[got] = (dev, slot)
            dev, slot = waiting.pop(b)
            bufs[dev][slot].download(host)   # the trainer's "kernel": read the batch
            per_dev[dev] += 1
            if not np.array_equal(host, batch(b, a.batch_bytes)):
                wrong += 1
            if b + in_flight < a.batches:
                jobs.put((b + in_flight, dev, slot))  # the buffer is free again
        for _ in procs:
            jobs.put(None)
        elapsed = time.monotonic() - t0
        for p in procs:
            p.join()
        failed = [p.exitcode for p in procs if p.exitcode != 0]
    finally:
        for c in clients:
            c.close()
    per = ", ".join(f"GPU {i}: {n}" for i, n in enumerate(per_dev)) if ndev > 1 else ""
    print(f"dataloader: {a.batches} batches of {a.batch_bytes} bytes from {a.workers} workers in {elapsed:.2f} s "
          f"({a.batches / elapsed:.1f} batches/s); {a.batches - wrong} verified, {wrong} wrong"
          + (f" ({per})" if per else ""))
    return 1 if wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())
