# SPDX-License-Identifier: MIT
"""Unmodified PyTorch programs for ferry-run's measurements (bench/run_gpu.sh
runs each plain and under ferry-run, side by side). Each prints one line of
results and whether the consumer saw the right bytes.

  loop [--pinned] [--iters N] [--mib M]
      The loop users write: a batch of M MiB (pageable, or pinned by hand
      with --pinned) uploaded with .to("cuda", non_blocking=True), then six
      bf16 4096^3 matmuls; the upload's sum is added up on the device and
      checked at the end. Prints iterations per second.
  behind SIZE...
      dst.copy_(src, non_blocking=True) from a pageable tensor behind a 20 ms
      kernel, the source overwritten as soon as the call returns; 12 calls
      per size. Prints the median call time and how many arrived wrong.
  blocking [--pinned] SIZE...
      x = src.cuda() (blocking) from a pageable tensor (or one pinned by
      hand), 1 warm call and 6 timed per size, each checked on the device
      (its sum). Prints the median GB/s and how many arrived wrong.
  first [--behind] SIZE
      The first upload of SIZE bytes in this process, once CUDA is up: a
      blocking .cuda() (or, with --behind, copy_(non_blocking=True) behind a
      20 ms kernel, the source overwritten at once), then a second one.
      Prints both call times and whether they arrived right.
  loader [--pin] [--iters N]
      A training loop over torch's own DataLoader (4 workers, batches of
      16 MiB made by collate from 1 MiB samples), pin_memory=False (or True
      with --pin), each batch moved with .to("cuda", non_blocking=True) and
      read by a small model step; every batch's sum checked on the device.
      Prints batches per second.
  small [--iters N]
      Only copies ferry leaves alone: 4 KiB pageable and 16 MiB pinned
      uploads between small kernels. Prints the loop's time.
  check
      torch's paths: copy_ behind a kernel, .cuda(), a copy captured into a
      CUDA graph. Prints each outcome (the same plain and under ferry-run).
"""
import statistics
import sys
import time

import torch


def sleep_cycles(ms):
    # torch.cuda._sleep spins for a number of clock cycles.
    props = torch.cuda.get_device_properties(0)
    rate = getattr(props, "clock_rate", 1_800_000)  # kHz
    return int(ms * rate)


