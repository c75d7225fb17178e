# SPDX-License-Identifier: MIT
"""ferry.torch.DataLoader and ferry.device on a real NVIDIA GPU, against a
ferryd --backend cuda at $FERRY_SOCKET (`bash bench/gpu.sh`, its tests step, runs it on the
H200). Skipped without a CUDA device or a socket.

What the simulated device cannot show: batches as CUDA tensors that are
views of ferry's buffers (no copy), the trainer's stream ordered after each
batch's upload and the buffers recycled after the stream (checked on the
device, before any host synchronisation), and CUDA's lazy module loading
meeting a stream that waits on a fence.
"""

import os
import subprocess
import sys
import textwrap
import time
import unittest

if not os.environ.get("FERRY_TEST_INSTALLED"):  # else the ferry installed (tests/wheel_test.sh: the wheel's)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
from torch.utils.data import DataLoader as TorchLoader  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

import ferry  # noqa: E402

SOCKET = os.environ.get("FERRY_SOCKET")
CUDA = torch.cuda.is_available() and SOCKET is not None
if CUDA:
    import ferry.device
    import ferry.torch as ft


class Frames(Dataset):
    """Samples whose every byte is known: sample i is (3, 64, 64) float32 of
    i + position, a label, and a uint8 mask."""

    def __init__(self, n=300):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.arange(3 * 64 * 64, dtype=torch.float32).reshape(3, 64, 64) + i
        return {"x": x, "label": i, "mask": (torch.arange(100) % (i + 2) == 0).to(torch.uint8)}


def expected_sums(batch):
    return torch.stack([batch["x"].double().sum(), batch["label"].double().sum(), batch["mask"].double().sum()])


