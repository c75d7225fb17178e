# SPDX-License-Identifier: MIT
"""Device buffers in this process's own GPU context, as arrays other
libraries take without a copy.

A buffer this client allocated lives in ferryd's context. ferry.device.open
exports it and opens the export in this process: on CUDA in the primary
context of a device (the one PyTorch, CuPy and the runtime API use), through
the driver API (libcuda, ctypes); on Level Zero in a context of the caller's
or one ferry makes. The mapping gives arrays viewed with any dtype and shape
(DeviceBuffer.array), which expose __cuda_array_interface__ (version 3, CUDA)
and __dlpack__ / __dlpack_device__ (kDLCUDA, or kDLOneAPI), so

    with ferry.Client() as c, c.alloc(n) as buf:
        d = ferry.device.open(buf, device=0)
        x = torch.from_dlpack(d.array("float32", (n // 4,)))   # or torch.as_tensor(..., device="cuda")

The other way round, ferry.device.alloc(client, n) allocates n bytes in
this process's own context and hands them to ferryd (Client.import_buffer):
uploads land in memory the process owns, charged to its user only while
ferryd maps it, and gone with the process. That is what a consumer with a
GPU context should use (ferry.torch's trainer does); an export (open() of a
Client.alloc buffer) stays charged until ferryd restarts, since ferryd
cannot see another process's mapping end.

Ordering: an array made with ready=(buf.fence, v) is ready once an upload
published v into the buffer's fence (by any process: see
Client.upload_gather). Its consumer's stream waits for that on the device, no
host thread involved: __dlpack__(stream=s) queues the wait on s, the stream
the consumer names; __cuda_array_interface__ queues it on the array's own
stream (the `stream` argument, default the legacy default stream) and says
so in its "stream" field, as version 3 asks. On Level Zero the wait is on the
host (Python has no Level Zero queue of yours to append to).

Lifetimes: the mapping stays open while any array made from it lives (a
tensor made from an array keeps the array, through its DLPack deleter);
DeviceBuffer.close() and Buffer.free() wait for that: close() is deferred
until the last view goes, and free() is refused (BufferError) while one
lives. A DLPack capsule that no consumer takes (one that refused it, say)
keeps its array for as long as the process lives: call __dlpack__ only to
hand the capsule to a consumer.
"""

import ctypes
import os
import sys
import threading
import weakref

from . import _dlpack
from ._api import IpcHandle, _spans

__all__ = ["DeviceArray", "DeviceBuffer", "Ready", "alloc", "open", "register", "stream_wait", "upload_direct"]

# dtype name -> (itemsize, __cuda_array_interface__ typestr or None)
_DTYPES = {
    "bool": (1, "|b1"), "uint8": (1, "|u1"), "int8": (1, "|i1"),
    "uint16": (2, "<u2"), "int16": (2, "<i2"), "float16": (2, "<f2"), "bfloat16": (2, None),
    "uint32": (4, "<u4"), "int32": (4, "<i4"), "float32": (4, "<f4"),
    "uint64": (8, "<u8"), "int64": (8, "<i8"), "float64": (8, "<f8"),
    "complex64": (8, "<c8"), "complex128": (16, "<c16"),
}
_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
            "cfloat": "complex64", "cdouble": "complex128", "bool_": "bool"}


def dtype_name(dtype):
    """The canonical name of a dtype given as a string, a numpy dtype or a
    torch.dtype ("float32", "bfloat16", ...); ValueError for others."""
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__ == "torch":
        name = str(dtype).rsplit(".", 1)[-1]  # torch.float32 -> float32
    else:
        name = getattr(dtype, "name", None)
        if not isinstance(name, str):
            name = getattr(dtype, "__name__", "")
    name = _ALIASES.get(name, name)
    if name not in _DTYPES:
        try:  # numpy spellings ("<f4", "u1", ...)
            import numpy as np

            name = np.dtype(dtype).name
        except Exception:  # noqa: BLE001
            pass
    name = _ALIASES.get(name, name)
    if name not in _DTYPES:
        raise ValueError(f"ferry.device: unsupported dtype {dtype!r}")
    return name