def loop(args):
    iters, mib, pinned = 200, 16, "--pinned" in args
    if "--iters" in args:
        iters = int(args[args.index("--iters") + 1])
    if "--mib" in args:
        mib = int(args[args.index("--mib") + 1])
    n = mib * 1024 * 1024 // 4
    pool = [torch.randint(0, 1000, (n,), dtype=torch.int32) for _ in range(4)]
    if pinned:
        pool = [t.pin_memory() for t in pool]
    expect = sum(int(t.sum()) for t in pool)
    m = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    acc = torch.zeros((), dtype=torch.int64, device="cuda")
    for i in range(10):  # warm: kernels, staging
        x = pool[i % 4].to("cuda", non_blocking=True)
        acc += x.sum()
        m2 = m @ m
    torch.cuda.synchronize()
    acc.zero_()
    t0 = time.perf_counter()
    for i in range(iters):
        x = pool[i % 4].to("cuda", non_blocking=True)
        acc += x.sum()
        for _ in range(6):
            m2 = m @ m
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    want = expect * (iters // 4) + sum(int(pool[i].sum()) for i in range(iters % 4))
    ok = int(acc) == want
    print(f"loop {'pinned' if pinned else 'pageable'} mib={mib} iters={iters} it_per_s={iters / dt:.1f} {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


def behind(args):
    wrong_total = 0
    for size in args:
        n = int(size)
        src = torch.randint(0, 255, (n,), dtype=torch.uint8)
        orig = src.clone()
        want = orig.to("cuda")
        dst = torch.empty(n, dtype=torch.uint8, device="cuda")
        cycles = sleep_cycles(20)
        times, wrong = [], 0
        for i in range(13):
            torch.cuda.synchronize()
            src.copy_(orig)
            torch.cuda._sleep(cycles)
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            t1 = time.perf_counter()
            src.fill_(i % 200 + 1)  # the program reuses its buffer at once
            torch.cuda.synchronize()
            if i > 0:  # the first call sets up (contexts, staging)
                times.append((t1 - t0) * 1e3)
                wrong += int(not torch.equal(dst, want))
        wrong_total += wrong
        print(f"behind size={n} call_ms={statistics.median(times):.3f} min={min(times):.3f} max={max(times):.3f} wrong={wrong}")
        sys.stdout.flush()
        del src, orig, want, dst
    return 0 if wrong_total == 0 else 1


def device_sum(x):
    return int(x.sum(dtype=torch.int64))


def blocking(args):
    pinned = "--pinned" in args
    sizes = [int(a) for a in args if not a.startswith("--")]
    wrong_total = 0
    for n in sizes:
        src = torch.randint(0, 255, (n,), dtype=torch.uint8)
        if pinned:
            src = src.pin_memory()
        rates, wrong = [], 0
        for i in range(7):
            src[i] = (i * 37) % 251  # a different source each call
            want = int(src.sum(dtype=torch.int64))
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            x = src.cuda()
            t1 = time.perf_counter()
            wrong += int(device_sum(x) != want)
            if i > 0:
                rates.append(n / (t1 - t0) / 1e9)
            del x
        wrong_total += wrong
        print(f"blocking {'pinned' if pinned else 'pageable'} size={n} gbps={statistics.median(rates):.2f} "
              f"min={min(rates):.2f} max={max(rates):.2f} wrong={wrong}")
        sys.stdout.flush()
        del src
    return 0 if wrong_total == 0 else 1


def first(args):
    behind_kernel = "--behind" in args
    n = int([a for a in args if not a.startswith("--")][0])
    torch.zeros(1, device="cuda").add_(1)  # the context and a kernel, as a program has them
    torch.cuda.synchronize()
    src = torch.randint(0, 255, (n,), dtype=torch.uint8)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    times, wrong = [], 0
    for i in range(2):
        src[i] = 7 + i
        want = int(src.sum(dtype=torch.int64))
        if behind_kernel:
            torch.cuda._sleep(sleep_cycles(20))
        t0 = time.perf_counter()
        if behind_kernel:
            dst.copy_(src, non_blocking=True)
        else:
            dst = src.cuda()
        t1 = time.perf_counter()
        if behind_kernel:
            src.fill_(3)  # the program reuses its buffer at once
        torch.cuda.synchronize()
        times.append((t1 - t0) * 1e3)
        wrong += int(device_sum(dst) != want)
    mode = "behind" if behind_kernel else "blocking"
    print(f"first {mode} size={n} first_ms={times[0]:.3f} second_ms={times[1]:.3f} wrong={wrong}")
    return 0 if wrong == 0 else 1


class Samples(torch.utils.data.Dataset):
    """1 MiB samples, each its index's bytes (cheap to make, known sums)."""

    def __init__(self, count):
        self.count = count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        return torch.full((1 << 20,), i % 251, dtype=torch.uint8)


def loader(args):
    pin = "--pin" in args
    iters = 200
    if "--iters" in args:
        iters = int(args[args.index("--iters") + 1])
    batch = 16
    data = torch.utils.data.DataLoader(Samples((iters + 10) * batch), batch_size=batch, num_workers=4,
                                       pin_memory=pin, persistent_workers=False)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    acc = torch.zeros((), dtype=torch.int64, device="cuda")
    expect, t0 = 0, None
    for k, x in enumerate(data):
        if k == 10:  # warm: workers, kernels, staging
            torch.cuda.synchronize()
            acc.zero_()
            expect = 0
            t0 = time.perf_counter()
        first = k * batch
        expect += sum((first + j) % 251 for j in range(batch)) * (1 << 20)
        g = x.to("cuda", non_blocking=True)
        acc += g.sum(dtype=torch.int64)
        for _ in range(3):
            w2 = w @ w
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    ok = int(acc) == expect
    print(f"loader {'pin' if pin else 'pageable'} iters={iters} it_per_s={iters / dt:.1f} {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


def small(args):
    iters = 2000
    if "--iters" in args:
        iters = int(args[args.index("--iters") + 1])
    tiny = torch.randint(0, 255, (4096,), dtype=torch.uint8)
    big = torch.randint(0, 255, (16 << 20,), dtype=torch.uint8).pin_memory()
    acc = torch.zeros((), dtype=torch.int64, device="cuda")
    expect = 0
    t0 = time.perf_counter()
    for i in range(iters):
        tiny[0] = i % 251
        expect += int(tiny.sum())
        acc += tiny.to("cuda", non_blocking=True).sum()
        if i % 50 == 0:
            acc += big.to("cuda", non_blocking=True)[:1024].sum()
            expect += int(big[:1024].sum())
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    ok = int(acc) == expect
    print(f"small iters={iters} ms={dt * 1e3:.1f} {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


def check(_args):
    bad = 0
    n = 8 << 20
    src = torch.randint(0, 255, (n,), dtype=torch.uint8)
    want = src.clone()
    # .cuda(): blocking, from pageable memory.
    got = src.cuda()
    print(f"check cuda() {'ok' if torch.equal(got.cpu(), want) else 'WRONG'}")
    bad += not torch.equal(got.cpu(), want)
    # copy_ behind a kernel, the source reused at once.
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    torch.cuda._sleep(sleep_cycles(20))
    dst.copy_(src, non_blocking=True)
    src.fill_(7)
    torch.cuda.synchronize()
    ok = torch.equal(dst.cpu(), want)
    print(f"check copy_behind_kernel {'ok' if ok else 'WRONG'}")
    bad += not ok
    # A copy captured into a graph: whatever CUDA does with it, ferry must not change it.
    src.copy_(want)
    s = torch.cuda.Stream()
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            dst.copy_(src, non_blocking=True)
        src.fill_(9)
        g.replay()
        torch.cuda.synchronize()
        outcome = "replayed " + ("original" if torch.equal(dst.cpu(), want) else "later-bytes" if bool((dst == 9).all()) else "mixed")
    except Exception as e:  # noqa: BLE001 - what torch says is the outcome
        outcome = "refused " + type(e).__name__
    print(f"check graph {outcome}")
    return 1 if bad else 0


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    fn = {"loop": loop, "behind": behind, "blocking": blocking, "first": first, "loader": loader, "small": small, "check": check}.get(what)
    if fn is None:
        print(__doc__)
        sys.exit(2)
    sys.exit(fn(sys.argv[2:]))