@unittest.skipUnless(CUDA, "needs an NVIDIA GPU and FERRY_SOCKET (a ferryd --backend cuda)")
class CudaLoaderTest(unittest.TestCase):
    def loader(self, ds, **kw):
        return ft.DataLoader(ds, device="cuda:0", socket=SOCKET, **kw)

    def test_same_batches_as_torchs_as_views_of_ferrys_buffers(self):
        kw = dict(batch_size=16, shuffle=True, num_workers=4)
        theirs = list(TorchLoader(Frames(), generator=torch.Generator().manual_seed(1), **kw))
        it = iter(self.loader(Frames(), generator=torch.Generator().manual_seed(1), **kw))
        sums, ours, inside = [], [], 0
        for b in it:
            # On the device, at once: the stream waits for the batch's upload.
            sums.append(torch.stack([b["x"].double().sum(), b["label"].double().sum(), b["mask"].double().sum()]))
            maps = [(s.mapping.ptr, s.mapping.nbytes) for s in it._ferry.slots.values() if s.mapping is not None]
            for t in (b["x"], b["label"], b["mask"]):
                self.assertEqual(t.device.type, "cuda")
                inside += any(p <= t.data_ptr() and t.data_ptr() + t.nbytes <= p + n for p, n in maps)
            ours.append({k: v.cpu() for k, v in b.items()})
        self.assertEqual(inside, 3 * len(theirs))  # every tensor a view of a ferry buffer: no copy
        self.assertEqual(len(ours), len(theirs))
        for i, (a, b) in enumerate(zip(theirs, ours)):
            for k in a:
                self.assertTrue(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype, f"batch {i} key {k}")
        got = torch.stack(sums).cpu()
        want = torch.stack([expected_sums(a) for a in theirs])
        self.assertTrue(torch.equal(got, want), "a kernel queued right after delivery read other bytes")

    def test_buffers_are_recycled_only_after_the_stream_is_done(self):
        # A consumer far behind its loader (a 1 ms step per batch on the
        # stream, the host never waiting), more batches than buffers: each
        # kernel must still read its own batch.
        loader = self.loader(Frames(400), batch_size=8, num_workers=4, prefetch_factor=2)
        cycles = _cycles_per_ms()
        sums, made = [], [0]
        it = iter(loader)
        for b in it:
            torch.cuda._sleep(cycles)  # the step: the stream is behind the host
            sums.append(b["x"].double().sum())
            made.append(max(it._ferry.slots, default=0))
        got = torch.stack(sums).cpu()
        ref = torch.stack([sum(Frames(400)[j]["x"].double().sum() for j in range(i * 8, i * 8 + 8))
                           for i in range(50)])
        wrong = [i for i in range(50) if got[i] != ref[i]]
        self.assertEqual(wrong, [], f"batches read wrong: {wrong}; got {got[wrong[:3]].tolist()}, "
                                    f"want {ref[wrong[:3]].tolist()}")
        self.assertLess(max(made), 25, f"buffers made: {max(made)}")  # reused

    def test_a_batch_taken_on_a_side_stream_and_used_on_another(self):
        # The prefetcher pattern: batches delivered on a side stream, used on the
        # main one (which is slow), recorded there with ferry.torch.record_stream:
        # no buffer is overwritten while the main stream still reads it.
        side, main = torch.cuda.Stream(), torch.cuda.current_stream()
        cycles = _cycles_per_ms()
        it = iter(self.loader(Frames(240), batch_size=8, num_workers=4))
        sums = []
        while True:
            with torch.cuda.stream(side):
                try:
                    b = next(it)
                except StopIteration:
                    break
            main.wait_stream(side)
            for t in b.values():
                ft.record_stream(t, main)
            torch.cuda._sleep(cycles)  # main is behind
            sums.append(b["x"].double().sum())
            del b
        got = torch.stack(sums).cpu()
        ref = torch.stack([sum(Frames(240)[j]["x"].double().sum() for j in range(i * 8, i * 8 + 8))
                           for i in range(30)])
        self.assertEqual([i for i in range(30) if got[i] != ref[i]], [])

    def test_kept_batches_keep_their_buffers(self):
        batches = list(self.loader(Frames(96), batch_size=8, num_workers=2))
        torch.cuda.synchronize()
        for i, b in enumerate(batches):
            self.assertTrue(torch.equal(b["label"].cpu(), torch.arange(i * 8, i * 8 + 8)))
        del batches

    def test_cuda_array_interface_and_dlpack_of_a_buffer(self):
        with ferry.Client(SOCKET) as c, c.alloc(1 << 20) as buf:
            data = torch.arange(1 << 18, dtype=torch.float32)
            c.upload(buf, data, publish=5)
            m = ferry.device.open(buf, device=0)
            a = m.array("float32", (1 << 18,), ready=(buf.fence, 5))
            t = torch.from_dlpack(a)  # the wait goes on torch's current stream
            self.assertEqual(float(t.sum()), float(data.sum()))
            s = torch.cuda.Stream()
            b = m.array(torch.float32, (512, 512), stream=s.cuda_stream, ready=(buf.fence, 5))
            iface = b.__cuda_array_interface__
            self.assertEqual((iface["version"], iface["typestr"], iface["shape"]), (3, "<f4", (512, 512)))
            self.assertEqual(iface["stream"], s.cuda_stream)
            with torch.cuda.stream(s):
                u = torch.as_tensor(b, device="cuda")
                self.assertEqual(u.data_ptr(), m.ptr)
                self.assertEqual(float(u.sum()), float(data.sum()))
            del a, t, b, u
            torch.cuda.synchronize()
            m.close()
            self.assertTrue(m.closed)

    def test_first_launch_of_a_module_after_a_fence_wait_does_not_deadlock(self):
        # In a fresh process (lazy loading on, no module loaded yet): the
        # stream waits on a fence; the host then launches a kernel of a
        # module not loaded yet, which blocks until the wait is satisfied. A
        # producer uploads after 0.5 s: the launch must return then, not hang.
        code = textwrap.dedent(f"""
            import os, sys, time, threading
            sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__)))!r})  # this test's ferry
            import torch, ferry, ferry.device
            torch.cuda.init()
            c = ferry.Client({SOCKET!r}); buf = c.alloc(1 << 20)
            token = buf.grant(ferry.RIGHT_UPLOAD)
            m = ferry.device.open(buf, device=0)
            x = torch.from_dlpack(m.array("uint8", (1 << 20,), ready=(buf.fence, 1)))  # queued: wait for 1
            def produce():
                time.sleep(0.5)
                with ferry.Client({SOCKET!r}) as p:
                    p.wait(p.open(token).upload(bytes([7]) * (1 << 20), publish=1))
            threading.Thread(target=produce).start()
            t0 = time.monotonic()
            y = torch.fft.rfft(x.float())     # a module this process never loaded
            launched = time.monotonic() - t0
            total = int(x.sum())
            print(f"launch returned after {{launched:.3f}} s; sum {{total}}")
            assert total == 7 << 20
        """)
        env = dict(os.environ, CUDA_MODULE_LOADING="LAZY")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
        print(r.stdout.strip(), r.stderr.strip()[-2000:])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