class Ready:
    """An array's readiness: the fence of its buffer reaching `value`. Shared
    by the arrays of one batch, so each stream waits once."""

    def __init__(self, fence, value):
        self.fence = fence
        self.value = int(value)
        self._streams = set()
        self._lock = threading.Lock()

    def queue_wait(self, mapping, stream):
        """Queues the wait on CUDA `stream` (a handle) once."""
        with self._lock:
            if stream in self._streams:
                return
            self._streams.add(stream)
        cu = mapping._cuda
        word = cu.device_word(mapping.device, self.fence.ready_address)
        cu.wait_value(mapping.device, stream, word, self.value)

    def wait(self, timeout=None):
        """On the host."""
        self.fence.wait(self.value, timeout)


def _default_cuda_device():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


def _ordinal(device):
    if device is None:
        return _default_cuda_device()
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)  # torch.device
    if getattr(device, "type", None) == "cuda":
        return _default_cuda_device() if index is None else index
    s = str(device)
    if s == "cuda":
        return _default_cuda_device()
    if s.startswith("cuda:"):
        return int(s[5:])
    raise ValueError(f"ferry.device: not a CUDA device: {device!r}")


def _cuda_target(dst):
    """(device pointer, bytes, ordinal or None, torch tensor or None) of a
    contiguous CUDA tensor or __cuda_array_interface__ object."""
    if hasattr(dst, "data_ptr") and hasattr(dst, "element_size"):
        if getattr(dst.device, "type", None) != "cuda":
            raise ValueError(f"ferry.device.upload_direct: dst is on {dst.device}, not on a CUDA device")
        if not dst.is_contiguous():
            raise ValueError("ferry.device.upload_direct: dst must be contiguous")
        return dst.data_ptr(), dst.numel() * dst.element_size(), dst.device.index, dst
    iface = getattr(dst, "__cuda_array_interface__", None)
    if iface is None:
        raise TypeError(f"ferry.device.upload_direct: dst ({type(dst).__name__}) is neither a CUDA tensor nor has "
                        "__cuda_array_interface__")
    if iface.get("strides") is not None:
        raise ValueError("ferry.device.upload_direct: dst must be C-contiguous (strides None)")
    n = int(iface["typestr"][2:])
    for d in iface["shape"]:
        n *= d
    return iface["data"][0], n, None, None


def upload_direct(client, dst, src, *, stream=None):
    """A direct upload into CUDA memory of this process: ferry stages `src`
    (host bytes: a buffer-protocol object or a contiguous CPU tensor) into
    the client's pinned staging memory, and `stream` copies it into `dst`
    (a contiguous CUDA tensor, or an object with __cuda_array_interface__),
    from its start, in the stream's own order: kernels queued on the stream
    after this call see the new bytes, kernels before it the old ones. No
    ferryd between the copy and your kernels, and no wait: returns the
    ticket (ferry.DIRECT_TICKET set) once `src` may be reused.

    stream: a torch.cuda.Stream or a raw CUstream handle; default torch's
    current stream on dst's device (the legacy default stream for other
    arrays). Other streams wait for the bytes with
    ferry.device.stream_wait(client, stream, ticket), the host with
    client.wait(ticket). The client's segment is registered with the
    device's context on first use (and unregistered when the client
    closes). See libferry(3), "Direct uploads", for when these beat
    ferry's daemon-appended uploads."""
    from . import _cuda

    ptr, nbytes, ordinal, tensor = _cuda_target(dst)
    cu = _cuda.driver()
    if ordinal is None:
        ordinal = _default_cuda_device()
    if stream is None:
        torch = sys.modules.get("torch")
        stream = torch.cuda.current_stream(tensor.device).cuda_stream if tensor is not None and torch else 0
    handle = getattr(stream, "cuda_stream", stream)
    _, ops = cu.context(ordinal)
    if not ops:
        raise RuntimeError("ferry: this GPU lacks 64-bit stream memory operations (cuStreamWriteValue64)")
    state = ctypes.c_int()
    cu.call(ordinal, cu.cuStreamIsCapturing, _cuda.CUstream(handle), ctypes.byref(state), what="cuStreamIsCapturing")
    if state.value != 0:
        raise RuntimeError("ferry.device.upload_direct: the stream is being captured into a graph; a replay would "
                           "copy staging bytes that ferry has recycled since")
    word = register(client, ordinal)
    with _spans([src]) as spans:
        (address, n), = spans
        if n > nbytes:
            raise ValueError(f"ferry.device.upload_direct: {n} bytes do not fit in dst ({nbytes} bytes)")

        def copy(off, staging, k):
            cu.call(ordinal, cu.cuMemcpyHtoDAsync, _cuda.CUdeviceptr(ptr + off), staging, k, _cuda.CUstream(handle),
                    what="cuMemcpyHtoDAsync")

        def write(_word, value):
            cu.write_value(ordinal, handle, word, value)

        ctx, _ = cu.context(ordinal)
        # Stream 0 is the legacy stream of each device's context: the context names it too.
        return client._upload_direct_raw(address, n, copy, write, handle or 1, ctx.value or 0)


