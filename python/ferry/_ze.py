# SPDX-License-Identifier: MIT
"""Level Zero through ctypes (the system's libze_loader.so.1), opened on
first use: what ferry.device needs to open a buffer's IPC handle in a
context of this process. No compiled code."""

import ctypes
import os
import threading

ZE_STRUCTURE_TYPE_CONTEXT_DESC = 0xD
ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC = 0x15


class ZeIpcMemHandle(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint8 * 64)]


class ZeContextDesc(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32)]


class ZeDeviceMemAllocDesc(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("ordinal", ctypes.c_uint32)]


class ZeError(RuntimeError):
    """A Level Zero call failed: .code is its ze_result_t."""

    def __init__(self, what, code):
        super().__init__(f"{what}: Level Zero error 0x{code:x}")
        self.code = code


class LevelZero:
    """The loader's functions, a driver, its devices, and a context of this
    process's own (or the one the application passes to ferry.device)."""

    def __init__(self):
        try:
            lib = ctypes.CDLL("libze_loader.so.1")
        except OSError as e:
            raise RuntimeError(f"ferry: the Level Zero loader (libze_loader.so.1) cannot be loaded: {e}") from None
        self._lib = lib
        P, vp, u32 = ctypes.POINTER, ctypes.c_void_p, ctypes.c_uint32
        sig = {
            "zeInit": [u32],
            "zeDriverGet": [P(u32), P(vp)],
            "zeDeviceGet": [vp, P(u32), P(vp)],
            "zeContextCreate": [vp, P(ZeContextDesc), P(vp)],
            "zeMemOpenIpcHandle": [vp, vp, ZeIpcMemHandle, u32, P(vp)],
            "zeMemCloseIpcHandle": [vp, vp],
            "zeMemAllocDevice": [vp, P(ZeDeviceMemAllocDesc), ctypes.c_size_t, ctypes.c_size_t, vp, P(vp)],
            "zeMemFree": [vp, vp],
            "zeMemGetIpcHandle": [vp, vp, P(ZeIpcMemHandle)],
        }
        for name, args in sig.items():
            f = getattr(lib, name)
            f.restype = ctypes.c_int
            f.argtypes = args
        self._check(lib.zeInit(0), "zeInit")
        n = u32(1)
        self.driver = vp()
        self._check(lib.zeDriverGet(ctypes.byref(n), ctypes.byref(self.driver)), "zeDriverGet")
        if n.value == 0:
            raise RuntimeError("ferry: Level Zero found no driver")
        count = u32(0)
        self._check(lib.zeDeviceGet(self.driver, ctypes.byref(count), None), "zeDeviceGet")
        devices = (vp * count.value)()
        self._check(lib.zeDeviceGet(self.driver, ctypes.byref(count), devices), "zeDeviceGet")
        self.devices = [devices[i] for i in range(count.value)]
        self._context = None
        self._lock = threading.Lock()

    def _check(self, r, what):
        if r != 0:
            raise ZeError(what, r & 0xFFFFFFFF)

    def context(self):
        """A context of this process on the driver, made once."""
        with self._lock:
            if self._context is None:
                d = ZeContextDesc(ZE_STRUCTURE_TYPE_CONTEXT_DESC, None, 0)
                c = ctypes.c_void_p()
                self._check(self._lib.zeContextCreate(self.driver, ctypes.byref(d), ctypes.byref(c)), "zeContextCreate")
                self._context = c
            return self._context

    def ipc_open(self, context, device, handle, fd):
        """Opens an exported buffer (its handle names fd, this process's
        descriptor, which is closed once the memory is mapped)."""
        h = ZeIpcMemHandle()
        ctypes.memmove(h.data, handle, 64)
        p = ctypes.c_void_p()
        try:
            self._check(self._lib.zeMemOpenIpcHandle(context, device, h, 0, ctypes.byref(p)), "zeMemOpenIpcHandle")
        finally:
            if fd >= 0:
                os.close(fd)
        return p.value

    def ipc_close(self, context, ptr):
        self._check(self._lib.zeMemCloseIpcHandle(context, ptr), "zeMemCloseIpcHandle")

    def alloc_device(self, context, device, nbytes):
        """nbytes of device memory of `device` in `context`."""
        d = ZeDeviceMemAllocDesc(ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, None, 0, 0)
        p = ctypes.c_void_p()
        self._check(self._lib.zeMemAllocDevice(context, ctypes.byref(d), nbytes, 4096, device, ctypes.byref(p)),
                    f"zeMemAllocDevice({nbytes})")
        return p.value

    def free(self, context, ptr):
        self._check(self._lib.zeMemFree(context, ptr), "zeMemFree")

    def ipc_handle(self, context, ptr):
        """(64 handle bytes, fd): the allocation's IPC handle, whose first
        bytes are its descriptor (the driver's: not to be closed)."""
        h = ZeIpcMemHandle()
        self._check(self._lib.zeMemGetIpcHandle(context, ptr, ctypes.byref(h)), "zeMemGetIpcHandle")
        raw = bytes(h.data)
        return raw, int.from_bytes(raw[:4], "little", signed=True)


_loader = None
_loader_lock = threading.Lock()


def loader():
    """The process's LevelZero, made on first use."""
    global _loader
    with _loader_lock:
        if _loader is None:
            _loader = LevelZero()
        return _loader
