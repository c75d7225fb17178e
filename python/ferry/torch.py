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

import collections
import collections.abc
import copy
import ctypes
import errno
import os
import sys
import threading
import time
import warnings
import weakref

try:
    import torch
except ImportError as e:  # ferry itself needs no torch; this module is torch's loader
    raise ImportError(
        f"ferry.torch needs PyTorch in this environment ({sys.executable}): pip install torch, "
        "or use ferry without .torch"
    ) from e
import torch.utils.data as _data
from torch.utils.data import dataloader as _dl
from torch.utils.data._utils import collate as _collate

from . import _api

__all__ = ["DataLoader", "record_stream"]

# The per-batch account (the module's documentation, "Where a batch waits").
_ACCOUNT = os.environ.get("FERRY_TORCH_ACCOUNT", "") not in ("", "0")
_ALIGN = 256  # where each tensor of a batch starts in its buffer (DLPack's and CUDA's allocators' alignment)
_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
           "complex64", "complex128", "uint16", "uint32", "uint64"}


def _dtype_name(dtype):
    return str(dtype).rsplit(".", 1)[-1]


def _round(n):
    """Bytes a buffer gets for a batch of n: whole 64 KiB, at least one."""
    return max(65536, (n + 65535) // 65536 * 65536)


# ---------------------------------------------------------------- a batch's layout
class _Leaf:
    """A tensor of a batch, as the worker wrote it into the buffer."""

    __slots__ = ("offset", "dtype", "shape", "nbytes")

    def __init__(self, offset, dtype, shape, nbytes):
        self.offset, self.dtype, self.shape, self.nbytes = offset, dtype, shape, nbytes

    def __reduce__(self):
        return (_Leaf, (self.offset, self.dtype, self.shape, self.nbytes))


class _Stack:
    """torch.stack(parts) not made yet: the parts go to the buffer as they lie."""

    __slots__ = ("parts", "shape", "dtype")

    def __init__(self, parts, shape, dtype):
        self.parts, self.shape, self.dtype = parts, shape, dtype

    def realize(self):
        return torch.stack(self.parts, 0)


def _map(obj, leaf, is_leaf):
    """obj with every leaf x (is_leaf(x)) replaced by leaf(x), through the
    containers torch's collate makes (mappings, namedtuples, tuples, lists,
    other sequences). Each is rebuilt as what it was: a copy of the same type
    (its other attributes kept) where it can be, as torch's collate does."""
    if is_leaf(obj):
        return leaf(obj)
    if isinstance(obj, (str, bytes)):
        return obj
    if isinstance(obj, collections.abc.Mapping):
        items = {k: _map(v, leaf, is_leaf) for k, v in obj.items()}
        if type(obj) is dict:
            return items
        if isinstance(obj, collections.abc.MutableMapping):
            try:
                c = copy.copy(obj)
                c.update(items)
                return c
            except Exception:  # noqa: BLE001 - a mapping that does not copy: as below
                pass
        try:
            return type(obj)(items)
        except TypeError:
            return items
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map(v, leaf, is_leaf) for v in obj))
    if isinstance(obj, (tuple, list, collections.abc.Sequence)):
        items = [_map(v, leaf, is_leaf) for v in obj]
        if type(obj) is list:
            return items
        if type(obj) is tuple:
            return tuple(items)
        if isinstance(obj, collections.abc.MutableSequence):
            try:
                c = copy.copy(obj)
                c[:] = items
                return c
            except Exception:  # noqa: BLE001
                pass
        try:
            return type(obj)(items)
        except TypeError:
            return items
    return obj


def _movable(x):
    """A tensor ferry moves: a plain dense CPU tensor (not a subclass, not
    one autograd tracks) of a dtype DLPack names. Others travel as torch's
    DataLoader sends them."""
    if isinstance(x, _Stack):
        return True
    return (type(x) is torch.Tensor and x.layout == torch.strided and x.device.type == "cpu"
            and not x.requires_grad and not getattr(x, "is_nested", False) and _dtype_name(x.dtype) in _DTYPES)


def _plain(t):
    """t's values in plain row-major memory: conjugate and negative views
    resolved (their bytes are not their values), then made contiguous."""
    return t.resolve_conj().resolve_neg().contiguous()