@unittest.skipUnless(CUDA, "needs an NVIDIA GPU and FERRY_SOCKET (a ferryd --backend cuda)")
class CudaDirectTest(unittest.TestCase):
    """Direct uploads: ferry stages, this process's own stream copies."""

    def client(self):
        c = ferry.Client(SOCKET)
        self.addCleanup(c.close)
        return c

    def test_each_kernel_reads_its_own_upload_in_one_reused_tensor(self):
        c = self.client()
        x = torch.empty(1 << 16, dtype=torch.uint8, device="cuda:0")
        cycles = _cycles_per_ms() // 20  # 50 us kernels before each upload
        sums, want = [], []
        for i in range(200):
            src = torch.full((1 << 16,), i % 251, dtype=torch.uint8)
            src[i] = 7
            torch.cuda._sleep(cycles)                      # still reads the old bytes
            t = ferry.device.upload_direct(c, x, src)      # on torch's current stream
            self.assertTrue(t & ferry.DIRECT_TICKET)
            sums.append(x.sum(dtype=torch.int64))          # reads the new ones, no wait appended
            want.append(int(src.sum(dtype=torch.int64)))
        self.assertEqual([int(v) for v in torch.stack(sums).cpu()], want)
        c.flush(timeout=10)

    def test_a_large_upload_goes_through_the_staging_in_pieces(self):
        c = self.client()
        n = 256 << 20  # four times the staging of bench/gpu.sh's ferryd
        src = torch.randint(0, 255, (n,), dtype=torch.uint8)
        x = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        t = ferry.device.upload_direct(c, x, src)
        c.wait(t, timeout=30)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(x.cpu(), src))

    def test_a_held_stream_holds_the_staging_and_nothing_else(self):
        import threading

        from ferry import _cuda

        c = self.client()
        cu = _cuda.driver()
        info = c.info()
        piece = info.slot_bytes
        count = 2 * info.slot_count + 4          # twice the staging
        dst = torch.empty(piece * count, dtype=torch.uint8, device="cuda:0")
        srcs = [torch.full((piece,), i + 1, dtype=torch.uint8) for i in range(count)]
        stream = torch.cuda.Stream()
        dst.sum()  # the kernels' modules loaded before the stream waits (lazy loading)
        ferry.device.register(c, 0)  # registering pages waits for the context's streams
        torch.cuda.synchronize()
        gate = cu.device_word(0, c.timeline().app_value_address)
        cu.wait_value(0, stream.cuda_stream, gate, 1)  # the stream stops here until c.signal(1)
        self.addCleanup(c.signal, 1)  # released whatever fails below, before the client closes
        returned, errors = [], []

        def upload():
            try:
                for i in range(count):
                    ferry.device.upload_direct(c, dst[i * piece:(i + 1) * piece], srcs[i], stream=stream)
                    srcs[i].fill_(0)  # reused at once
                    returned.append(i)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        th = threading.Thread(target=upload)
        th.start()
        deadline = time.monotonic() + 10
        while len(returned) < info.slot_count - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertGreaterEqual(len(returned), info.slot_count - 1)
        self.assertLess(len(returned), count)         # waiting for room only the stream can free
        # Another client goes on through ferryd meanwhile.
        with ferry.Client(SOCKET) as other, other.alloc(1 << 20) as buf:
            other.wait(buf.upload(b"y" * (1 << 20)), timeout=10)
        c.signal(1)
        th.join(30)
        self.assertFalse(th.is_alive())
        self.assertEqual(errors, [])
        stream.synchronize()
        want = torch.cat([torch.full((piece,), i + 1, dtype=torch.uint8) for i in range(count)])
        self.assertTrue(torch.equal(dst.cpu(), want), "a staging piece was reused before the stream copied it")


def _cycles_per_ms():
    """GPU clock cycles in a millisecond, measured (torch.cuda._sleep spins cycles)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    s.record()
    torch.cuda._sleep(10_000_000)
    e.record()
    e.synchronize()
    return int(10_000_000 / s.elapsed_time(e))


if __name__ == "__main__":
    if os.environ.get("FERRY_TEST_HANG_S"):  # where a hung test is, before the harness kills it
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["FERRY_TEST_HANG_S"]), exit=True)
    unittest.main()
