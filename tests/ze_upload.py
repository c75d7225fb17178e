# SPDX-License-Identifier: MIT
"""An unmodified Level Zero program in Python: ctypes on the system's loader
(libze_loader.so.1), as a Python runtime would reach it. For each size it
holds an immediate command list on an event, appends a copy from a ctypes
buffer (pageable memory) into device memory, overwrites the buffer as soon
as the call returns, then lets the list go and reads the device back:
prints "SIZE original|overwritten|mixed" (ze_upload.c's hazard mode).

usage: python3 ze_upload.py SIZE...
"""
import ctypes
import sys

ze = ctypes.CDLL("libze_loader.so.1")
vp = ctypes.c_void_p


class Desc(ctypes.Structure):  # stype, pNext, then up to five 32-bit fields
    _fields_ = [("stype", ctypes.c_uint32), ("pnext", vp), ("a", ctypes.c_uint32), ("b", ctypes.c_uint32),
                ("c", ctypes.c_uint32), ("d", ctypes.c_uint32), ("e", ctypes.c_uint32)]


def ok(r, what):
    if r != 0:
        sys.exit(f"ze_upload.py: {what} failed: {r:#x}")


def pattern(n, second):
    block = bytes(range(256)) if not second else bytes(range(255, -1, -1))  # never equal at one place
    return (block * (n // 256 + 1))[:n]


def main(sizes):
    ok(ze.zeInit(0), "zeInit")
    count, drv = ctypes.c_uint32(1), vp()
    ok(ze.zeDriverGet(ctypes.byref(count), ctypes.byref(drv)), "zeDriverGet")
    count, dev = ctypes.c_uint32(1), vp()
    ok(ze.zeDeviceGet(drv, ctypes.byref(count), ctypes.byref(dev)), "zeDeviceGet")
    ctx = vp()
    ok(ze.zeContextCreate(drv, ctypes.byref(Desc(0xD)), ctypes.byref(ctx)), "zeContextCreate")
    lst = vp()
    qd = Desc(0xE, None, 0, 0, 0, 2, 0)  # ordinal, index, flags, mode asynchronous, priority
    ok(ze.zeCommandListCreateImmediate(ctx, dev, ctypes.byref(qd), ctypes.byref(lst)), "zeCommandListCreateImmediate")
    pool = vp()
    ok(ze.zeEventPoolCreate(ctx, ctypes.byref(Desc(0x10, None, 1, 2)), 1, ctypes.byref(dev), ctypes.byref(pool)),
       "zeEventPoolCreate")
    gate, done = vp(), vp()
    ok(ze.zeEventCreate(pool, ctypes.byref(Desc(0x11, None, 0, 4, 4)), ctypes.byref(gate)), "zeEventCreate")
    ok(ze.zeEventCreate(pool, ctypes.byref(Desc(0x11, None, 1, 4, 4)), ctypes.byref(done)), "zeEventCreate")
    for n in sizes:
        dst = vp()
        ok(ze.zeMemAllocDevice(ctx, ctypes.byref(Desc(0x15)), ctypes.c_size_t(n), ctypes.c_size_t(64), dev,
                               ctypes.byref(dst)), "zeMemAllocDevice")
        first, second = pattern(n, 0), pattern(n, 1)
        src = ctypes.create_string_buffer(first, n)
        ok(ze.zeEventHostReset(gate), "zeEventHostReset")
        ok(ze.zeEventHostReset(done), "zeEventHostReset")
        ok(ze.zeCommandListAppendBarrier(lst, None, 1, ctypes.byref(gate)), "zeCommandListAppendBarrier")
        ok(ze.zeCommandListAppendMemoryCopy(lst, dst, src, ctypes.c_size_t(n), None, 0, None),
           "zeCommandListAppendMemoryCopy")
        ctypes.memmove(src, second, n)  # the program reuses its buffer at once
        ok(ze.zeEventHostSignal(gate), "zeEventHostSignal")
        back = ctypes.create_string_buffer(n)
        ok(ze.zeCommandListAppendMemoryCopy(lst, back, dst, ctypes.c_size_t(n), done, 0, None), "read back")
        ok(ze.zeEventHostSynchronize(done, ctypes.c_uint64(2**64 - 1)), "zeEventHostSynchronize")
        got = back.raw
        print(n, "original" if got == first else "overwritten" if got == second else "mixed", flush=True)
        ok(ze.zeMemFree(ctx, dst), "zeMemFree")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]])