def _layout(structure):
    """(template, spans, keepalive, nbytes): the batch with each movable
    tensor replaced by its _Leaf, the (address, length) pairs to upload back
    to back (padding included), and the tensors those addresses are in."""
    spans, keep = [], []
    at = 0

    def leaf(x):
        nonlocal at
        pad = -at % _ALIGN
        if pad:
            spans.append((_zeros(), pad))
            at += pad
        if isinstance(x, _Stack):
            parts = [_plain(p) for p in x.parts]
            shape, dtype = x.shape, x.dtype
        else:
            parts = [_plain(x)]
            shape, dtype = tuple(x.shape), x.dtype
        start = at
        for p in parts:
            n = p.numel() * p.element_size()
            if n:
                spans.append((p.data_ptr(), n))
                keep.append(p)
                at += n
        return _Leaf(start, _dtype_name(dtype), tuple(shape), at - start)

    template = _map(structure, leaf, _movable)
    return template, spans, keep, at


_zero_bytes = ctypes.create_string_buffer(_ALIGN)


def _zeros():
    """The address of _ALIGN zero bytes that live as long as the process (padding)."""
    return ctypes.addressof(_zero_bytes)


def _realize(structure):
    return _map(structure, lambda s: s.realize(), lambda x: isinstance(x, _Stack))


# ---------------------------------------------------------------- collating
def _stack_later(batch, *, collate_fn_map=None):
    """torch's collate of a list of tensors, deferred: the parts themselves,
    when torch.stack would give a plain dense CPU tensor of them."""
    first = batch[0]
    regular = all(type(t) is torch.Tensor for t in batch) and _movable(first) and all(
        t.shape == first.shape and t.dtype == first.dtype and _movable(t) for t in batch)
    if not regular:  # torch decides what that means (type promotion, an error, ...)
        return _collate.collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
    return _Stack(list(batch), (len(batch), *first.shape), first.dtype)


def _collate_later(batch):
    """default_collate, with the stacking of tensors left to the upload. The
    map is torch's as it is now (types registered into it count)."""
    later = dict(_collate.default_collate_fn_map)
    later[torch.Tensor] = _stack_later
    return _collate.collate(batch, collate_fn_map=later)


# ---------------------------------------------------------------- what travels
class _Task(int):
    """A task index (torch's send_idx) that carries the buffer its batch goes
    into. Unpickled in a worker, it tells the worker's collate_fn (torch's
    worker loop gets it, then fetches the batch)."""

    def __new__(cls, idx, job):
        t = super().__new__(cls, idx)
        t.job = job
        return t

    def __reduce__(self):
        return (_task_from_wire, (int(self), self.job))


def _task_from_wire(idx, job):
    if _data.get_worker_info() is not None:
        if _ACCOUNT:
            _Worker.got = time.monotonic_ns()
        _Worker.job = job
        _Worker.forget.extend(job.forget)  # kept even if this task uploads nothing
    return int(idx)


class _Job:
    """Where one batch goes: slot `slot` (a buffer the trainer granted with
    `token`, `capacity` bytes), after the fence released `release`, and what
    the upload publishes. forget: slots whose buffers are gone."""

    __slots__ = ("slot", "token", "capacity", "release", "publish", "forget")

    def __init__(self, slot, token, capacity, release, publish, forget):
        self.slot, self.token, self.capacity = slot, token, capacity
        self.release, self.publish, self.forget = release, publish, forget

    def __reduce__(self):
        return (_Job, (self.slot, self.token, self.capacity, self.release, self.publish, self.forget))


class _Batch:
    """A batch on the device: its layout, where it is, and its fence's value
    (times: the worker's part of the account, when it is kept)."""

    def __init__(self, template, nbytes, slot, value, times=None):
        self.template, self.nbytes, self.slot, self.value = template, nbytes, slot, value
        self.times = times
        self.arrived = 0  # when the trainer received it (the account; set there)


class _Spill:
    """A batch that did not fit the buffer it was given (or had none): its
    tensors, as torch's DataLoader would send them. The trainer uploads it."""

    def __init__(self, structure, nbytes):
        self.structure, self.nbytes = structure, nbytes


# ferryd went away (stopped for a restart or an upgrade, or killed), none
# listens yet, or a new one does not know the old one's grants: the batch
# travels as torch's DataLoader would send it, and the next ones through the
# ferryd that listens next.
_GONE = {errno.ESHUTDOWN, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.EPIPE, errno.ECONNREFUSED,
         errno.ENXIO, errno.ENOENT, errno.EACCES, errno.EPROTO, errno.ETIMEDOUT}


_FIRST_CONNECT_S = 5.0  # a loader made while its ferryd restarts waits this long for it
_CHECK_S = 0.02  # the trainer looks at its connection this often at most


def _gone(client):
    """Whether `client` (or None) can no longer serve: a new one is needed."""
    return client is None or client.connection_error() != 0


