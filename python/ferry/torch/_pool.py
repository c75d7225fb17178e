# SPDX-License-Identifier: MIT
"""The trainer's side: its client, the device buffers its workers upload
into (_Slot), each delivered batch's lifetime (_Life, record_stream), and
the batches' fences and recycling (_Pool)."""

import collections
import ctypes
import errno
import os
import sys
import threading
import time
import warnings
import weakref

import torch
from torch.utils.data import dataloader as _dl

from .. import _api
from . import _account
from ._layout import _Leaf, _Stack, _layout, _map, _movable, _round
from ._wire import _GONE, _Batch, _Job, _Spill, _gone

_FIRST_CONNECT_S = 5.0  # a loader made while its ferryd restarts waits this long for it
_CHECK_S = 0.02  # the trainer looks at its connection this often at most
_RETRY_S = 0.5   # a connect no ferryd took is tried again this long after, at the earliest


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
            from .. import device as _device

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
        self.account = [] if _account.ON else None  # per delivered batch (the module's documentation)
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
                    self.retry_at = time.monotonic() + _RETRY_S
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
        from .. import device as _device

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
        from .. import device as _device

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
