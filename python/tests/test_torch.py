# SPDX-License-Identifier: MIT
"""ferry.torch.DataLoader against torch's own DataLoader, on the simulated
device (device="cpu": each batch is read back from its device buffer).

Run by ctest (torch_tests) with Debian's python3-torch; FERRYD, FERRYCTL and
FERRY_LIBRARY name the build's programs. Skipped without torch.
"""

import collections
import gc
import json
import os
import random
import subprocess
import sys
import threading
import time
import unittest
from unittest import mock

if not os.environ.get("FERRY_TEST_INSTALLED"):  # else the ferry installed (tests/wheel_test.sh: the wheel's)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    from torch.utils.data import DataLoader as TorchLoader
    from torch.utils.data import Dataset, IterableDataset, get_worker_info
except ImportError:  # the test command installs python3-torch; without it these tests skip
    torch = None

try:
    import numpy as np
except ImportError:
    np = None

import ferry  # noqa: E402
from test_ferry import Daemon  # noqa: E402

if torch is not None:
    import ferry.torch as ft
    from ferry.torch import _pool as ft_pool  # the trainer's side, for the tests that reach into it

Point = collections.namedtuple("Point", "x y")


# Datasets and collate functions at module level: spawn-started workers take them by name.
class Mixed(Dataset if torch else object):
    """Samples of every shape default_collate handles: tensors, numpy arrays,
    ints, floats, strings, in dicts, tuples, lists and namedtuples; random
    augmentation from torch, numpy and random (each worker seeded as torch seeds it)."""

    def __init__(self, n=41):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        noise = torch.rand(2) + float(np.random.rand() if np is not None else 0) + random.random()
        return {
            "image": torch.arange(i * 300, i * 300 + 300, dtype=torch.float32).reshape(3, 10, 10),
            "mask": torch.tensor([i % 2 == 0, i % 3 == 0]),
            "label": i,
            "weight": i / 7,
            "name": f"sample-{i}",
            "pair": (torch.full((4,), i, dtype=torch.int16), [np.int64(i), np.ones(3, dtype=np.float64) * i]
                     if np is not None else [i, i]),
            "point": Point(torch.tensor(float(i)), torch.tensor([i, -i])),
            "noise": noise,
        }


class Big(Dataset if torch else object):
    """Batches larger than a slot and than the whole staging area."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return torch.arange(i, i + 150_000, dtype=torch.int64)  # 1.2 MB a sample


class Shards(IterableDataset if torch else object):
    """An iterable dataset each worker shards by get_worker_info(), of uneven lengths."""

    def __iter__(self):
        info = get_worker_info()
        w, n = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(w, 23 + 5 * w, n):
            yield torch.tensor([i, i * i]), f"s{i}"


class Growing(Dataset if torch else object):
    """Batches that grow (each larger than every buffer before it), of
    complex conjugate views, in a defaultdict: the loader's buffers get
    larger, the old ones go, and the values are the values."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        n = 4000 * (i // 8 + 1)
        z = torch.complex(torch.arange(n, dtype=torch.float32), torch.full((n,), float(i)))
        d = collections.defaultdict(list)
        d["z"] = z.conj()  # a view whose bytes are not its values
        d["neg"] = torch.arange(4, dtype=torch.float32)._neg_view() if hasattr(torch.Tensor, "_neg_view") else -torch.arange(4.0)
        return d


class Fails(Dataset if torch else object):
    def __len__(self):
        return 20

    def __getitem__(self, i):
        if i == 13:
            raise KeyError(f"sample {i} is broken")
        return torch.tensor([i])


class Slow(Dataset if torch else object):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(1.5)
        return torch.tensor([i])


def sum_and_names(samples):
    """A collate_fn of the user's: a tensor it makes, plus strings."""
    return {"sum": torch.stack([s["image"].sum(0) for s in samples]), "names": [s["name"] for s in samples]}


