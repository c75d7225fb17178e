# SPDX-License-Identifier: MIT
"""The CUDA driver API through ctypes (libcuda.so.1), opened on first use:
what ferry.device needs to open a buffer in this process's own context and
to order a stream with a fence. Entry points come from cuGetProcAddress_v2 at
the CUDA 12 ABI, as ferryd's CUDA backend takes them; no compiled code."""

import ctypes
import threading

CUresult = ctypes.c_int
CUdevice = ctypes.c_int
CUcontext = ctypes.c_void_p
CUstream = ctypes.c_void_p
CUdeviceptr = ctypes.c_uint64

CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
CU_MEMHOSTREGISTER_PORTABLE = 1
CU_MEMHOSTREGISTER_DEVICEMAP = 2
CU_STREAM_WAIT_VALUE_GEQ = 0
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122
CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712


class CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_uint8 * 64)]


_P = ctypes.POINTER
_SIGNATURES = {
    "cuInit": [ctypes.c_uint],
    "cuDeviceGet": [_P(CUdevice), ctypes.c_int],
    "cuDeviceGetAttribute": [_P(ctypes.c_int), ctypes.c_int, CUdevice],
    "cuDevicePrimaryCtxRetain": [_P(CUcontext), CUdevice],
    "cuCtxPushCurrent": [CUcontext],
    "cuCtxPopCurrent": [_P(CUcontext)],
    "cuIpcOpenMemHandle": [_P(CUdeviceptr), CUipcMemHandle, ctypes.c_uint],
    "cuIpcCloseMemHandle": [CUdeviceptr],
    "cuIpcGetMemHandle": [_P(CUipcMemHandle), CUdeviceptr],
    "cuMemAlloc": [_P(CUdeviceptr), ctypes.c_size_t],
    "cuMemFree": [CUdeviceptr],
    "cuMemHostRegister": [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint],
    "cuMemHostUnregister": [ctypes.c_void_p],
    "cuMemHostGetDevicePointer": [_P(CUdeviceptr), ctypes.c_void_p, ctypes.c_uint],
    "cuStreamWaitValue64": [CUstream, CUdeviceptr, ctypes.c_uint64, ctypes.c_uint],
    "cuMemcpyHtoDAsync": [CUdeviceptr, ctypes.c_void_p, ctypes.c_size_t, CUstream],
    "cuStreamIsCapturing": [CUstream, _P(ctypes.c_int)],
    "cuStreamWriteValue64": [CUstream, CUdeviceptr, ctypes.c_uint64, ctypes.c_uint],
    "cuPointerGetAttribute": [ctypes.c_void_p, ctypes.c_int, CUdeviceptr],
    "cuGetErrorString": [CUresult, _P(ctypes.c_char_p)],
}


class CudaError(RuntimeError):
    """A CUDA driver call failed: .code is its CUresult."""

    def __init__(self, what, code, text):
        super().__init__(f"{what}: CUDA error {code} ({text})")
        self.code = code