def register(client, device=None):
    """Registers the client's staging memory and timeline words with the
    CUDA context of `device` (an ordinal, "cuda:N" or torch.device; default
    torch's current device), once; upload_direct does it on first use.
    Registering may wait for the context's queued work (the driver maps the
    pages): do it before a stream waits on something that needs this process
    to go on. Undone when the client closes. Returns the device address of
    the direct timeline word."""
    from . import _cuda

    ordinal = _ordinal(device)
    # Once per client and device: upload_direct calls this on every upload.
    words = client.__dict__.setdefault("_direct_words", {})
    if ordinal in words:
        return words[ordinal]
    cu = _cuda.driver()
    tl = client.timeline()
    _forget_pages_at_close(cu, client)
    info = client.info()
    staging_bytes = info.slot_count * info.slot_bytes
    cu.register_range(ordinal, tl.segment + tl.segment_bytes - staging_bytes, staging_bytes)
    words[ordinal] = cu.device_word(ordinal, tl.direct_completed_address)
    return words[ordinal]


def stream_wait(client, stream, ticket):
    """Work queued on `stream` (a torch.cuda.Stream or raw handle) after
    this starts once `ticket` is on the device: a direct upload's (its
    client's direct word) or a daemon-appended one's (the timeline word)."""
    from . import _cuda
    from ._api import DIRECT_TICKET

    cu = _cuda.driver()
    ordinal = _default_cuda_device()
    tl = client.timeline()
    if ticket & DIRECT_TICKET:
        address, value = tl.direct_completed_address, ticket & ~DIRECT_TICKET
    else:
        address, value = tl.device_completed_address, ticket
    cu.wait_value(ordinal, getattr(stream, "cuda_stream", stream), cu.device_word(ordinal, address), value)


def open(buffer, device=None, *, context=None):  # noqa: A001 - ferry.device.open, as io.open
    """Opens `buffer` (a ferry.Buffer this client allocated) in this
    process's GPU context: a DeviceBuffer. CUDA: device is an ordinal, "cuda:N"
    or a torch.device (default: torch's current device, else 0). Level Zero:
    device is the index of a device of the first driver (default 0), context
    a ze_context_handle_t of yours (default: one ferry makes). Opening a
    buffer again returns the mapping already open."""
    maps = buffer._maps
    h = buffer.export()
    if h.kind == 2:
        key = ("cuda", _ordinal(device))
    elif h.kind == 1:
        key = ("level-zero", 0 if device is None else int(device), None if context is None else int(context))
    else:
        raise RuntimeError(f"ferry.device: the daemon exports this buffer as kind {h.kind}, which ferry cannot open")
    with buffer._maps_lock:
        m = maps.get(key)
        if m is not None and not m.closed:
            if h.fd >= 0:
                os.close(h.fd)
            return m
        m = DeviceBuffer(buffer, h, key)
        maps[key] = m
        return m


