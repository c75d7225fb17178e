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
    fn = {"loop": loop, "behind": behind, "small": small, "check": check}.get(what)
    if fn is None:
        print(__doc__)
        sys.exit(2)
    sys.exit(fn(sys.argv[2:]))
