# SPDX-License-Identifier: MIT
"""torch's two iterators with ferry's step: the pool made with them, the
collate_fn that uploads, and each task given its buffer on its way to a worker."""

import os
import sys
import time
import weakref

from torch.utils.data import dataloader as _dl

from ._pool import _Pool
from ._wire import _Batch
from ._worker import _Collate, _Task


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