# ---------------------------------------------------------------- the worker's side
class _Worker:
    """A worker process's client and the buffers it opened (made on first use)."""

    job = None
    got = 0  # when the task came (the account)
    client = None
    pid = None
    opened = {}
    pending = []  # tickets of uploads whose outcome is not known yet
    forget = []   # slots the trainer retired: their buffers are gone

    @classmethod
    def get(cls, socket):
        """The worker's client: connected on first use, and again after its
        ferryd went (drop(): the buffers it opened went with it). Raises
        ferry.Error while no ferryd takes it."""
        if cls.pid != os.getpid():
            cls.client, cls.pid, cls.opened, cls.pending = None, os.getpid(), {}, []
        if cls.client is None:
            # Named for ferryctl: this process is a worker of torch's loader.
            info = _data.get_worker_info()
            name = None if info is None else f"torch worker {info.id}"
            cls.client = _api.Client(socket, name=name)
        for slot in cls.forget:
            b = cls.opened.pop(slot, None)
            if b is not None:
                try:
                    b.free()  # an opened buffer: only this client's name for it goes
                except _api.Error:
                    pass
        cls.forget = []
        return cls.client

    @classmethod
    def drop(cls):
        """Its ferryd went: the next batch connects anew."""
        old, cls.client, cls.opened, cls.pending = cls.client, None, {}, []
        if old is not None:
            old.close()

    @classmethod
    def check(cls):
        """Raises the error of an earlier upload that failed."""
        still = []
        for t in cls.pending:
            try:
                cls.client.wait(t, timeout=0)
            except _api.Error as e:
                if e.errno == errno.ETIMEDOUT:  # not done yet
                    still.append(t)
                elif e.errno not in _GONE:
                    # (Its ferryd gone: the trainer's fence says what became of it.)
                    raise RuntimeError(f"ferry: an earlier batch's upload from this worker failed: {e}") from e
        cls.pending = still[-64:]


class _Collate:
    """The DataLoader's collate_fn, as its workers run it: collate as torch
    would, then upload into the job's buffer and return the layout."""

    def __init__(self, collate_fn, socket):
        self.collate_fn = collate_fn
        self.socket = socket
        self.pool = None  # the trainer's, when it collates itself (num_workers=0); never pickled

    def __getstate__(self):
        return {"collate_fn": self.collate_fn, "socket": self.socket, "pool": None}

    def __call__(self, samples):
        start = time.monotonic_ns() if _ACCOUNT else 0
        if self.collate_fn is _collate.default_collate:
            structure = _collate_later(samples)
        else:
            structure = self.collate_fn(samples)
        if self.pool is not None:
            return self.pool.collated(structure)
        job, _Worker.job = _Worker.job, None
        template, spans, keep, nbytes = _layout(structure)
        if nbytes == 0 or job is None or job.token is None or job.capacity < nbytes:
            return _Spill(_realize(structure), nbytes)
        laid = time.monotonic_ns() if _ACCOUNT else 0
        try:
            c = _Worker.get(self.socket)
            _Worker.check()
            buf = _Worker.opened.get(job.slot)
            if buf is None:
                # The trainer never revokes a task's grant: a token refused
                # is one of a ferryd that went (the trainer reconnects too).
                buf = _Worker.opened[job.slot] = c.open(job.token)
            t = c._upload_spans(buf.id, spans, 0, release_after=job.release or None, publish=job.publish)
        except _api.Error as e:
            if e.errno not in _GONE or not (_gone(_Worker.client) or e.errno == errno.EACCES):
                raise
            if _gone(_Worker.client):
                _Worker.drop()
            return _Spill(_realize(structure), nbytes)  # its ferryd went: as torch would send it
        del keep  # staged: the samples may go
        _Worker.pending.append(t)
        times = (os.getpid(), _Worker.got, start, laid, time.monotonic_ns()) if _ACCOUNT else None
        return _Batch(template, nbytes, job.slot, job.publish, times)


# ---------------------------------------------------------------- the trainer's side
class _Slot:
    """A device buffer of the trainer's, granted to the workers. Where the
    trainer reads batches in place (CUDA, the simulated device's views) it is
    memory of the trainer's own context that ferryd maps while the slot
    lives (ferry.device.alloc): nothing of it outlives the slot or the
    trainer, nor stays charged to the user. Read back to the host, it is
    ferryd's own allocation (no mapping leaves ferryd)."""

    def __init__(self, pool, ident, capacity):
        self.id = ident
        self.mapping = None
        if pool.in_place:
            from . import device as _device

            self.mapping = _device.alloc(pool.client, capacity, device=pool.device.index if pool.cuda else None)
            self.buffer = self.mapping.buffer
        else:
            self.buffer = pool.client.alloc(capacity)
        self.capacity = capacity
        self.token = self.buffer.grant(_api.RIGHT_UPLOAD)
        self.fence = self.buffer.fence
        self.released = 0     # the value whose release was queued last: the next upload waits for it
        self.last = 0         # the last value an upload into it was to publish
        # "task": a worker fills it; "arrived": its batch came, not delivered yet;
        # "out": a delivered batch's tensors live; "orphan": a batch that will
        # never be delivered (an epoch ended first) is landing in it (`pending`);
        # "dead": its release could be ordered neither on the device nor on the host.
        self.state = "free"
        self.pending = 0
        self.life = None      # the delivered batch's _Life, weakly
        self.retired = False  # freed once nothing uses it and the stream passed `released`


