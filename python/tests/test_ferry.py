# SPDX-License-Identifier: MIT
"""The Python package against a real ferryd on the simulated device.

Run by ctest (python_tests): FERRYD names the daemon binary and
FERRY_LIBRARY the library; the package is imported from python/, or with
FERRY_TEST_INSTALLED=1 the one installed (tests/wheel_test.sh: the wheel's).
"""

import ctypes
import errno
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

if not os.environ.get("FERRY_TEST_INSTALLED"):  # else the ferry installed (tests/wheel_test.sh: the wheel's)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import ferry  # noqa: E402

try:
    import numpy as np
except ImportError:  # the test command installs python3-numpy; without it those tests skip
    np = None


class Daemon:
    def __init__(self, *args, socket=None):
        """ferryd --sim with args, on a fresh socket, or on `socket` (a
        daemon started again where another one was)."""
        self.dir = tempfile.TemporaryDirectory()
        self.socket = socket or os.path.join(self.dir.name, "ferryd.sock")
        env = dict(os.environ, FERRY_SIM_FAST="1")
        self.proc = subprocess.Popen(
            [os.environ["FERRYD"], "--sim", "--socket", self.socket, "--log-level", "warn", *args], env=env
        )
        for _ in range(500):
            if os.path.exists(self.socket):
                try:
                    ferry.Client(self.socket).close()
                    return
                except ferry.Error:
                    pass
            if self.proc.poll() is not None:
                raise RuntimeError("ferryd exited at start")
            time.sleep(0.01)
        raise RuntimeError("ferryd did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.dir.cleanup()


def example_env():
    """The environment of an example run by a test: it imports the ferry this test did."""
    return dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__))))


class FerryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon("--slots", "4", "--slot-size", "65536")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def client(self):
        c = ferry.Client(self.d.socket)
        self.addCleanup(c.close)
        return c

    def test_a_client_shows_under_the_name_it_connected_with(self):
        def names():
            r = subprocess.run([os.environ["FERRYCTL"], "--socket", self.d.socket, "--json", "status"],
                               capture_output=True, text=True, check=True)
            return sorted(c["name"] for c in json.loads(r.stdout)["clients"])

        with ferry.Client(self.d.socket, name="reader") as a, ferry.Client(self.d.socket, name=b"raw\xffbytes"), \
                ferry.Client(self.d.socket, name="l\udcffone surrogate"):
            self.assertEqual(names(), ["l?one surrogate", "raw?bytes", "reader"])
            a.close()
            self.assertEqual(names(), ["l?one surrogate", "raw?bytes"])

    def test_round_trip_of_every_kind_of_buffer(self):
        c = self.client()
        with c.alloc(300_000) as buf:  # larger than a slot: several pieces
            for data in (b"abc" * 100_000, bytearray(range(256)) * 1000, memoryview(b"x" * 4096)):
                c.wait(buf.upload(data))
                self.assertEqual(bytes(buf.download(nbytes=len(data))), bytes(data))
            # at an offset, and into a caller's bytearray
            c.wait(buf.upload(b"hello", offset=1000))
            out = bytearray(5)
            buf.download(out, offset=1000)
            self.assertEqual(out, b"hello")

    def test_the_source_may_change_once_upload_returns(self):
        c = self.client()
        with c.alloc(65536) as buf:
            src = bytearray(b"\x01" * 65536)
            t = buf.upload(src)
            src[:] = b"\x02" * 65536  # before the copy is known done
            c.wait(t)
            self.assertEqual(bytes(buf.download()), b"\x01" * 65536)

    def test_errors_are_exceptions_with_the_errno(self):
        c = self.client()
        with self.assertRaises(ferry.Error) as e:
            c.alloc(0)
        self.assertEqual(e.exception.errno, errno.EINVAL)
        self.assertIn("alloc", str(e.exception))
        with self.assertRaises(ferry.Error) as e:
            c.upload(12345, b"x")  # no such buffer
        self.assertEqual(e.exception.errno, errno.ENOENT)
        with c.alloc(16) as buf:
            with self.assertRaises(ferry.Error) as e:
                buf.upload(b"x" * 17)  # past its end
            self.assertEqual(e.exception.errno, errno.ERANGE)
            self.assertIn("past the end", str(e.exception))
        nobody = os.path.join(self.d.dir.name, "nobody.sock")
        with self.assertRaises(ferry.Error) as e:
            ferry.Client(nobody)
        self.assertEqual(e.exception.errno, errno.ENXIO)  # no daemon: said apart from "no such buffer"
        self.assertIn(nobody, str(e.exception))  # which socket, and a hint
        self.assertIn("is ferryd running", str(e.exception))
        self.assertIsInstance(e.exception, OSError)

    def test_non_contiguous_and_read_only_targets_are_refused_clearly(self):
        c = self.client()
        with c.alloc(4096) as buf:
            with self.assertRaises(ValueError):
                buf.download(b"read-only")
            with self.assertRaises(ValueError):
                buf.upload(memoryview(b"abcdef")[::2])

    def test_closed_client_raises(self):
        c = ferry.Client(self.d.socket)
        c.close()
        with self.assertRaises(ferry.Error) as e:
            c.alloc(16)
        self.assertEqual(e.exception.errno, errno.ENOTCONN)

    def test_close_while_other_threads_upload(self):
        # close() waits for the calls in flight; every later call raises
        # ENOTCONN (it used to free the client under them: SIGSEGV).
        c = ferry.Client(self.d.socket)
        bufs = [c.alloc(100_000) for _ in range(4)]
        self.close_under_four_threads(c, lambda k: c.wait(bufs[k].upload(bytes([k]) * 100_000)))

    def close_under_four_threads(self, c, step):
        """Four threads run step(k) until it raises; c.close() meanwhile. Each
        must end with ENOTCONN (no crash, no other error)."""
        started = threading.Barrier(5)
        outcomes = []

        def run(k):
            started.wait()
            try:
                while True:
                    step(k)
            except ferry.Error as e:
                outcomes.append(e.errno)

        ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        started.wait()
        c.close()
        for t in ts:
            t.join()
        self.assertEqual(outcomes, [errno.ENOTCONN] * 4)

    def test_a_reservation_view_cannot_be_written_after_close(self):
        c = ferry.Client(self.d.socket)
        r = c.reserve(64)
        r.view[0] = 1
        c.close()
        with self.assertRaises(ValueError):  # released, not a write into unmapped memory
            r.view[0] = 2
        with self.assertRaises(ferry.Error):
            r.commit(1)

    @unittest.skipIf(np is None, "needs numpy")
    def test_an_array_on_a_reservation_keeps_its_memory_until_it_goes(self):
        import gc

        def segments():
            with open("/proc/self/maps") as f:
                return sum("ferry-staging" in line for line in f)

        before = segments()
        c = ferry.Client(self.d.socket)
        r = c.reserve(64)
        arr = np.frombuffer(r.view, dtype=np.uint8)
        c.close()
        with self.assertRaises(ValueError):
            r.view[0] = 2
        # The array still writes and reads its own bytes (before: unmapped
        # memory, a SIGSEGV), and the segment stays mapped for it...
        arr[:] = 7
        self.assertEqual(int(arr.sum()), 7 * 64)
        self.assertGreater(segments(), before)
        with self.assertRaises(ferry.Error):
            c.reserve(64)
        # ...until the last array on it goes: then the client disconnects.
        del arr
        gc.collect()
        self.assertEqual(segments(), before)

        # The same when the Reservation object itself is long gone (used up,
        # or never kept): the array alone keeps the memory.
        c = ferry.Client(self.d.socket)
        r = c.reserve(64)
        kept = np.frombuffer(r.view, dtype=np.uint8)
        r.cancel()
        r = c.reserve(64)
        committed = np.frombuffer(r.view, dtype=np.uint8)
        with c.alloc(4096) as buf:
            c.wait(r.commit(buf))
        del r
        gc.collect()
        c.close()
        # (The two may be the same bytes: a cancelled reservation's room is
        # given out again once ferryd has seen it.)
        kept[:] = 1  # before: SIGSEGV
        self.assertEqual(int(kept.sum()), 64)
        committed[:] = 2
        self.assertEqual(int(committed.sum()), 128)
        del kept, committed
        gc.collect()
        self.assertEqual(segments(), before)

    def test_close_while_other_threads_reserve_and_write(self):
        # A reservation made while close() runs is either refused (ENOTCONN)
        # or counted before the segment can go: its view is never unmapped
        # under the writer (it could be, between the reservation and its view).
        for _ in range(5):
            c = ferry.Client(self.d.socket)

            def step(_k, c=c):
                r = c.reserve(4096)
                try:
                    r.view[:] = b"x" * 4096
                except ValueError:
                    pass  # released by close(): refused, not unmapped
                r.cancel()

            self.close_under_four_threads(c, step)

    def test_a_fence_after_close_raises(self):
        c = ferry.Client(self.d.socket)
        buf = c.alloc(4096)
        f = buf.fence
        f.release(3)
        self.assertEqual(f.released, 3)
        c.flush(timeout=float("inf"))  # for ever, as None (it raised OverflowError)
        with self.assertRaises(ValueError):
            c.flush(timeout=float("nan"))
        c.close()
        for touch in (lambda: f.ready, lambda: f.released, lambda: f.failed, lambda: f.release(4)):
            with self.assertRaises(ferry.Error) as e:  # before: a read of unmapped memory
                touch()
            self.assertEqual(e.exception.errno, errno.ENOTCONN)

    def test_grant_and_open_between_clients(self):
        owner, producer = self.client(), self.client()
        with owner.alloc(8192) as buf:
            token = buf.grant(ferry.RIGHT_UPLOAD)
            self.assertEqual(len(token), 32)
            theirs = producer.open(token)
            self.assertEqual(theirs.size, 8192)
            producer.wait(theirs.upload(b"\x07" * 8192))
            self.assertEqual(bytes(buf.download()), b"\x07" * 8192)
            with self.assertRaises(ferry.Error) as e:  # upload right only
                theirs.download()
            self.assertEqual(e.exception.errno, errno.EACCES)
            buf.revoke(token)
            with self.assertRaises(ferry.Error) as e:
                producer.wait(theirs.upload(b"\x08" * 16))
            self.assertEqual(e.exception.errno, errno.EACCES)
            forged = bytes(32)
            with self.assertRaises(ferry.Error) as e:
                producer.open(forged)
            self.assertEqual(e.exception.errno, errno.EACCES)

    def test_export_gives_a_handle_to_open_in_another_context(self):
        c = self.client()
        with c.alloc(4096) as buf:
            c.wait(buf.upload(b"\x2a" * 4096))
            h = buf.export()
            self.assertIsInstance(h, ferry.IpcHandle)
            self.assertEqual(h.nbytes, 4096)
            self.assertEqual(len(h.data), 64)
            if h.kind == 1:  # Level Zero (the simulated device): a descriptor of the memory, ours to close
                self.assertGreaterEqual(h.fd, 0)
                with open(f"/proc/self/fd/{h.fd}", "rb") as f:  # the device memory itself
                    self.assertEqual(f.read(4096), b"\x2a" * 4096)
                os.close(h.fd)
            with self.assertRaises(ferry.Error) as e:
                c.open(bytes(32))  # unrelated: errors still carry errno
            self.assertEqual(e.exception.errno, errno.EACCES)

    def test_upload_after_waits_for_the_value(self):
        c = self.client()
        with c.alloc(64) as buf:
            c.wait(buf.upload(b"old!" * 16))
            t = buf.upload(b"new!" * 16, after=5)
            # Held until the value comes: a wait that would end as soon as it
            # completed ends by its timeout instead.
            with self.assertRaises(ferry.Error) as e:
                c.wait(t, timeout=0.05)
            self.assertEqual(e.exception.errno, errno.ETIMEDOUT)
            self.assertLess(c.completed, t)
            c.signal(5)
            c.wait(t, timeout=5)
            self.assertEqual(bytes(buf.download()), b"new!" * 16)
            tl = c.timeline()
            self.assertNotEqual(tl.device_completed_address, 0)
            self.assertGreater(tl.segment_bytes, 0)

    def test_wait_with_a_timeout(self):
        c = self.client()
        with c.alloc(64) as buf:
            t = buf.upload(b"z" * 64, after=10**12)  # never comes
            with self.assertRaises(ferry.Error) as e:
                c.wait(t, timeout=0.05)
            self.assertEqual(e.exception.errno, errno.ETIMEDOUT)

    def test_direct_upload_through_a_queue_of_the_caller(self):
        # A "queue" that runs each command at once: copies out of ferry's
        # staging, and the device's write of the direct word.
        c = self.client()
        got = bytearray(300_000)  # more than the 256 KiB of staging: pieces recycled
        words = []

        def copy(off, staging, n):
            got[off:off + n] = ctypes.string_at(staging, n)

        def write(word, value):
            words.append(value)
            ctypes.c_uint64.from_address(word).value = value

        src = bytes(range(256)) * (len(got) // 256) + b"x" * (len(got) % 256)
        t = c.upload_direct(src, copy, write, queue=1)
        self.assertTrue(t & ferry.DIRECT_TICKET)
        c.wait(t, timeout=5)
        c.flush(timeout=5)
        self.assertEqual(bytes(got), src)
        self.assertEqual(words, sorted(words))
        self.assertEqual(t & ~ferry.DIRECT_TICKET, words[-1])

        class Refused(Exception):
            pass

        def refuse(off, staging, n):
            raise Refused("the queue is full")

        with self.assertRaises(ferry.Error) as e:
            c.upload_direct(b"abc", refuse, write, queue=1)
        self.assertIsInstance(e.exception.__cause__, Refused)
        self.assertEqual(e.exception.errno, errno.EIO)
        # A refused copy fails that upload only: the client goes on.
        got[:3] = b"..."
        c.wait(c.upload_direct(b"xyz", copy, write, queue=1), timeout=5)
        self.assertEqual(bytes(got[:3]), b"xyz")
        with self.assertRaises(ValueError):
            c.upload_direct(b"", copy, write)

    def test_info_and_version(self):
        c = self.client()
        i = c.info()
        self.assertEqual(i.slot_count, 4)
        self.assertEqual(i.slot_bytes, 65536)
        self.assertEqual(i.backend, "level-zero")
        self.assertEqual(ferry.library_version(), ferry.__version__)

    def test_threads_upload_at_once(self):
        c = self.client()
        bufs = [c.alloc(100_000) for _ in range(4)]
        errors = []

        def run(k):
            try:
                for r in range(20):
                    data = bytes([(k * 31 + r) % 256]) * 100_000
                    c.wait(bufs[k].upload(data))
                    if bytes(bufs[k].download()) != data:
                        errors.append((k, r))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        for b in bufs:
            b.free()

    def test_reserve_write_in_place_commit_or_cancel(self):
        c = self.client()
        with c.alloc(65536) as buf:
            r = c.reserve(4096)
            self.assertEqual(len(r.view), 4096)
            r.view[:] = bytes(range(256)) * 16
            c.wait(r.commit(buf, offset=100))
            self.assertEqual(bytes(buf.download(offset=100, nbytes=4096)), bytes(range(256)) * 16)
            with self.assertRaises(ValueError):
                r.view[0] = 1  # used up: the view is released
            with self.assertRaises(ferry.Error) as e:
                r.commit(buf)
            self.assertEqual(e.exception.errno, errno.EINVAL)
            # leaving the block without a commit gives it up: nothing written, no error
            with self.assertRaises(RuntimeError):
                with c.reserve(4096) as r2:
                    r2.view[:] = b"\xff" * 4096
                    raise RuntimeError("the producer failed")
            c.flush()
            self.assertEqual(bytes(buf.download(offset=100, nbytes=4096)), bytes(range(256)) * 16)
            with self.assertRaises(ferry.Error) as e:
                c.reserve(65537)  # more than a slot
            self.assertEqual(e.exception.errno, errno.EMSGSIZE)
            if np is not None:
                with c.reserve(8 * 1000) as r3:
                    a = np.frombuffer(r3.view, dtype=np.float64)  # held past the commit
                    a[:] = np.arange(1000)
                    c.wait(r3.commit(buf))
                back = np.frombuffer(buf.download(nbytes=8000), dtype=np.float64)
                np.testing.assert_array_equal(back, np.arange(1000))

    @unittest.skipIf(np is None, "numpy is not installed")
    def test_numpy_arrays_without_a_copy(self):
        c = self.client()
        a = np.arange(50_000, dtype=np.float32)
        with c.alloc(a.nbytes) as buf:
            c.wait(buf.upload(a))
            back = np.empty_like(a)
            buf.download(back)
            np.testing.assert_array_equal(a, back)
            # a read-only array uploads; a strided view is refused
            ro = a.copy()
            ro.setflags(write=False)
            c.wait(buf.upload(ro))
            with self.assertRaises(ValueError):
                buf.upload(a[::2])
            # 2-D, C order
            m = np.random.default_rng(1).integers(0, 255, size=(100, 300), dtype=np.uint8)
            c.wait(buf.upload(m))
            self.assertTrue(np.array_equal(np.frombuffer(buf.download(nbytes=m.nbytes), np.uint8).reshape(m.shape), m))


    @unittest.skipIf(np is None, "numpy is not installed")
    def test_the_dataloader_example_verifies_every_batch(self):
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "dataloader.py")
        r = subprocess.run(
            [sys.executable, example, "--socket", self.d.socket, "--workers", "3", "--batches", "30",
             "--batch-bytes", "200000", "--buffers", "4"],
            capture_output=True, text=True, timeout=120, env=example_env(),
        )
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("30 verified, 0 wrong", r.stdout)

    @unittest.skipIf(np is None, "numpy is not installed")
    def test_the_dataloader_example_spreads_batches_over_two_gpus(self):
        second = Daemon("--slots", "4", "--slot-size", "65536")  # a second ferryd, as for a second GPU
        self.addCleanup(second.stop)
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "dataloader.py")
        r = subprocess.run(
            [sys.executable, example, "--socket", self.d.socket, "--socket", second.socket, "--workers", "3",
             "--batches", "31", "--batch-bytes", "100000", "--buffers", "2"],
            capture_output=True, text=True, timeout=120, env=example_env(),
        )
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("31 verified, 0 wrong (GPU 0: 16, GPU 1: 15)", r.stdout)


    # ---- fork safety
    def test_a_client_inherited_across_fork_raises_in_the_child_and_corrupts_nothing(self):
        c = self.client()
        n = 150_000
        with c.alloc(n) as buf:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: the parent's repro, 200 rounds through the inherited client
                os.close(r)
                codes = set()
                for i in range(200):
                    try:
                        buf.upload(bytes([i % 256]) * n)
                    except ferry.Error as e:
                        codes.add(e.errno)
                        msg = str(e)
                    try:
                        buf.download()
                    except ferry.Error as e:
                        codes.add(e.errno)
                ok = codes == {errno.ECHILD} and str(os.getppid()) in msg and "connect" in msg
                c.close()  # only the child's copy of the socket
                try:  # a client of its own works
                    with ferry.Client(self.d.socket) as mine, mine.alloc(1000) as b:
                        mine.wait(b.upload(b"m" * 1000))
                        ok = ok and bytes(b.download()) == b"m" * 1000
                except Exception:  # noqa: BLE001
                    ok = False
                os.write(w, b"1" if ok else b"0")
                os._exit(0)
            os.close(w)
            wrong = 0
            for i in range(200):
                data = bytes([(i * 7 + 1) % 256]) * n
                c.wait(buf.upload(data))
                wrong += bytes(buf.download()) != data
            self.assertEqual(os.read(r, 1), b"1")
            os.close(r)
            os.waitpid(pid, 0)
            self.assertEqual(wrong, 0)
            c.wait(buf.upload(b"after" * 10))  # the parent's connection survived the child
            self.assertEqual(bytes(buf.download(nbytes=50)), b"after" * 10)

    def test_a_forked_child_gets_exceptions_from_inherited_fences_and_views(self):
        c = self.client()
        with c.alloc(4096) as buf:
            fence = buf.fence
            res = c.reserve(1000)
            pid = os.fork()
            if pid == 0:  # the child does not map the parent's staging memory
                ok = True
                try:
                    fence.ready
                    ok = False
                except ferry.Error as e:
                    ok = ok and e.errno == errno.ECHILD and str(os.getppid()) in str(e)
                try:
                    res.view[0] = 1
                    ok = False
                except ValueError:
                    pass
                os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            self.assertTrue(os.WIFEXITED(status), f"the child died of signal {os.WTERMSIG(status)}"
                            if os.WIFSIGNALED(status) else "")
            self.assertEqual(os.WEXITSTATUS(status), 0)
            res.view[:3] = b"abc"  # the parent's view and fence work on
            c.wait(res.commit(buf))
            self.assertEqual(bytes(buf.download(nbytes=3)), b"abc")
            self.assertEqual(fence.released, 0)

    def test_fork_and_spawn_workers_each_with_their_own_client(self):
        import multiprocessing as mp

        for method in ("fork", "spawn"):
            ctx = mp.get_context(method)
            with ctx.Pool(2) as pool:
                results = pool.starmap(_worker_round_trip, [(self.d.socket, k) for k in range(4)])
            self.assertEqual(results, [True] * 4, method)

    # ---- gather, fences, device views
    def test_gathered_upload_with_a_fence_across_clients(self):
        owner, producer = self.client(), self.client()
        with owner.alloc(100_000) as buf:
            fence = buf.fence
            self.assertEqual((fence.ready, fence.released, fence.failed), (0, 0, 0))
            theirs = producer.open(buf.grant(ferry.RIGHT_UPLOAD))
            parts = [b"a" * 1000, bytearray(b"b" * 50_000), memoryview(b"c" * 49_000)]
            producer.upload_gather(theirs, parts, publish=1)  # the producer does not wait
            fence.wait(1, timeout=5)
            self.assertEqual(bytes(buf.download()), b"".join(bytes(p) for p in parts))
            # The next upload is held until the owner released 1.
            t = theirs.upload(b"z" * 100, release_after=1, publish=2)
            with self.assertRaises(ferry.Error) as e:
                producer.wait(t, timeout=0.05)
            self.assertEqual(e.exception.errno, errno.ETIMEDOUT)
            fence.release(1)
            producer.wait(t, timeout=5)
            fence.wait(2, timeout=5)
            self.assertEqual(bytes(buf.download(nbytes=100)), b"z" * 100)
            with self.assertRaises(ValueError):
                theirs.fence  # only the owner sees it
        with self.assertRaises(OverflowError):
            owner.alloc(2**64 + 4096)
        with owner.alloc(4096) as buf, self.assertRaises(OverflowError):
            buf.upload(b"x", offset=2**64 + 128)
        # Each integer is checked before C sees it: ctypes would wrap -1 to
        # the largest value (a signal of 2**64 - 1 would release every hold).
        with owner.alloc(4096) as buf:
            for call, error in [
                (lambda: owner.signal(-1), ValueError),
                (lambda: owner.wait(-1), ValueError),
                (lambda: owner.wait(2**64), OverflowError),
                (lambda: owner.upload(-5, b"x"), ValueError),
                (lambda: owner.download(2**64, nbytes=4), OverflowError),
                (lambda: buf.grant(2**32 + ferry.RIGHT_UPLOAD), OverflowError),
            ]:
                with self.assertRaises(error):
                    call()
            owner.signal(0)  # in range: fine

    def test_device_views_of_a_buffer_on_the_simulated_device(self):
        import ctypes

        import ferry.device
        from ferry import _dlpack

        c = self.client()
        buf = c.alloc(4096)
        data = bytes(range(256)) * 16
        c.wait(buf.upload(data, publish=3))
        m = ferry.device.open(buf)
        self.assertIs(ferry.device.open(buf), m)  # one mapping per buffer and device
        self.assertEqual(m.kind, "level-zero")
        a = m.array("float32", (2, 128), offset=1024, ready=(buf.fence, 3))
        self.assertEqual(a.ptr, m.ptr + 1024)
        self.assertEqual(ctypes.string_at(a.ptr, 1024), data[1024:2048])  # the device memory itself, mapped
        self.assertEqual(a.__dlpack_device__(), (_dlpack.kDLOneAPI, 0))
        self.assertFalse(hasattr(a, "__cuda_array_interface__"))
        with self.assertRaises(ValueError):
            m.array("float32", (2000,), offset=1024)  # past the end
        # The capsule: a DLManagedTensor viewing the same memory.
        cap = a.__dlpack__()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        mt = _dlpack.DLManagedTensor.from_address(get(cap, b"dltensor"))
        self.assertEqual(mt.dl_tensor.data, a.ptr)
        self.assertEqual((mt.dl_tensor.ndim, mt.dl_tensor.shape[0], mt.dl_tensor.shape[1]), (2, 2, 128))
        self.assertEqual((mt.dl_tensor.strides[0], mt.dl_tensor.strides[1]), (128, 1))  # C order, in elements
        self.assertEqual((mt.dl_tensor.dtype.code, mt.dl_tensor.dtype.bits), (2, 32))
        self.assertEqual(mt.dl_tensor.device.device_type, _dlpack.kDLOneAPI)
        # A consumer takes it (renames it) and later calls the deleter: the
        # array lives until then.
        rename = ctypes.pythonapi.PyCapsule_SetName
        rename.argtypes = [ctypes.py_object, ctypes.c_char_p]
        used = ctypes.create_string_buffer(b"used_dltensor")
        rename(cap, used)
        del cap, a
        self.assertEqual(m.views, 1)
        with self.assertRaises(BufferError):
            buf.free()  # refused while a view lives
        m.close()  # deferred
        self.assertFalse(m.closed)
        mt.deleter(ctypes.pointer(mt))
        self.assertEqual(m.views, 0)
        self.assertTrue(m.closed)
        self.assertEqual(_dlpack.live(), 0)
        buf.free()


def _worker_round_trip(socket, k):
    """A pool worker (fork or spawn) with a client of its own."""
    with ferry.Client(socket) as c, c.alloc(70_000) as b:
        data = bytes([k + 1]) * 70_000
        c.wait(b.upload(data))
        return bytes(b.download()) == data


if __name__ == "__main__":
    unittest.main()