def same(a, b):
    """Equal values, dtypes, shapes and container types, all the way down."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
class LoaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Small slots: batches of a few hundred KiB already span several.
        cls.d = Daemon("--slots", "4", "--slot-size", "65536")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def status(self):
        r = subprocess.run([os.environ["FERRYCTL"], "--socket", self.d.socket, "--json", "status"],
                           capture_output=True, text=True, check=True)
        return json.loads(r.stdout)

    def pids(self):
        return {c["pid"] for c in self.status()["clients"]}

    def assert_nothing_held_by_loaders(self):
        """No worker process left, and ferryd holds no client of this process or its workers."""
        import multiprocessing

        gc.collect()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # a terminated worker takes a moment to go
            st = self.status()
            if not st["clients"] and st["held"]["buffers"] == 0 and not multiprocessing.active_children():
                break
            time.sleep(0.02)
        st = self.status()
        self.assertEqual(st["clients"], [], "clients left in ferryd")
        self.assertEqual(st["held"]["buffers"], 0)
        self.assertEqual(multiprocessing.active_children(), [])

    def compare(self, dataset, seed=7, **kw):
        """ferry's batches equal torch's, element by element, for the same arguments."""

        def run(make):
            # Without workers the dataset draws from this process's generators.
            torch.manual_seed(seed)
            random.seed(seed)
            if np is not None:
                np.random.seed(seed)
            return list(make(dataset, generator=torch.Generator().manual_seed(seed), **kw))

        ours = run(lambda *a, **k: ft.DataLoader(*a, device="cpu", socket=self.d.socket, **k))
        theirs = run(TorchLoader)
        self.assertEqual(len(ours), len(theirs))
        for i, (a, b) in enumerate(zip(theirs, ours)):
            self.assertTrue(same(a, b), f"batch {i} differs: torch {a!r}, ferry {b!r}")
        return ours

    def test_torchs_loader_and_ferrys_interleaved_in_one_process(self):
        # Every equality case, a sample that raises, an early break and a
        # batch's tensor dropped while an exception is raised, torch's loader
        # and ferry's one after the other, under faulthandler: a crash is a
        # signal and a traceback, a mismatch a line of its own.
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interleaved_loaders.py")
        for extra in ([], ["--views"]):
            with self.subTest(views=bool(extra)):
                r = subprocess.run([sys.executable, "-X", "faulthandler", script, self.d.socket, "cpu", "1", *extra],
                                   capture_output=True, text=True, timeout=240)
                lines = [ln for ln in r.stdout.splitlines() if ln.startswith("interleaved:")]
                self.assertEqual(r.returncode, 0, "\n".join(lines) + "\n" + r.stderr[-3000:])
        self.assert_nothing_held_by_loaders()

    def test_batches_equal_torchs_map_style_shuffled_workers_0_2_4(self):
        for workers in (0, 2, 4):
            with self.subTest(workers=workers):
                self.compare(Mixed(), batch_size=5, shuffle=True, num_workers=workers)
        self.assert_nothing_held_by_loaders()

    def test_drop_last_both_ways_and_spawned_workers(self):
        for drop_last in (False, True):
            with self.subTest(drop_last=drop_last):
                out = self.compare(Mixed(), batch_size=6, shuffle=True, drop_last=drop_last, num_workers=2,
                                   multiprocessing_context="spawn")
                self.assertEqual(len(out), 41 // 6 + (0 if drop_last else 1))
        self.assert_nothing_held_by_loaders()

    def test_a_collate_fn_of_the_users_and_no_batching(self):
        self.compare(Mixed(), batch_size=4, collate_fn=sum_and_names, num_workers=2,
                     multiprocessing_context="fork")
        self.compare(Mixed(17), batch_size=None, num_workers=2)  # default_convert, one sample at a time
        self.assert_nothing_held_by_loaders()

    def test_an_iterable_dataset_workers_0_and_3(self):
        for workers in (0, 3):
            with self.subTest(workers=workers):
                self.compare(Shards(), batch_size=4, num_workers=workers)
        self.assert_nothing_held_by_loaders()

    def test_batches_larger_than_the_staging_area(self):
        # 3 samples of 1.2 MB: 3.6 MB a batch against 256 KiB of staging.
        out = self.compare(Big(), batch_size=3, num_workers=2, prefetch_factor=3)
        self.assertEqual(out[-1].shape, (3, 150_000))
        self.assert_nothing_held_by_loaders()

    def test_four_batches_per_worker_in_flight_unless_told(self):
        # ferry.torch's one default of its own (DataLoader's documentation):
        # prefetch_factor 4 with workers; a given one is kept; none without workers.
        for kw, depth in ((dict(num_workers=2), 4), (dict(num_workers=2, prefetch_factor=3), 3)):
            with self.subTest(**kw):
                loader = ft.DataLoader(Mixed(), batch_size=2, device="cpu", socket=self.d.socket, **kw)
                self.assertEqual(loader.prefetch_factor, depth)
                it = iter(loader)
                self.assertEqual(it._send_idx, 2 * depth)  # the tasks torch sent out at the start
                self.assertEqual(len(list(it)), len(loader))
                del it
        self.assertEqual(ft.DataLoader(Mixed(), device="cpu", socket=self.d.socket).prefetch_factor,
                         TorchLoader(Mixed()).prefetch_factor)
        self.assert_nothing_held_by_loaders()

    def test_workers_are_named_for_ferryctl(self):
        kw = dict(batch_size=7, num_workers=2, persistent_workers=True)
        ours = ft.DataLoader(Mixed(), device="cpu", socket=self.d.socket, **kw)
        it = iter(ours)
        next(it)
        deadline = time.monotonic() + 30
        while True:  # the second worker connects with its first upload
            clients = self.status()["clients"]
            names = sorted(c["name"] for c in clients if c["pid"] != os.getpid())
            if len(names) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        self.assertEqual(names, ["torch worker 0", "torch worker 1"])
        self.assertIn("torch trainer", [c["name"] for c in clients if c["pid"] == os.getpid()])
        self.assertNotIn("FERRY_CLIENT_NAME", os.environ)  # the trainer's environment is its own
        del it, ours
        self.assert_nothing_held_by_loaders()

    def test_persistent_workers_over_two_epochs(self):
        kw = dict(batch_size=7, shuffle=True, num_workers=2, persistent_workers=True)
        ours = ft.DataLoader(Mixed(), generator=torch.Generator().manual_seed(3), device="cpu",
                             socket=self.d.socket, **kw)
        theirs = TorchLoader(Mixed(), generator=torch.Generator().manual_seed(3), **kw)
        for epoch in range(2):
            a, b = list(theirs), list(ours)
            self.assertTrue(all(same(x, y) for x, y in zip(a, b)) and len(a) == len(b), f"epoch {epoch}")
        del ours, theirs, a, b
        self.assert_nothing_held_by_loaders()

    def test_a_worker_error_is_raised_in_the_trainer_with_the_workers_traceback(self):
        for workers in (0, 2):
            with self.subTest(workers=workers):
                loader = ft.DataLoader(Fails(), batch_size=2, num_workers=workers, device="cpu", socket=self.d.socket)
                got = []
                with self.assertRaises(KeyError) as e:
                    for b in loader:
                        got.append(b)
                self.assertEqual(len(got), 6)  # batches 0..5; batch 6 holds sample 13
                if workers:
                    self.assertIn("in DataLoader worker process", str(e.exception))
                self.assertIn("sample 13 is broken", str(e.exception))
                del got, b
        self.assert_nothing_held_by_loaders()

    def test_a_break_or_a_timeout_shuts_everything_down(self):
        loader = ft.DataLoader(Mixed(), batch_size=3, num_workers=3, device="cpu", socket=self.d.socket)
        for i, batch in enumerate(loader):
            if i == 2:
                self.assertGreater(len(self.pids()), 1)  # the trainer and its workers are ferryd's clients
                break
        del batch
        self.assert_nothing_held_by_loaders()
        with self.assertRaises(RuntimeError) as e:
            next(iter(ft.DataLoader(Slow(), batch_size=1, num_workers=1, timeout=0.3, device="cpu",
                                    socket=self.d.socket)))
        self.assertIn("timed out", str(e.exception))
        del e  # its traceback holds the iterator, as torch's would
        self.assert_nothing_held_by_loaders()

    def test_fork_workers_inherit_the_trainers_client_without_harm(self):
        # A ferry.Client made before the loader forks its workers: they never
        # use it, and it keeps working in the trainer.
        with ferry.Client(self.d.socket) as c, c.alloc(4096) as buf:
            self.compare(Mixed(), batch_size=8, num_workers=2, multiprocessing_context="fork")
            c.wait(buf.upload(b"q" * 4096))
            self.assertEqual(bytes(buf.download()), b"q" * 4096)
        self.assert_nothing_held_by_loaders()

    def test_views_of_the_buffers_recycled_after_their_tensors_go(self):
        # The CUDA path's lifetimes on the simulated device: batches are views
        # of the device buffers (its memory is host memory), a buffer goes back
        # to the workers once a batch's last tensor goes (its fence released),
        # and the workers' next uploads into it are held by ferryd until then.
        def views(**kw):
            loader = ft.DataLoader(Mixed(200), socket=self.d.socket, device="cpu", **kw)
            loader._ferry_views = True
            return loader

        kw = dict(batch_size=4, shuffle=True, num_workers=3)
        theirs = list(TorchLoader(Mixed(200), generator=torch.Generator().manual_seed(5), **kw))
        it = iter(views(generator=torch.Generator().manual_seed(5), **kw))
        wrong, slots = 0, set()
        for i, b in enumerate(it):
            mapped = [(s.mapping.ptr, s.mapping.nbytes) for s in it._ferry.slots.values() if s.mapping is not None]
            p = b["image"].data_ptr()
            self.assertTrue(any(a <= p < a + n for a, n in mapped), "not a view of a ferry buffer")
            slots.update(it._ferry.slots)
            wrong += not same(theirs[i], b)
        self.assertEqual(wrong, 0)
        self.assertLess(len(slots), len(theirs) // 2)  # buffers were reused
        del b, it
        # Kept batches keep their buffers, and give them back when they go.
        kept = list(views(batch_size=8, num_workers=2))
        self.assertEqual([int(b["label"][0]) for b in kept], list(range(0, 200, 8)))
        self.assertGreater(self.status()["held"]["buffers"], 0)
        del kept
        self.assert_nothing_held_by_loaders()

    def test_short_jobs_one_after_another_leave_nothing_charged(self):
        # A sweep's short jobs against one ferryd (issue 52): each a new loader
        # whose batches are read in place (the CUDA path's slots, memory of the
        # trainer's own context that ferryd maps while they live), some
        # batches taken, the loader dropped. With a bound of 2 MiB of device
        # memory a user, exports of ferryd's memory (charged until ferryd
        # restarts) were refused from the 4th job on; imports are charged only
        # while mapped, and every count of the user is back to 0 after each.
        d = Daemon("--slots", "4", "--slot-size", "65536", "--user-memory", str(2 << 20))
        self.addCleanup(d.stop)
        for job in range(12):
            loader = ft.DataLoader(Mixed(64), batch_size=8, num_workers=2, device="cpu", socket=d.socket)
            loader._ferry_views = True
            it = iter(loader)
            for i in range(3):
                b = next(it)
                self.assertEqual(int(b["label"][0]), 8 * i, f"job {job}")
            del b, it, loader
            gc.collect()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # the workers take a moment to go
                users = self.status_of(d)["users"]
                if all(u["clients"] == 0 for u in users):
                    break
                time.sleep(0.02)
            for u in self.status_of(d)["users"]:
                held = {k: u[k] for k in ("clients", "buffers", "device_bytes", "imports", "opens", "grants",
                                          "staging_bytes", "exported_bytes", "exports_kept_bytes")}
                self.assertEqual(held, dict.fromkeys(held, 0), f"after job {job}")

    def test_a_ferryd_restarted_under_a_running_loader(self):
        # As `systemctl restart` during a training run: ferryd stops (and
        # drains) while the loop goes on, a new one starts on the same socket.
        # Every batch is torch's, element by element; batches of the old
        # ferryd that were on their way arrive, those made while none
        # listened travel as torch's loader sends them, and the loader is
        # ferryd's client again once the new one listens. The loop goes on
        # through the drain; from batch 30 it waits for the new ferryd to
        # listen (on a busy machine the 100 batches can be through before
        # it does), and the trainer tries a connect at every task, so the
        # batches after that are the new ferryd's to take.
        for name in ("_CHECK_S", "_RETRY_S"):
            patched = mock.patch.object(ft_pool, name, 0)
            patched.start()
            self.addCleanup(patched.stop)
        first = Daemon("--slots", "4", "--slot-size", "65536")
        kw = dict(batch_size=4, num_workers=2)
        theirs = list(TorchLoader(Mixed(400), generator=torch.Generator().manual_seed(5), **kw))
        loader = ft.DataLoader(Mixed(400), device="cpu", socket=first.socket,
                               generator=torch.Generator().manual_seed(5), **kw)
        loader._ferry_views = True
        it = iter(loader)
        wrong, restarted, second, back = 0, None, None, False

        def restart():
            nonlocal second
            first.proc.terminate()  # SIGTERM: drains, then goes
            first.proc.wait(30)
            second = Daemon("--slots", "4", "--slot-size", "65536", socket=first.socket)

        try:
            for i, b in enumerate(it):
                wrong += not same(theirs[i], b)
                if i == 10:
                    restarted = threading.Thread(target=restart)
                    restarted.start()
                if i == 30:
                    restarted.join()
                if not back and restarted is not None and not restarted.is_alive() and second is not None:
                    # The loader is the new ferryd's client: trainer and workers.
                    names = {c["name"] for c in self.status_of(second)["clients"]}
                    back = "torch trainer" in names and any(n.startswith("torch worker") for n in names)
            self.assertEqual(i + 1, len(theirs))
            self.assertEqual(wrong, 0)
            self.assertTrue(back, "the loader never connected to the new ferryd")
            del b, it, loader
            gc.collect()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.status_of(second)["clients"]:
                time.sleep(0.02)
            self.assertEqual(self.status_of(second)["clients"], [])
            self.assertEqual(self.status_of(second)["held"]["buffers"], 0)
        finally:
            if restarted is not None:
                restarted.join()
            if second is not None:
                second.stop()
            first.dir.cleanup()

    def test_a_ferryd_killed_under_a_running_loader_costs_an_error_at_most_never_a_hang(self):
        # Killed, ferryd drains nothing and writes no fence: batches on their
        # way may never land. The loader says so (ferry.Error or
        # RuntimeError) or goes on (torch's path for what comes after); it
        # never waits for ever on a fence nobody will write.
        first = Daemon("--slots", "4", "--slot-size", "65536")
        self.addCleanup(first.dir.cleanup)
        loader = ft.DataLoader(Mixed(400), batch_size=4, num_workers=2, device="cpu", socket=first.socket)
        loader._ferry_views = True
        outcome = {}

        def run():
            n = 0
            try:
                for b in loader:
                    n += 1
                    if n == 10:
                        first.proc.kill()
                        first.proc.wait(30)
                outcome["done"] = n
            except (ferry.Error, RuntimeError) as e:
                outcome["error"] = e

        t = threading.Thread(target=run)
        t.start()
        t.join(120)
        self.assertFalse(t.is_alive(), "the loader hung after its ferryd was killed")
        self.assertTrue(outcome.get("done") == 100 or "error" in outcome, outcome)

    def test_a_loader_made_while_its_ferryd_restarts_waits_for_it(self):
        # The socket's folder is there, the socket not (yet): the loader's
        # first connect waits for the next ferryd, a little.
        first = Daemon("--slots", "4", "--slot-size", "65536")
        first.proc.terminate()
        first.proc.wait(30)
        self.assertFalse(os.path.exists(first.socket))
        got = []
        t = threading.Thread(target=lambda: got.extend(
            ft.DataLoader(Mixed(16), batch_size=4, num_workers=1, device="cpu", socket=first.socket)))
        t.start()
        second = Daemon("--slots", "4", "--slot-size", "65536", socket=first.socket)
        try:
            t.join(60)
            self.assertEqual([int(b["label"][0]) for b in got], [0, 4, 8, 12])
        finally:
            second.stop()
            first.dir.cleanup()

    def status_of(self, d):
        r = subprocess.run([os.environ["FERRYCTL"], "--socket", d.socket, "--json", "status"],
                           capture_output=True, text=True, check=True)
        return json.loads(r.stdout)

    def test_growing_batches_of_conjugate_views_in_a_defaultdict(self):
        # Without workers torch's loader takes them; with workers torch 1.13's
        # cannot (its collate puts a conjugate view in shared memory), so there
        # the batches are checked against default_collate itself.
        self.compare(Growing(), batch_size=8, num_workers=0)
        ds = Growing()
        want = [torch.utils.data.default_collate([ds[i] for i in range(k, k + 8)]) for k in range(0, 48, 8)]
        got = list(ft.DataLoader(ds, batch_size=8, num_workers=2, device="cpu", socket=self.d.socket))
        self.assertEqual(len(got), len(want))
        for i, (a, b) in enumerate(zip(want, got)):
            self.assertTrue(same(a, b), f"batch {i}")
            self.assertFalse(b["z"].is_conj())
        self.assert_nothing_held_by_loaders()

    def test_persistent_workers_broken_off_every_epoch_hold_no_more_buffers(self):
        # Batches that came but were never delivered (the user broke off), and
        # tasks an exhausted iterable never answered, are reclaimed at the next
        # epoch: the buffers do not pile up.
        for ds, kw in ((Mixed(200), dict(batch_size=4, shuffle=True)), (Shards(), dict(batch_size=2))):
            loader = ft.DataLoader(ds, num_workers=3, persistent_workers=True, device="cpu", socket=self.d.socket,
                                   prefetch_factor=2, **kw)
            held = []
            for epoch in range(5):
                for i, b in enumerate(loader):
                    if i == 2 and isinstance(ds, Mixed):
                        break
                del b
                gc.collect()
                held.append(self.status()["held"]["buffers"])
            self.assertLessEqual(max(held), 3 * 2 + 3 + 1, f"{type(ds).__name__}: buffers held per epoch {held}")
            self.assertLessEqual(held[-1], held[1] + 1, f"{type(ds).__name__}: buffers held per epoch {held}")
            del loader
        self.assert_nothing_held_by_loaders()

    def test_the_iterator_goes_with_its_last_reference(self):
        # Not left to the cyclic collector, which could run its shutdown
        # later in whatever process is forked meanwhile (another loader's worker).
        import weakref

        for workers in (0, 2):
            gc.disable()
            try:
                it = iter(ft.DataLoader(Mixed(), batch_size=4, num_workers=workers, device="cpu", socket=self.d.socket))
                b = next(it)
                r = weakref.ref(it)
                del it, b
                self.assertIsNone(r(), f"workers={workers}: the iterator is in a reference cycle")
            finally:
                gc.enable()
        self.assert_nothing_held_by_loaders()
        # A loader of torch's right after one of ferry's, forked from this process, works.
        self.assertEqual(len(list(TorchLoader(Mixed(), batch_size=8, num_workers=2))), 6)

    def test_three_changed_lines(self):
        # The README's example, as a user would change torch's loader.
        from ferry.torch import DataLoader  # 1: the import

        loader = DataLoader(Mixed(), batch_size=4, shuffle=True, num_workers=2,
                            device="cpu",            # 2: where batches go
                            socket=self.d.socket)    # 3: the daemon
        n = sum(b["image"].shape[0] for b in loader)
        self.assertEqual(n, 41)
        self.assertIsInstance(loader, torch.utils.data.DataLoader)

    def test_a_loader_rebuilt_from_its_constructor_arguments_keeps_them(self):
        # As PyTorch Lightning re-creates a loader (predict, ddp): every
        # parameter of the constructor's signature (and torch's, behind
        # **kwargs) read back from the instance attribute of that name.
        import inspect

        loader = ft.DataLoader(Mixed(), batch_size=4, num_workers=2, device="cpu", socket=self.d.socket)
        params = dict(inspect.signature(torch.utils.data.DataLoader.__init__).parameters)
        params.update(inspect.signature(type(loader).__init__).parameters)
        kw = {k: v for k, v in vars(loader).items()
              if not k.startswith("_") and k in params and k not in ("sampler", "batch_sampler")}
        self.assertEqual(kw["socket"], self.d.socket)
        saved = os.environ.pop("FERRY_SOCKET", None)
        try:
            clone = type(loader)(**kw)
            self.assertEqual(sum(b["image"].shape[0] for b in clone), 41)
        finally:
            if saved is not None:
                os.environ["FERRY_SOCKET"] = saved
        self.assertEqual(clone.device, loader.device)

    def test_a_loader_without_a_daemon_raises_once_and_cleanly(self):
        unraisable = []
        old, sys.unraisablehook = sys.unraisablehook, unraisable.append
        try:
            loader = ft.DataLoader(Mixed(), batch_size=4, num_workers=2, device="cpu", socket="/nonexistent/ferry.sock")
            with self.assertRaises(ferry.Error) as e:
                iter(loader)
            self.assertIn("/nonexistent/ferry.sock", str(e.exception))
            del loader
            gc.collect()
        finally:
            sys.unraisablehook = old
        self.assertEqual([repr(u.exc_value) for u in unraisable], [])



@unittest.skipIf(torch is None, "torch is not installed (python3-torch)")
class ReleaseTest(unittest.TestCase):
    """done_with, the release of a batch's buffer, when the device write of the
    fence's released word cannot be queued (a CUDA error, an interrupt)."""

    class Fence:
        released_address = 0x1000

        def __init__(self, fails=False):
            self.fails, self.released = fails, []

        def release(self, value):
            if self.fails:
                raise OSError("fence gone")
            self.released.append(value)

    class Stream:
        def __init__(self):
            self.synced = 0

        def synchronize(self):
            self.synced += 1

    def pool_and_slot(self, fence):
        pool = object.__new__(ft_pool._Pool)
        pool.lock, pool.closing, pool.capacity, pool.slots = threading.RLock(), False, 4096, {}
        pool.forgotten, pool.pid, pool.next_slot = [], os.getpid(), 1

        def fail(*args):
            raise RuntimeError("cuStreamWriteValue64: an error")
        pool._release_on_device = fail
        slot = object.__new__(ft_pool._Slot)
        slot.id, slot.capacity, slot.fence, slot.released = 1, 4096, fence, 3
        slot.state, slot.life, slot.retired, slot.mapping = "out", None, False, None
        pool.slots[1] = slot
        return pool, slot

    def test_a_release_the_device_cannot_take_waits_on_the_host(self):
        pool, slot = self.pool_and_slot(self.Fence())
        delivered, recorded = self.Stream(), self.Stream()
        pool.done_with(slot, 5, delivered, os.getpid(), {("cuda:0", 7): recorded})
        # Before: the slot was free with released still 3, and the next upload
        # into it was not held while the streams still read the batch.
        self.assertEqual((delivered.synced, recorded.synced), (1, 1))
        self.assertEqual(slot.fence.released, [5])
        self.assertEqual((slot.state, slot.released), ("free", 5))

    def test_a_release_that_cannot_be_ordered_takes_the_buffer_out_of_use(self):
        pool, slot = self.pool_and_slot(self.Fence(fails=True))
        with self.assertWarns(RuntimeWarning):
            pool.done_with(slot, 5, self.Stream(), os.getpid(), {})
        self.assertEqual(slot.state, "dead")
        made = []
        real = ft_pool._Slot
        ft_pool._Slot = lambda p, ident, cap: made.append(ident) or real.__new__(real)
        try:
            self.assertIsNot(pool._slot(4096), slot)  # a new buffer, not this one
        finally:
            ft_pool._Slot = real
        self.assertEqual(made, [pool.next_slot])

if __name__ == "__main__":
    unittest.main()