class _Life:
    """Referenced by every tensor of one delivered batch: when the last goes,
    the batch's buffer may be reused after the stream it was delivered on
    (and the streams record_stream added)."""

    def __init__(self, pool, slot, value, stream):
        # torch.cuda.Stream objects by handle, not handles alone: torch makes
        # no stream of handle 0 that is its default stream (ExternalStream(0)
        # is another, and an event recorded there waited for nothing).
        self.streams = {}
        weakref.finalize(self, pool.done_with, slot, value, stream, os.getpid(), self.streams)


_pools = weakref.WeakSet()  # every pool of this process, for record_stream


def record_stream(tensor, stream):
    """As torch.Tensor.record_stream, for a tensor of a batch of
    ferry.torch.DataLoader (or a view of one): its buffer is reused only
    after `stream` too has done what was queued on it when the batch's last
    tensor went. torch's own record_stream has no effect on ferry's memory.
    A tensor that is not a loader's: nothing happens."""
    ptr = tensor.data_ptr()
    for pool in list(_pools):
        with pool.lock:
            # A copy: a finalizer run by a collection in here may retire a slot.
            for s in list(pool.slots.values()):
                m = s.mapping
                if m is not None and s.state == "out" and m.ptr <= ptr < m.ptr + m.nbytes:
                    life = s.life() if s.life is not None else None
                    if life is not None:
                        # By device and handle: every device's default stream is handle 0.
                        life.streams[(str(stream.device), stream.cuda_stream)] = stream
                    return