class Cuda:
    """The driver's functions, and this process's primary contexts by device."""

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"ferry: the CUDA driver (libcuda.so.1) cannot be loaded: {e}") from None
        gpa = getattr(lib, "cuGetProcAddress_v2", None)
        if gpa is None:
            raise RuntimeError("ferry: this CUDA driver predates CUDA 12 (no cuGetProcAddress_v2)")
        gpa.restype = CUresult
        gpa.argtypes = [ctypes.c_char_p, _P(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p]
        for name, args in _SIGNATURES.items():
            ptr = ctypes.c_void_p()
            if gpa(name.encode(), ctypes.byref(ptr), 12000, 0, None) != 0 or not ptr.value:
                raise RuntimeError(f"ferry: the CUDA driver lacks {name}")
            setattr(self, name, ctypes.CFUNCTYPE(CUresult, *args)(ptr.value))
        self._lock = threading.Lock()
        self._contexts = {}
        self._registered = {}  # page address -> bytes, registered by ferry in this process
        self.check(self.cuInit(0), "cuInit")

    def check(self, r, what):
        if r != 0:
            s = ctypes.c_char_p()
            self.cuGetErrorString(r, ctypes.byref(s))
            raise CudaError(what, r, (s.value or b"unknown").decode(errors="replace"))

    def context(self, ordinal):
        """The primary context of device `ordinal` (the one PyTorch, CuPy and
        the runtime API use), retained once for this process."""
        with self._lock:
            ctx = self._contexts.get(ordinal)
            if ctx is None:
                dev = CUdevice()
                self.check(self.cuDeviceGet(ctypes.byref(dev), ordinal), f"cuDeviceGet({ordinal})")
                c = CUcontext()
                self.check(self.cuDevicePrimaryCtxRetain(ctypes.byref(c), dev), "cuDevicePrimaryCtxRetain")
                ops = ctypes.c_int()
                self.cuDeviceGetAttribute(ctypes.byref(ops), CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev)
                ctx = (c, bool(ops.value))
                self._contexts[ordinal] = ctx
            return ctx

    def call(self, ordinal, fn, *args, what=""):
        """fn(*args) with device `ordinal`'s primary context current."""
        ctx, _ = self.context(ordinal)
        self.check(self.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            r = fn(*args)
        finally:
            popped = CUcontext()
            self.cuCtxPopCurrent(ctypes.byref(popped))
        self.check(r, what or fn.__name__)

    def ipc_open(self, ordinal, handle):
        h = CUipcMemHandle()
        ctypes.memmove(h.reserved, handle, 64)
        p = CUdeviceptr()
        self.call(ordinal, self.cuIpcOpenMemHandle, ctypes.byref(p), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
                  what="cuIpcOpenMemHandle")
        where = ctypes.c_int(-1)
        self.call(ordinal, self.cuPointerGetAttribute, ctypes.byref(where), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p,
                  what="cuPointerGetAttribute")
        return p.value, where.value

    def ipc_close(self, ordinal, ptr):
        self.call(ordinal, self.cuIpcCloseMemHandle, CUdeviceptr(ptr), what="cuIpcCloseMemHandle")

    def mem_alloc(self, ordinal, nbytes):
        """nbytes of device memory in device `ordinal`'s primary context (a
        whole allocation of its own: its IPC handle maps exactly it)."""
        p = CUdeviceptr()
        self.call(ordinal, self.cuMemAlloc, ctypes.byref(p), nbytes, what=f"cuMemAlloc({nbytes})")
        return p.value

    def mem_free(self, ordinal, ptr):
        self.call(ordinal, self.cuMemFree, CUdeviceptr(ptr), what="cuMemFree")

    def ipc_handle(self, ordinal, ptr):
        """The 64 bytes of the allocation's CUipcMemHandle."""
        h = CUipcMemHandle()
        self.call(ordinal, self.cuIpcGetMemHandle, ctypes.byref(h), CUdeviceptr(ptr), what="cuIpcGetMemHandle")
        return bytes(h.reserved)

    def device_word(self, ordinal, address):
        """The device address of a word of host memory (a fence's), its page
        registered with every context of this process on first use."""
        page = address & ~4095
        with self._lock:
            known = page in self._registered
        if not known:
            ctx, ops = self.context(ordinal)
            if not ops:
                raise RuntimeError("ferry: this GPU lacks 64-bit stream memory operations (cuStreamWaitValue64)")
            self.check(self.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
            try:
                r = self.cuMemHostRegister(page, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)
            finally:
                self.cuCtxPopCurrent(ctypes.byref(CUcontext()))
            if r not in (0, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED):
                self.check(r, "cuMemHostRegister")
            with self._lock:
                self._registered[page] = 4096
        d = CUdeviceptr()
        self.call(ordinal, self.cuMemHostGetDevicePointer, ctypes.byref(d), address, 0, what="cuMemHostGetDevicePointer")
        return d.value

    def register_range(self, ordinal, start, nbytes):
        """Registers [start, start + nbytes) (page-aligned host memory, a
        segment's staging area) with every context of this process, once;
        forget_pages undoes it."""
        with self._lock:
            if start in self._registered:
                return
        ctx, _ = self.context(ordinal)
        self.check(self.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            r = self.cuMemHostRegister(start, nbytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)
        finally:
            self.cuCtxPopCurrent(ctypes.byref(CUcontext()))
        if r not in (0, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED):
            self.check(r, "cuMemHostRegister")
        with self._lock:
            self._registered[start] = nbytes

    def forget_pages(self, start, nbytes):
        """Unregisters the pages ferry registered inside [start, start + nbytes)
        (a segment about to be unmapped)."""
        with self._lock:
            pages = [p for p in self._registered if start <= p < start + nbytes]
            for p in pages:
                del self._registered[p]
        for p in pages:
            self.cuMemHostUnregister(p)

    def wait_value(self, ordinal, stream, word, value):
        """Work queued on `stream` after this starts once *word >= value."""
        self.call(ordinal, self.cuStreamWaitValue64, CUstream(stream), CUdeviceptr(word), value,
                  CU_STREAM_WAIT_VALUE_GEQ, what="cuStreamWaitValue64")

    def write_value(self, ordinal, stream, word, value):
        """Once `stream` gets here, the device writes value into *word."""
        self.call(ordinal, self.cuStreamWriteValue64, CUstream(stream), CUdeviceptr(word), value, 0,
                  what="cuStreamWriteValue64")


_driver = None
_driver_lock = threading.Lock()


def driver():
    """The process's Cuda, made on first use (RuntimeError without a driver)."""
    global _driver
    with _driver_lock:
        if _driver is None:
            _driver = Cuda()
        return _driver