def alloc(client, nbytes, device=None, *, context=None):
    """nbytes of device memory of this process's own GPU context, handed to
    ferryd (Client.import_buffer) so that uploads through ferry, this
    client's or those of processes it grants the buffer to, land in it: a
    DeviceBuffer, whose .buffer is the owned ferry.Buffer (fence, grant,
    upload_gather as an allocation's). device and context as for open(); the
    backend is ferryd's (CUDA: cuMemAlloc in the device's primary context;
    Level Zero: zeMemAllocDevice).

    Unlike a buffer from Client.alloc opened with open() (an IPC export of
    ferryd's memory, charged to the user until ferryd restarts, since ferryd
    cannot see the mapping end), this memory is charged only while ferryd
    maps it: Buffer.free() returns once ferryd let go of it, then gives it
    back to the driver; so does the client's close(), for those still
    alive. A process that ends takes its memory with it."""
    n = int(nbytes)
    if n <= 0:
        raise ValueError(f"ferry.device.alloc: {nbytes} bytes")
    backend = client.info().backend
    if backend == "cuda":
        from . import _cuda

        cu = _cuda.driver()
        key = ("cuda", _ordinal(device))
        ptr = cu.mem_alloc(key[1], n)

        def give_back(cu=cu, ordinal=key[1], ptr=ptr):
            cu.mem_free(ordinal, ptr)

        try:
            handle = IpcHandle(2, -1, n, cu.ipc_handle(key[1], ptr))
        except BaseException:
            give_back()
            raise
    elif backend == "level-zero":
        from . import _ze

        ze = _ze.loader()
        index = 0 if device is None else int(device)
        ctx = context if context is not None else ze.context()
        key = ("level-zero", index, None if context is None else int(context))
        ptr = ze.alloc_device(ctx, ze.devices[index], n)

        def give_back(ze=ze, ctx=ctx, ptr=ptr):
            ze.free(ctx, ptr)

        try:
            raw, fd = ze.ipc_handle(ctx, ptr)
            handle = IpcHandle(1, fd, n, raw)
        except BaseException:
            give_back()
            raise
    else:
        raise RuntimeError(f"ferry.device.alloc: ferryd's backend is {backend!r}, which ferry cannot allocate for")
    try:
        buffer = client.import_buffer(handle)
    except BaseException:
        give_back()
        raise
    m = DeviceBuffer(buffer, None, key, own=ptr)
    buffer._maps[key] = m
    buffer._unmapped = give_back
    _keep_until_close(client, buffer)
    return m


def _keep_until_close(client, buffer):
    """The client's close() frees its imports still alive (ferryd answers each
    free once it let go of the memory), before it disconnects."""
    own = client.__dict__.get("_own_memory")
    if own is None:
        own = client._own_memory = {}

        def free_all():
            for b in list(own.values()):
                try:
                    b.free()
                except Exception:  # noqa: BLE001 - closing anyway; a mapping still viewed keeps its memory
                    pass
            own.clear()

        client._closers.append(free_all)
    own[buffer.id] = buffer
    ident = buffer.id
    unmapped = buffer._unmapped

    def forget():
        own.pop(ident, None)
        unmapped()

    buffer._unmapped = forget