class _Pool:
    """The trainer's ferry client, its buffers, and the batches' fences."""

    def __init__(self, socket, device, views=False):
        # Named for ferryctl, unless the user named the process ($FERRY_CLIENT_NAME).
        self.socket = socket
        self.client = None
        self.old_clients = []  # of ferryds that went, until their slots are gone
        self.retry_at = 0.0    # no ferryd took the last connect: not asked again before this
        self.checked_at = 0.0  # when the client's connection was last looked at
        self._connect(first=True)
        self.device = device
        self.cuda = device.type == "cuda"
        # CPU tensors that are views of the device buffers, recycled as CUDA
        # ones are: only where device memory is host memory (the simulated
        # device), so that its tests run the CUDA path's lifetimes.
        self.views = views and not self.cuda
        self.in_place = self.cuda or self.views  # batches read where they landed: slots of this process's memory
        self.capacity = 0  # bytes a task's buffer gets: the largest batch seen (0: none seen yet)
        self.slots = {}
        self.by_task = {}  # task index -> slot
        self.value = 0     # the fences' counter: every upload publishes the next
        self.forgotten = []  # slots retired, for the workers to forget
        self.told = collections.defaultdict(int)  # worker -> how much of `forgotten` it was told
        self.delivered = collections.deque()  # (slot, value) whose failure is still to be checked
        self.lock = threading.RLock()
        self.closing = False
        self.reaper = None
        self.pid = os.getpid()
        self.next_slot = 0  # slot ids are never reused: a worker may still name a retired one
        self.account = [] if _ACCOUNT else None  # per delivered batch (the module's documentation)
        self.blocked_ns = 0  # the trainer's time blocked for batches since the last delivery
        _pools.add(self)

    # ---- the connection
    def _connect(self, first=False):
        # Named for ferryctl, unless the user named the process ($FERRY_CLIENT_NAME).
        name = None if os.environ.get("FERRY_CLIENT_NAME") else "torch trainer"
        # A loader made while its ferryd restarts (the socket's folder is
        # there, the socket not yet) waits for it a little; with no ferryd
        # at all it says so, naming the socket.
        deadline = time.monotonic() + (_FIRST_CONNECT_S if first else 0)
        while True:
            try:
                self.client = _api.Client(self.socket, name=name)
                return
            except _api.Error as e:
                restarting = e.errno in (errno.ENXIO, errno.ECONNREFUSED) and os.path.isdir(
                    os.path.dirname(os.path.abspath(_api.socket_path(self.socket))))
                if first and not (restarting and time.monotonic() < deadline):
                    raise
                if not first:
                    self.retry_at = time.monotonic() + 0.5
                    return
                time.sleep(0.05)

    def _ensure_client(self):
        """The trainer's client; connected again once its ferryd went (a
        restart): the old one's slots retire, each freed once its batch is
        done, and the old client closes after the last. None while no ferryd
        takes a connect (the batches then travel as torch's do). Lock held."""
        # Looked at every _CHECK_S at most: the trainer hands out a task per batch.
        now = time.monotonic()
        if self.client is not None and (now < self.checked_at + _CHECK_S or not _gone(self.client)):
            if now >= self.checked_at + _CHECK_S:
                self.checked_at = now
            return self.client
        if self.client is not None:
            old, self.client = self.client, None
            self.old_clients.append(old)
            # Killed or crashed (not stopped: a stop drains, and fails what
            # it drops): no upload it took will write its fence any more.
            # Said on the host, so that no stream waits for ever on one; a
            # batch that did not land is then raised as failed.
            killed = old.connection_error() not in (0, -errno.ESHUTDOWN)
            for s in self.slots.values():
                if killed and s.last and s.buffer.client is old:
                    try:
                        s.fence._fail_up_to(s.last)
                    except _api.Error:
                        pass
                if not s.retired:
                    s.retired = True
                    self.forgotten.append(s.id)
            self._reap()
        if time.monotonic() >= self.retry_at:
            self._connect()
        return self.client

    def _direct(self, structure):
        """A batch no ferryd took: its tensors moved as torch's loader would."""
        def move(x):
            t = x.realize() if isinstance(x, _Stack) else x
            return t.to(self.device) if self.cuda else t

        return _map(structure, move, _movable)

    # ---- tasks
    def _slot(self, capacity):
        """A free slot of at least `capacity` bytes, made if none is."""
        for s in list(self.slots.values()):
            if s.state == "orphan" and s.fence.ready >= s.pending:
                s.state = "free"  # the batch nobody will take landed: the buffer is free
            if s.state == "free" and not s.retired and s.capacity >= capacity:
                return s
        self.next_slot += 1
        s = self.slots[self.next_slot] = _Slot(self, self.next_slot, max(capacity, 1))
        return s

    def job(self, task, worker):
        """The job of a task sent to `worker`: a buffer for it, or None
        while the batches' size is unknown."""
        with self.lock:
            c = self._ensure_client()
            forget = tuple(self.forgotten[self.told[worker]:])
            self.told[worker] = len(self.forgotten)
            if self.capacity == 0:
                return _Job(0, None, 0, 0, 0, forget)
            try:
                s = self._slot(self.capacity) if c is not None else None
            except _api.Error as e:
                if e.errno not in _GONE:
                    raise
                s = None
            if s is None:  # no ferryd now: the worker sends the batch as torch's would
                return _Job(0, None, self.capacity, 0, 0, forget)
            s.state = "task"
            self.value += 1
            s.last = self.value
            self.by_task[task] = s
            return _Job(s.id, s.token, s.capacity, s.released, self.value, forget)

    def arrived(self, task, data):
        """A worker's answer to a task: a slot it did not write goes back."""
        with self.lock:
            s = self.by_task.pop(task, None)
            if isinstance(data, _Spill):
                # Now the size is known: at least one buffer's worth, so that
                # batches with nothing to upload do not go one at a time.
                self.capacity = max(self.capacity, _round(data.nbytes))
            if s is None:
                return
            if isinstance(data, _Batch):
                s.state, s.pending = "arrived", data.value  # delivered next, or orphaned by a reset
                return
            # No upload (spilled, or the iterable ended); or a worker error,
            # after which the buffer may be half written: not reused.
            s.state = "free"
            if s.retired:  # its ferryd went meanwhile: the slot goes now
                self._reap()
                return
            if not isinstance(data, (_Spill, _dl._utils.worker._IterableDatasetStopIteration)) or \
                    s.capacity < self.capacity:
                self._retire(s)

    def new_epoch(self):
        """Every worker acknowledged a new epoch (persistent workers): tasks of
        the last one that never answered uploaded nothing; batches that came
        but were never delivered (the user broke off) are orphans, free once
        they landed."""
        with self.lock:
            for s in self.slots.values():
                if s.state == "task":
                    s.state = "free"
                elif s.state == "arrived":
                    s.state = "orphan"
            self.by_task.clear()

    def _retire(self, s):
        s.retired = True
        self.forgotten.append(s.id)
        self._reap()

    # ---- batches
    def deliver(self, data):
        """The batch the user gets, from a worker's answer. An earlier
        batch's failed upload is raised in its place."""
        if isinstance(data, _Spill):
            out = self.collated(data.structure)
        elif isinstance(data, _Batch):
            s = self.slots[data.slot]
            kept = self.account is not None and data.times is not None
            if kept:
                start, landed = time.monotonic_ns(), s.fence.ready >= data.value
            out = self._tensors(data, s)
            if kept:
                self._account(data, start, landed)
        else:
            out = data
        self._check_failures()
        return out

    def _account(self, batch, start, landed):
        """The delivered batch's row of the account: its worker's times, the
        trainer's (delivery from `start`), and whether its copy had landed."""
        pid, got, collate, laid, staged = batch.times
        self.account.append(dict(worker=pid, got=got, collate=collate, laid=laid, staged=staged,
                                 arrived=batch.arrived, deliver=start, delivered=time.monotonic_ns(),
                                 blocked=self.blocked_ns, landed=landed, nbytes=batch.nbytes))
        self.blocked_ns = 0

    def collated(self, structure):
        """A batch collated in this process (num_workers=0, or a spill): uploaded
        by the trainer's own client, then delivered as a worker's would be."""
        template, spans, keep, nbytes = _layout(structure)
        if nbytes == 0:
            return _map(template, lambda x: self._empty(x), lambda x: isinstance(x, _Leaf))
        s = None
        try:
            with self.lock:
                self.capacity = max(self.capacity, _round(nbytes))
                c = self._ensure_client()
                if c is None:
                    return self._direct(structure)
                s = self._slot(self.capacity)
                s.state = "task"
                self.value += 1
                value = s.last = self.value
            c._upload_spans(s.buffer.id, spans, 0, release_after=s.released or None, publish=value)
        except _api.Error as e:
            if e.errno not in _GONE or not _gone(self.client):
                raise
            if s is not None:
                with self.lock:  # nothing landed in it: free, and gone with its ferryd
                    s.state = "free"
                    if not s.retired:
                        self._retire(s)
                    else:
                        self._reap()
            return self._direct(structure)  # its ferryd went meanwhile
        del keep
        return self._tensors(_Batch(template, nbytes, s.id, value), s)

    def _empty(self, leaf):
        return torch.empty(leaf.shape, dtype=getattr(torch, leaf.dtype), device=self.device)

    def _tensors(self, batch, s):
        if self.views:
            return self._views(batch, s)
        if not self.cuda:
            # Read back to the host, once the fence says the upload landed.
            s.fence.wait(batch.value)
            c, bid = s.buffer.client, s.buffer.id

            def leaf(x):
                t = torch.empty(x.shape, dtype=getattr(torch, x.dtype))
                if x.nbytes:
                    c._download_to(bid, x.offset, t.data_ptr(), x.nbytes)
                return t

            out = _map(batch.template, leaf, lambda x: isinstance(x, _Leaf))
            self.done_with(s, batch.value, None, self.pid, ())
            return out
        from . import device as _device

        if s.mapping is None:
            s.mapping = _device.open(s.buffer, device=self.device.index)
        stream = torch.cuda.current_stream(self.device)
        ready = _device.Ready(s.fence, batch.value)
        life = _Life(self, s, batch.value, stream)
        with self.lock:
            s.state, s.life = "out", weakref.ref(life)
            self.delivered.append((s, batch.value))

        def leaf(x):
            if x.nbytes == 0:
                return self._empty(x)
            # bool goes as uint8 and is viewed back: every torch takes that.
            a = s.mapping.array("uint8" if x.dtype == "bool" else x.dtype, x.shape, x.offset, ready=ready,
                                stream=stream.cuda_stream)
            a.life = life  # the batch's buffer is busy while this array (and its tensor) lives
            # Not through DLPack: torch calls a capsule's deleter even while an
            # exception is being raised, and ctypes' deleters are Python code
            # (DeviceArray.torch).
            t = a.torch(stream)
            return t.view(torch.bool) if x.dtype == "bool" else t

        return _map(batch.template, leaf, lambda x: isinstance(x, _Leaf))

    def _views(self, batch, s):
        """The CUDA path's views and lifetimes, as CPU tensors over the
        simulated device's memory (ready once the fence says so, on the host)."""
        from . import device as _device

        if s.mapping is None:
            s.mapping = _device.open(s.buffer)
        s.fence.wait(batch.value)
        life = _Life(self, s, batch.value, None)
        with self.lock:
            s.state, s.life = "out", weakref.ref(life)

        def leaf(x):
            if x.nbytes == 0:
                return self._empty(x)
            dtype = "uint8" if x.dtype == "bool" else x.dtype
            a = s.mapping.array(dtype, x.shape, x.offset)
            a.life = life
            # The simulated device's memory is this process's: a tensor over
            # it that holds the array as a Python reference (as on CUDA, no
            # DLPack deleter).
            mem = (ctypes.c_uint8 * a.nbytes).from_address(a.ptr)
            mem.array = a
            t = torch.frombuffer(mem, dtype=getattr(torch, dtype)).view(x.shape)
            return t.view(torch.bool) if x.dtype == "bool" else t

        return _map(batch.template, leaf, lambda x: isinstance(x, _Leaf))

    def done_with(self, s, value, stream, pid, others):
        """The batch's last tensor went: release its buffer after `stream`
        and `others` (CUDA), or now (read back to the host). Runs in a
        finalizer: whatever fails, the slot is not handed out again before
        every stream is done with it."""
        if pid != os.getpid() or sys.is_finalizing():
            return  # a forked child's copy of the trainer's objects, or the interpreter's end
        with self.lock:
            try:
                if stream is None:
                    s.fence.release(value)
                else:
                    self._release_on_device(s, value, stream, others.values())
                s.released = value
            except BaseException as e:
                # The device write could not be queued: wait on the host, then release.
                try:
                    if stream is not None:
                        for st in (stream, *others.values()):
                            st.synchronize()
                    s.fence.release(value)
                    s.released = value
                except BaseException:
                    s.state, s.life = "dead", None  # cannot be ordered: never handed out, nor freed
                    warnings.warn(f"ferry: a batch's buffer could not be released ({e!r}); it is no longer used",
                                  RuntimeWarning)
                    return
            finally:
                if s.state != "dead":
                    s.state, s.life = "free", None
                    if self.closing or s.capacity < self.capacity:
                        self._retire(s)  # too small for the batches now, or the loader is done

    def _release_on_device(self, s, value, stream, others):
        """Queues the write of the fence's released word on `stream`, after
        the work queued so far on every stream of `others`."""
        for other in others:
            if other != stream:  # torch's Stream equality: the same device and handle
                ev = torch.cuda.Event()
                ev.record(other)
                stream.wait_event(ev)
        cu = s.mapping._cuda
        cu.write_value(s.mapping.device, stream.cuda_stream, cu.device_word(s.mapping.device, s.fence.released_address),
                       value)

    def _check_failures(self):
        """Raises if an upload of a batch already delivered failed (its tensors
        then hold what was in the buffer before)."""
        with self.lock:
            while self.delivered:
                s, value = self.delivered[0]
                if s.fence.ready < value:
                    break
                self.delivered.popleft()
                if s.fence.failed >= value:
                    raise RuntimeError(
                        f"ferry: the upload of a batch delivered earlier failed on the device (fence value {value}); "
                        "its producer's error says why")

    # ---- the end
    def close(self):
        """The iterator is done: every buffer goes once nothing uses it."""
        if self.pid != os.getpid():
            return  # the trainer's pool as a forked child sees it: the trainer's to close
        with self.lock:
            if self.closing:
                return
            self.closing = True
            # Buffers of tasks never delivered go too: a worker's upload still
            # in flight to one ends first (ferryd sees to that).
            for s in self.slots.values():
                if s.state not in ("out", "dead"):
                    s.state = "free"
                    s.retired = True
            self.by_task.clear()
            self._reap()

    def _reap(self):
        """Frees retired slots the device is done with; the client goes with
        the last. A background thread waits for the rest."""
        with self.lock:
            for ident, s in list(self.slots.items()):
                if s.retired and s.state == "free" and s.fence.released >= s.released:
                    if s.mapping is not None and s.mapping.views:
                        continue
                    try:
                        s.buffer.free()  # closes the mapping first
                    except BufferError:
                        continue
                    except _api.Error:
                        if not _gone(s.buffer.client):
                            continue
                        # Its ferryd went, and its memory with it (or, imported, back to us).
                    self.slots.pop(ident, None)  # a nested reap (a finalizer in free()) may have
            # A ferryd that went: its client closes once no slot of its is left.
            for old in [c for c in self.old_clients if not any(s.buffer.client is c for s in self.slots.values())]:
                self.old_clients.remove(old)
                old.close()
            if self.closing and not self.slots:
                if self.client is not None:
                    self.client.close()
                return
            waiting = any(s.retired for s in self.slots.values())
            if waiting and (self.reaper is None or not self.reaper.is_alive()):
                self.reaper = threading.Thread(target=self._reap_later, name="ferry-reaper", daemon=True)
                self.reaper.start()

    def _reap_later(self):
        for _ in range(30000):  # 5 minutes at most
            time.sleep(0.01)
            with self.lock:
                if not any(s.retired for s in self.slots.values()) and not (self.closing and self.slots):
                    return
                self._reap()
                if self.closing and not self.slots:
                    return


