# SPDX-License-Identifier: MIT
"""Finding libferry and declaring its C functions (ferry/ferry.h)."""

import ctypes
import ctypes.util
import os

c_client_p = ctypes.c_void_p
c_buffer = ctypes.c_uint64
c_ticket = ctypes.c_uint64


class Token(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * 32)]


class IpcHandle(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("fd", ctypes.c_int32),
        ("bytes", ctypes.c_uint64),
        ("data", ctypes.c_uint8 * 64),
    ]


class CTimeline(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("device_written", ctypes.c_int32),
        ("segment", ctypes.c_void_p),
        ("segment_bytes", ctypes.c_uint64),
        ("device_completed", ctypes.POINTER(ctypes.c_uint64)),
        ("app_value", ctypes.POINTER(ctypes.c_uint64)),
        ("direct_completed", ctypes.POINTER(ctypes.c_uint64)),
    ]


DIRECT_COPY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64)
DIRECT_WRITE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64)
DIRECT_TICKET = 1 << 63


class CDirectOps(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("ctx", ctypes.c_void_p),
        ("queue", ctypes.c_uint64),
        ("queue_context", ctypes.c_uint64),
        ("copy", DIRECT_COPY),
        ("write", DIRECT_WRITE),
    ]


DIRECT_NO_WAIT = 1 << 0

STAGING_ATTACH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64)
STAGING_DETACH = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64)


class CStagingHooks(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("ctx", ctypes.c_void_p),
        ("attach", STAGING_ATTACH),
        ("detach", STAGING_DETACH),
    ]


PASS_REASONS = 10


class CRunCounts(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("role", ctypes.c_uint32),
        ("staged", ctypes.c_uint64),
        ("staged_bytes", ctypes.c_uint64),
        ("passed", ctypes.c_uint64 * PASS_REASONS),
        ("passed_bytes", ctypes.c_uint64),
    ]


class CReservation(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_uint64),
        ("ticket", ctypes.c_uint64),
        ("staging", ctypes.c_uint64),
    ]


class CIovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("bytes", ctypes.c_uint64)]


class CUploadOpts(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("after", ctypes.c_uint64),
        ("after_release", ctypes.c_uint64),
        ("publish", ctypes.c_uint64),
    ]


class CFence(ctypes.Structure):
    _fields_ = [
        ("ready", ctypes.POINTER(ctypes.c_uint64)),
        ("released", ctypes.POINTER(ctypes.c_uint64)),
        ("failed", ctypes.POINTER(ctypes.c_uint64)),
    ]


class CInfo(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("slot_count", ctypes.c_uint32),
        ("client_id", ctypes.c_uint64),
        ("slot_bytes", ctypes.c_uint64),
        ("device", ctypes.c_char * 64),
        ("backend", ctypes.c_char * 16),
        ("daemon_pid", ctypes.c_int32),
        ("reserved", ctypes.c_uint32),
    ]


def _candidates():
    env = os.environ.get("FERRY_LIBRARY")
    if env:
        yield env
    # The wheel's own (scripts/wheel.sh): beside ferry-run and its interposers.
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "_native", "libferry.so.0")
    if os.path.exists(bundled):
        yield bundled
    # Where `cmake --install` put the library this package came with.
    try:
        from ._build import LIBRARY
    except ImportError:
        LIBRARY = None
    if LIBRARY:
        yield LIBRARY
    found = ctypes.util.find_library("ferry")
    if found:
        yield found
    yield "libferry.so.0"
    # An installed package next to an installed library (prefix/lib/...).
    for up in ("../../..", "../../../.."):
        base = os.path.normpath(os.path.join(here, up))
        for sub in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            yield os.path.join(base, sub, "libferry.so.0")


def load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path, use_errno=True)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        _declare(lib)
        return lib
    raise ImportError(
        "ferry: libferry.so.0 not found (install ferry, or set FERRY_LIBRARY to its path); tried: "
        + "; ".join(errors)
    )


def _declare(lib):
    P = ctypes.POINTER
    u64, i64, u32, i32 = ctypes.c_uint64, ctypes.c_int64, ctypes.c_uint32, ctypes.c_int
    vp = ctypes.c_void_p
    sig = {
        "ferry_connect": (i32, [ctypes.c_char_p, P(c_client_p)]),
        "ferry_connect_named": (i32, [ctypes.c_char_p, ctypes.c_char_p, P(c_client_p)]),
        "ferry_disconnect": (None, [c_client_p]),
        "ferry_buffer_alloc": (i32, [c_client_p, u64, P(c_buffer)]),
        "ferry_buffer_free": (i32, [c_client_p, c_buffer]),
        "ferry_buffer_size": (i32, [c_client_p, c_buffer, P(u64)]),
        "ferry_upload": (i32, [c_client_p, c_buffer, u64, vp, u64, P(c_ticket)]),
        "ferry_upload_after": (i32, [c_client_p, c_buffer, u64, vp, u64, u64, P(c_ticket)]),
        "ferry_upload_reserve": (i32, [c_client_p, u64, P(CReservation)]),
        "ferry_upload_commit": (i32, [c_client_p, P(CReservation), c_buffer, u64, P(c_ticket)]),
        "ferry_upload_cancel": (i32, [c_client_p, P(CReservation)]),
        "ferry_upload_gather": (i32, [c_client_p, c_buffer, u64, P(CIovec), ctypes.c_size_t, P(CUploadOpts),
                                      P(c_ticket)]),
        "ferry_buffer_fence": (i32, [c_client_p, c_buffer, P(CFence)]),
        "ferry_fence_wait": (i32, [c_client_p, c_buffer, u64, i64]),
        "ferry_upload_direct": (i32, [c_client_p, vp, u64, P(CDirectOps), P(c_ticket)]),
        "ferry_wait": (i32, [c_client_p, c_ticket, i64]),
        "ferry_flush": (i32, [c_client_p, i64]),
        "ferry_download": (i32, [c_client_p, c_buffer, u64, vp, u64]),
        "ferry_buffer_grant": (i32, [c_client_p, c_buffer, u32, P(Token)]),
        "ferry_buffer_revoke": (i32, [c_client_p, c_buffer, P(Token)]),
        "ferry_buffer_open": (i32, [c_client_p, P(Token), P(c_buffer), P(u64)]),
        "ferry_buffer_export": (i32, [c_client_p, c_buffer, P(IpcHandle)]),
        "ferry_buffer_import": (i32, [c_client_p, P(IpcHandle), P(c_buffer)]),
        "ferry_get_timeline": (i32, [c_client_p, P(CTimeline)]),
        "ferry_signal": (i32, [c_client_p, u64]),
        "ferry_get_info": (i32, [c_client_p, P(CInfo)]),
        "ferry_completed": (c_ticket, [c_client_p]),
        "ferry_connection_error": (i32, [c_client_p]),
        "ferry_socket_path": (ctypes.c_char_p, [c_client_p]),
        "ferry_strerror": (ctypes.c_char_p, [i32]),
        "ferry_version": (ctypes.c_char_p, []),
        "ferry_last_error": (ctypes.c_char_p, []),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
