# SPDX-License-Identifier: MIT
"""torch's DataLoader and ferry.torch's, one after the other in one process,
over the cases a user meets: shuffling with a generator, drop_last, dict and
tuple batches, a sample that raises, an early break, a batch's tensor dropped
while an exception is raised, no workers and two. Run as a program (test_torch.py and bench/gpu.sh run it under
`python3 -X faulthandler`): exits 0 when every case matched, with no worker
process left behind; a crash is a signal, a mismatch exit 1.

    interleaved_loaders.py SOCKET DEVICE [ROUNDS] [--views]

DEVICE: "cpu" (the simulated device: batches read back to the host) or
"cuda:N". --views: on "cpu", batches as views of ferry's buffers made through
DLPack (the CUDA path's lifetimes).
"""

import collections
import gc
import multiprocessing
import os
import sys
import time

if not os.environ.get("FERRY_TEST_INSTALLED"):  # else the ferry installed (tests/wheel_test.sh: the wheel's)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
from torch.utils.data import DataLoader as TorchLoader  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

import ferry.torch as ft  # noqa: E402

Pair = collections.namedtuple("Pair", "image label")


class Samples(Dataset):
    """Sample i: a dict or a tuple of tensors whose every byte follows from i;
    sample `bad` raises ValueError."""

    def __init__(self, n=64, kind="dict", bad=None):
        self.n, self.kind, self.bad = n, kind, bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"sample {i} is broken")
        image = torch.arange(3 * 16 * 16, dtype=torch.float32).reshape(3, 16, 16) + i
        if self.kind == "tuple":
            return Pair(image, i)
        return {"image": image, "label": i, "mask": torch.tensor([i % 2 == 0, i % 3 == 0]), "name": f"s{i}"}


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def main():
    socket, device = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else 2
    views = "--views" in sys.argv
    problems = []

    def ferry_loader(ds, **kw):
        loader = ft.DataLoader(ds, device=device, socket=socket, **kw)
        if views:
            loader._ferry_views = True
        return loader

    def both(name, ds, **kw):
        """torch's batches, then ferry's, compared (a seeded generator for each)."""
        seed = kw.pop("seed", None)
        gen = (lambda: {"generator": torch.Generator().manual_seed(seed)}) if seed is not None else (lambda: {})
        theirs = list(TorchLoader(ds, **kw, **gen()))
        ours = list(ferry_loader(ds, **kw, **gen()))
        if len(theirs) != len(ours) or not all(same(a, b) for a, b in zip(theirs, ours)):
            problems.append(f"{name}: ferry's batches differ from torch's")

    def raises(name, ds, **kw):
        """The sample's own exception, from both loaders."""
        for which, make in (("torch", lambda: TorchLoader(ds, **kw)), ("ferry", lambda: ferry_loader(ds, **kw))):
            try:
                for _ in make():
                    pass
                problems.append(f"{name}: {which}'s loader raised nothing")
            except ValueError as e:
                if "is broken" not in str(e):
                    problems.append(f"{name}: {which}'s loader raised {e!r}")
            except Exception as e:  # noqa: BLE001 - the point of the check
                problems.append(f"{name}: {which}'s loader raised {type(e).__name__}: {e} (cause {e.__cause__!r})")

    def breaks(name, ds, **kw):
        for make in (lambda: TorchLoader(ds, **kw), lambda: ferry_loader(ds, **kw)):
            it = iter(make())
            next(it)
            next(it)
            del it

    def dropped_while_raising(name, ds, **kw):
        """A batch's tensor whose last reference goes while an exception is
        being raised (the list passed to a call that fails): the call's own
        exception arrives, and the batch lets go of its buffer."""
        for which, make in (("torch", lambda: TorchLoader(ds, **kw)), ("ferry", lambda: ferry_loader(ds, **kw))):
            for batch in make():
                try:
                    torch.stack([batch.pop("image"), "not a tensor"])
                    problems.append(f"{name}: {which}: torch.stack of a str raised nothing")
                except TypeError:
                    pass
                except Exception as e:  # noqa: BLE001 - the point of the check
                    problems.append(f"{name}: {which}: {type(e).__name__}: {e} in place of the TypeError")

    for r in range(rounds):
        for workers in (0, 2):
            w = {"num_workers": workers}
            both(f"round {r}, {workers} workers, shuffled", Samples(), batch_size=8, shuffle=True, seed=r, **w)
            both(f"round {r}, {workers} workers, drop_last", Samples(61), batch_size=8, drop_last=True, **w)
            both(f"round {r}, {workers} workers, tuples", Samples(kind="tuple"), batch_size=5, **w)
            raises(f"round {r}, {workers} workers, a sample raises", Samples(bad=19), batch_size=4, **w)
            breaks(f"round {r}, {workers} workers, early break", Samples(), batch_size=4, **w)
            dropped_while_raising(f"round {r}, {workers} workers, a tensor dropped while raising", Samples(24),
                                  batch_size=4, **w)
            gc.collect()
    # No worker outlives its loader: torch's shut down at the break, and so must ferry's.
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    left = multiprocessing.active_children()
    if left:
        problems.append(f"{len(left)} worker processes still alive 10 s after the last loader went")
    for p in problems:
        print("interleaved:", p)
    print(f"interleaved: {rounds} rounds on {device}{' (views)' if views else ''}: "
          f"{'ok' if not problems else f'{len(problems)} problems'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