class DeviceBuffer:
    """A ferry buffer mapped into this process's GPU context (ferry.device.open),
    or memory of that context that ferryd maps (ferry.device.alloc)."""

    def __init__(self, buffer, handle, key, own=None):
        self.buffer = buffer
        self.nbytes = buffer.size
        self.kind = key[0]
        self.closed = False
        self._views = 0
        self._closing = False
        self._lock = threading.Lock()
        self._pid = os.getpid()  # a forked child never calls the driver for it
        self._own = own is not None  # this process's memory: the buffer's free gives it back
        if self._own:
            self.ptr = own
            self.device = key[1]
            if self.kind == "cuda":
                from . import _cuda

                self._cuda = _cuda.driver()
                _forget_pages_at_close(self._cuda, buffer.client)
            else:
                from . import _ze

                self._ze = _ze.loader()
                self._context = key[2] if key[2] is not None else self._ze.context()
        elif self.kind == "cuda":
            from . import _cuda

            self._cuda = _cuda.driver()
            self.device = key[1]
            self.ptr, where = self._cuda.ipc_open(self.device, handle.data)
            if where not in (-1, self.device):
                self._cuda.ipc_close(self.device, self.ptr)
                raise RuntimeError(
                    f"ferry.device: the buffer is on CUDA device {where}, not {self.device}: open it with "
                    f"device={where} (the GPU that ferryd serves)")
            _forget_pages_at_close(self._cuda, buffer.client)
        else:
            from . import _ze

            ze = _ze.loader()
            self._ze = ze
            self.device = key[1]
            self._context = key[2] if key[2] is not None else ze.context()
            self.ptr = ze.ipc_open(self._context, ze.devices[self.device], handle.data, handle.fd)

    def __repr__(self):
        state = "closed" if self.closed else f"{self._views} views"
        return f"<ferry.device.DeviceBuffer of buffer {self.buffer.id}, {self.nbytes} bytes on {self.kind}:{self.device}, {state}>"

    def array(self, dtype, shape=None, offset=0, strides=None, ready=None, stream=None):
        """A view of the mapped bytes from `offset` as `shape` of `dtype`
        (a name, numpy dtype or torch.dtype; shape default: as many as fit;
        strides in bytes, default C order). ready: a Ready, or (fence, value):
        the array is ready once that value was published into the fence.
        stream: the CUDA stream (a handle) that __cuda_array_interface__ waits
        on and names (default 0, the legacy default stream)."""
        if self.closed or self._closing:
            raise ValueError("ferry.device: the mapping is closed")
        return DeviceArray(self, dtype, shape, offset, strides, ready, stream)

    def _add_view(self):
        with self._lock:
            self._views += 1

    def _drop_view(self):
        with self._lock:
            self._views -= 1
            last = self._views == 0 and self._closing
        if last:
            self._unmap()

    @property
    def views(self):
        """How many arrays made from this mapping are alive."""
        return self._views

    def close(self):
        """Closes the mapping, now if no array made from it lives, else once
        the last one goes. The buffer itself stays allocated."""
        with self._lock:
            if self.closed or self._closing:
                return
            self._closing = True
            now = self._views == 0
        if now:
            self._unmap()

    def _unmap(self):
        with self._lock:
            if self.closed:
                return
            self.closed = True
        if self._pid != os.getpid() or self._own:
            # The parent's mapping (a driver call here would be its context's,
            # in a fork); or this process's memory, which the buffer's free
            # gives back once ferryd no longer maps it.
            return
        if self.kind == "cuda":
            self._cuda.ipc_close(self.device, self.ptr)
        else:
            self._ze.ipc_close(self._context, self.ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _forget_pages_at_close(cu, client):
    """The fences' pages go from this process's contexts before the segment goes."""
    if not getattr(client, "_cuda_pages", False):
        client._cuda_pages = True
        client._closers.append(lambda: _forget_segment(cu, client))


def _forget_segment(cu, client):
    tl = client.timeline()
    cu.forget_pages(tl.segment, tl.segment_bytes)


class DeviceArray:
    """A typed view of a DeviceBuffer (DeviceBuffer.array): data pointer,
    shape, dtype; __cuda_array_interface__ and __dlpack__ for other libraries."""

    def __init__(self, mapping, dtype, shape, offset, strides, ready, stream):
        self.mapping = mapping
        self.dtype = dtype_name(dtype)
        self.itemsize, self._typestr = _DTYPES[self.dtype]
        offset = int(offset)
        if offset < 0 or offset > mapping.nbytes:
            raise ValueError(f"offset {offset} outside the buffer's {mapping.nbytes} bytes")
        if shape is None:
            shape = ((mapping.nbytes - offset) // self.itemsize,)
        self.shape = tuple(int(d) for d in ([shape] if isinstance(shape, int) else shape))
        if any(d < 0 for d in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        if self.strides is not None and (len(self.strides) != len(self.shape) or any(s % self.itemsize for s in self.strides)):
            raise ValueError("strides: one per dimension, each a multiple of the item size")
        extent = self._extent()
        if offset + extent > mapping.nbytes:
            raise ValueError(f"{self.shape} of {self.dtype} from offset {offset} ends past the buffer's "
                             f"{mapping.nbytes} bytes")
        self.offset = offset
        self.ptr = mapping.ptr + offset
        self.nbytes = self.itemsize * _prod(self.shape)
        self.ready = ready if ready is None or isinstance(ready, Ready) else Ready(*ready)
        self.stream = 0 if stream is None else int(stream)
        mapping._add_view()
        weakref.finalize(self, mapping._drop_view)

    def _extent(self):
        if any(d == 0 for d in self.shape):
            return 0
        if self.strides is None:
            return self.itemsize * _prod(self.shape)
        return self.itemsize + sum((d - 1) * s for d, s in zip(self.shape, self.strides) if s > 0)

    def __repr__(self):
        return f"<ferry.device.DeviceArray {self.dtype}{list(self.shape)} at 0x{self.ptr:x} ({self.mapping.kind})>"

    def wait(self, timeout=None):
        """Until the array is ready, on the host (no-op without `ready`)."""
        if self.ready is not None:
            self.ready.wait(timeout)

    @property
    def __cuda_array_interface__(self):
        if self.mapping.kind != "cuda":
            raise AttributeError("__cuda_array_interface__: not a CUDA buffer")
        if self._typestr is None:
            raise TypeError(f"__cuda_array_interface__ has no type for {self.dtype}: use __dlpack__")
        iface = {"shape": self.shape, "typestr": self._typestr, "data": (self.ptr, False), "version": 3,
                 "strides": self.strides}
        if self.ready is not None:
            # The wait is queued on this stream now, as the consumer takes the
            # interface: it orders its own stream after this one.
            self.ready.queue_wait(self.mapping, self.stream)
            iface["stream"] = 1 if self.stream == 0 else self.stream
        else:
            iface["stream"] = None
        return iface

    def torch(self, stream=None):
        """This array as a torch.Tensor on its CUDA device, without a copy.
        The tensor keeps the array (and so the mapping) alive through a
        Python reference that torch drops when the tensor goes: no ferry
        code runs then. (A DLPack deleter written in Python, which is all
        ctypes can make, may be called by torch while an exception is being
        raised, when no Python code may run: the exception was lost and the
        array never let go.) With `ready`, the wait is queued on `stream` (a
        torch.cuda.Stream or handle; default torch's current stream)."""
        import torch

        if self.mapping.kind != "cuda":
            raise TypeError("ferry.device: DeviceArray.torch() is for CUDA buffers")
        dev = torch.device("cuda", self.mapping.device)
        if self.ready is not None:
            handle = torch.cuda.current_stream(dev).cuda_stream if stream is None else getattr(stream, "cuda_stream",
                                                                                                 stream)
            self.ready.queue_wait(self.mapping, int(handle))
        return self._torch_view()

    def _torch_view(self):
        """torch(), its wait (if any) queued already."""
        import torch

        dev = torch.device("cuda", self.mapping.device)
        extent = self._extent()
        t = torch.as_tensor(_Bytes(self, extent), device=dev)  # uint8, the array's bytes; keeps it alive
        if extent == 0:
            return torch.empty(self.shape, dtype=getattr(torch, self.dtype), device=dev)
        t = t.view(getattr(torch, self.dtype))
        if self.strides is None:
            return t.view(self.shape)
        return t.as_strided(self.shape, tuple(st // self.itemsize for st in self.strides))

    def __dlpack_device__(self):
        if self.mapping.kind == "cuda":
            return (_dlpack.kDLCUDA, self.mapping.device)
        return (_dlpack.kDLOneAPI, self.mapping.device)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this array. CUDA: `stream` is the consumer's
        (None or 1: the legacy default stream, 2: the per-thread one, -1: do
        not synchronise, else a handle); with `ready`, the wait is queued on
        it. Level Zero: with `ready`, this waits on the host first."""
        if copy:
            raise BufferError("ferry.device: copy=True is not supported (the array is the buffer itself)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"ferry.device: cannot export to device {dl_device}")
        if self.ready is not None:
            if self.mapping.kind == "cuda":
                if stream != -1:
                    self.ready.queue_wait(self.mapping, 0 if stream in (None, 1) else int(stream))
            else:
                self.ready.wait()
        if self.strides is None:  # C order, said outright: some consumers take no NULL strides
            strides, step = [], 1
            for d in reversed(self.shape):
                strides.append(step)
                step *= max(d, 1)
            strides = tuple(reversed(strides))
        else:
            strides = tuple(s // self.itemsize for s in self.strides)
        torch = sys.modules.get("torch")
        if self.mapping.kind == "cuda" and torch is not None:
            # torch's capsule: its deleter is torch's own code, which lets go
            # of this array like any Python reference (see torch()).
            return torch.utils.dlpack.to_dlpack(self._torch_view())
        dev_type, dev_id = self.__dlpack_device__()
        return _dlpack.capsule(self, self.ptr, dev_type, dev_id, self.dtype, self.shape, strides)


class _Bytes:
    """The bytes of a DeviceArray as a flat uint8 __cuda_array_interface__
    (no stream: the array's wait, if any, is queued already), holding the
    array: torch.as_tensor keeps this object until its tensor goes."""

    def __init__(self, array, extent):
        self.array = array
        self.__cuda_array_interface__ = {"shape": (extent,), "typestr": "|u1", "data": (array.ptr, False),
                                         "version": 3, "strides": None, "stream": None}


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n