# ---------------------------------------------------------------- the iterators
class _TaskQueue:
    """A worker's index queue, as torch's iterator puts into it: each task
    gets its buffer on the way (torch chose the worker and the order); while
    the batches' size is unknown, one task goes out bare and the rest wait."""

    def __init__(self, queue, worker, it):
        # Weakly: a cycle would leave the iterator to the cyclic collector,
        # which may then run its shutdown in a worker forked meanwhile.
        self.queue, self.worker, self.it = queue, worker, weakref.ref(it)

    def put(self, obj, *args, **kwargs):
        it = self.it()
        if it is not None and isinstance(obj, tuple) and len(obj) == 2 and type(obj[0]) is int:
            it._ferry_put(self, obj, args, kwargs)
        else:
            self.queue.put(obj, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.queue, name)


class _Ferry:
    """What both iterators add to torch's: the pool, and the collate_fn that uploads."""

    def _ferry_setup(self, loader):
        self._pin_memory = False  # ferry's staging memory is pinned: no pin thread
        self._ferry = _Pool(loader.ferry_socket, loader.device, loader._ferry_views)
        self._collate_fn = _Collate(self._collate_fn, loader.ferry_socket)


class _FerryBase(_dl._BaseDataLoaderIter, _Ferry):
    # Runs inside torch's multiprocessing iterator's __init__, before the
    # workers start: they get the collate_fn that uploads.
    def __init__(self, loader):
        super().__init__(loader)
        self._ferry_setup(loader)


