# SPDX-License-Identifier: MIT
"""ferry.torch.DataLoader: torch.utils.data.DataLoader, with every batch
already on the device.

    from ferry.torch import DataLoader                       # was: from torch.utils.data import DataLoader
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=8,
                        device="cuda", socket="/run/ferry/ferryd-0.sock")   # the two new arguments
    for images, labels in loader:                            # CUDA tensors, ordered on the current stream
        ...

Same constructor, same batches in the same order as torch's DataLoader for
the same dataset, sampler, generator and collate_fn: it is torch's own
iterator (sampling, worker seeding, get_worker_info(), worker errors re-raised
with their traceback, iterable datasets, persistent workers, timeouts,
shutdown), with one step changed. A worker (which has no GPU context) does
not put its batch into shared memory for the trainer to pin and copy: it
uploads it through ferryd into a device buffer the trainer owns and granted
it, and sends the trainer only the batch's layout. With torch's default
collate_fn the samples go straight from where they lie into ferry's pinned
staging memory (no stacked copy is made first); with a collate_fn of yours,
from what it returns. Tensors in dicts, lists, tuples and namedtuples are
moved; everything else (strings, numbers that are not collated, objects of
your own) travels as torch's DataLoader sends it.

On the device, no host waits: the trainer's current stream waits for the
batch's copies (the upload publishes a value into the buffer's fence, see
ferry.Client.upload_gather), and a buffer is reused only once that stream is
done with the batch that was in it: when the batch's last tensor goes, a
write of the fence's released word is queued on the stream the batch was
delivered on (after the work queued so far on the streams that
ferry.torch.record_stream named), and the worker's next upload into that
buffer is held by ferryd until the stream gets there. As with torch's
caching allocator, use a batch on another stream only after that stream
waited for this one (stream.wait_stream), and name it with record_stream.
Batches you keep keep their device memory; the loader allocates more
buffers as it needs them.

device="cpu" (a host without a GPU torch can use, the simulated device in
ferry's tests): each batch is read back from its device buffer into CPU
tensors, by the same workers, staging, fences and recycling; only the last
step differs.

pin_memory is accepted and ignored (ferry's staging memory is pinned).
Batches of any size work: larger than a slot and than the staging area, the
upload streams through it. The first batch of an iteration whose size the
loader cannot know yet is collated by its worker and uploaded by the trainer
(one batch's worth of the trainer's CPU); then buffers of that size (more
when a larger batch comes) are handed to the workers.

CUDA's lazy module loading (the default): a context's first launch of a
module blocks the host while any stream of the context waits on memory. The
loader queues a batch's wait only once the batch's upload is with ferryd and
held on nothing the host has still to do, so such a launch waits at most for
that upload, never for ever.

Where a batch waits: with FERRY_TORCH_ACCOUNT=1 in the environment, each
iterator keeps, per delivered batch, when its worker got the task, began and
ended the collate, and had staged the batch, and when the trainer received
and delivered it, how long it was blocked for it, and whether the copy had
landed by then (`iterator._ferry.account`, a list of dicts of
time.monotonic_ns() values). bench/torch_loader_bench.py --account reads it.
"""

import os
import sys

try:
    import torch
except ImportError as e:  # ferry itself needs no torch; this package is torch's loader
    raise ImportError(
        f"ferry.torch needs PyTorch in this environment ({sys.executable}): pip install torch, "
        "or use ferry without .torch"
    ) from e
import torch.utils.data as _data

from ._iter import _MultiIter, _SingleIter
from ._pool import record_stream

__all__ = ["DataLoader", "record_stream"]


class DataLoader(_data.DataLoader):
    """torch.utils.data.DataLoader whose batches arrive on `device` through
    ferryd (see the module's documentation). Every argument of torch's
    DataLoader means what it means there (pin_memory is accepted and
    ignored), plus:

    device: where batches go: a CUDA device (default: torch's current one),
        the GPU ferryd serves; or "cpu", where each batch is read back from
        its device buffer (a host whose torch has no GPU).
    socket: ferryd's socket (default $FERRY_SOCKET, else /run/ferry/ferryd-0.sock).

    One default differs: with workers and no prefetch_factor given, each
    worker has PREFETCH_FACTOR (4) batches in flight, not torch's 2. Batches
    are delivered in order, so a worker whose batches are done waits while
    the trainer waits for another's: on the H200 with 16 workers, 2 in
    flight left them idle 11-20% of their time and the loader made 0.86 of
    the rate its workers make samples at; 4 in flight, 2-6% and 0.96
    (docs/BENCHMARKS.md, bench/torch_account.sh). A batch in flight holds
    device memory, not the host's pinned memory torch's would: about
    num_workers x 4 buffers of a batch's size. Pass prefetch_factor to
    choose.
    """

    PREFETCH_FACTOR = 4

    def __init__(self, dataset, *args, device=None, socket=None, **kwargs):
        super().__init__(dataset, *args, **kwargs)
        if "prefetch_factor" not in kwargs and self.num_workers > 0:
            self.prefetch_factor = self.PREFETCH_FACTOR
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.type not in ("cuda", "cpu"):
            raise ValueError(f"ferry.torch.DataLoader: device must be a CUDA device or 'cpu', not {device}")
        self.device = device
        # Under the argument's own name too: frameworks that re-create a
        # loader (PyTorch Lightning's predict and ddp paths) read each
        # constructor argument back from the attribute of the same name.
        self.socket = socket if socket is not None else os.environ.get("FERRY_SOCKET")
        self.ferry_socket = self.socket
        self._ferry_views = False  # the tests' views of the simulated device (_Pool)

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleIter(self)
        self.check_worker_number_rationality()
        return _MultiIter(self)
