# SPDX-License-Identifier: MIT
"""The worker's side: a task that reaches a worker with its buffer (_Task),
the worker's client and the buffers it opened (_Worker), and the collate_fn
the workers run (_Collate), which uploads the batch and returns its layout."""

import errno
import os
import time

from torch.utils.data._utils import collate as _collate
import torch.utils.data as _data

from .. import _api
from . import _account
from ._layout import _collate_later, _layout, _realize
from ._wire import _GONE, _Batch, _Spill, _gone


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
        if _account.ON:
            _Worker.got = time.monotonic_ns()
        _Worker.job = job
        _Worker.forget.extend(job.forget)  # kept even if this task uploads nothing
    return int(idx)


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
        start = time.monotonic_ns() if _account.ON else 0
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
        laid = time.monotonic_ns() if _account.ON else 0
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
        times = (os.getpid(), _Worker.got, start, laid, time.monotonic_ns()) if _account.ON else None
        return _Batch(template, nbytes, job.slot, job.publish, times)