class _MultiIter(_dl._MultiProcessingDataLoaderIter, _FerryBase):
    def _reset(self, loader, first_iter=False):
        if first_iter:
            self._index_queues = [_TaskQueue(q, i, self) for i, q in enumerate(self._index_queues)]
            self._ferry_waiting = []   # tasks held back until the batches' size is known
            self._ferry_bare = set()   # tasks out without a buffer
            self._ferry_acks = None
        else:
            self._ferry_acks = 0       # counting the workers' acknowledgements of the new epoch
            self._ferry_waiting = []
            self._ferry_bare = set()
        super()._reset(loader, first_iter)

    def _ferry_put(self, q, obj, args, kwargs):
        idx, index = obj
        pool = self._ferry
        if pool.capacity == 0 and (self._ferry_bare or self._ferry_waiting):
            self._ferry_waiting.append((q, obj, args, kwargs))
            return
        job = pool.job(idx, q.worker)
        if job.token is None:
            self._ferry_bare.add(idx)
        q.queue.put((_Task(idx, job), index), *args, **kwargs)

    def _ferry_release_waiting(self):
        waiting, self._ferry_waiting = self._ferry_waiting, []
        for q, obj, args, kwargs in waiting:
            self._ferry_put(q, obj, args, kwargs)

    def _get_data(self):
        if self._ferry.account is None:
            idx, data = super()._get_data()
        else:
            start = time.monotonic_ns()
            idx, data = super()._get_data()
            now = time.monotonic_ns()
            self._ferry.blocked_ns += now - start
            if isinstance(data, _Batch):
                data.arrived = now
        if isinstance(idx, _dl._utils.worker._ResumeIteration) and self._ferry_acks is not None:
            self._ferry_acks += 1
            if self._ferry_acks == self._num_workers:  # every worker is past the last epoch
                self._ferry_acks = None
                self._ferry.new_epoch()
        if type(idx) is int:  # not a _ResumeIteration's acknowledgement
            self._ferry.arrived(idx, data)
            self._ferry_bare.discard(idx)
            if self._ferry_waiting and (self._ferry.capacity != 0 or not self._ferry_bare):
                self._ferry_release_waiting()
        return idx, data

    def _process_data(self, data, *args):
        return self._ferry.deliver(super()._process_data(data, *args))

    def _shutdown_workers(self):
        if getattr(self, "_ferry", None) is not None and self._ferry.pid != os.getpid():
            return  # a copy of the trainer's iterator in a process forked from it: not its to shut down
        if not hasattr(self, "_shutdown"):
            return  # its __init__ failed before torch started any worker (no daemon, say): nothing to shut down
        try:
            super()._shutdown_workers()
        finally:
            if _dl._utils is not None and _dl._utils.python_exit_status is False and hasattr(self, "_ferry"):
                self._ferry_waiting = []
                self._ferry.close()


class _SingleIter(_dl._SingleProcessDataLoaderIter, _FerryBase):
    def __init__(self, loader):
        super().__init__(loader)
        self._collate_fn.pool = self._ferry
        # torch's fetcher was made with the collate_fn of the base's __init__: ours.
        self._dataset_fetcher.collate_fn = self._collate_fn

    def _next_data(self):
        self._ferry._check_failures()
        return super()._next_data()

    def __del__(self):
        if getattr(self, "_ferry", None) is not None and not sys.is_finalizing():
            self._ferry.close()


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
