# SPDX-License-Identifier: MIT
"""Client, Buffer and errors over the C ABI."""

import contextlib
import ctypes
import errno as _errno
import os
import threading
import time
import weakref
from dataclasses import dataclass

from . import _lib

_c = _lib.load()

RIGHT_UPLOAD = 1
RIGHT_DOWNLOAD = 2
DIRECT_TICKET = _lib.DIRECT_TICKET  # set in the tickets of direct uploads (Client.upload_direct)


class Error(OSError):
    """A ferry call failed: .errno is the error number, str() ferry's message.

    errno.ECHILD: the client was connected by another process, of which this
    one is a fork (multiprocessing's and DataLoader's default start method on
    Linux); the message names both. Connect a Client in the child instead."""

    def __init__(self, code, what, detail=None):
        code = -code if code < 0 else code
        # libferry's own words for the call that just failed (the path, the
        # argument, the bound and its flag), else what the errno means: once.
        if detail is None:
            detail = _c.ferry_last_error().decode(errors="replace")
        msg = detail or _c.ferry_strerror(-code).decode(errors="replace")
        super().__init__(code, f"{what}: {msg}")

    def __reduce__(self):
        # As it is: a worker's error re-raised in the trainer says it once.
        return (_error_as_is, (self.errno, self.strerror))


def _error_as_is(code, text):
    e = Error.__new__(Error)
    OSError.__init__(e, code, text)
    return e


Error.__module__ = "ferry"  # ferry.Error, as users name it


def _check(r, what):
    if r != 0:
        raise Error(r, what)


def _u64(value, what, bits=64):
    """value as an unsigned integer of `bits` bits, or OverflowError/ValueError
    before it reaches C (ctypes would silently wrap it: -1 would become the
    largest ticket, value or buffer id)."""
    v = int(value)
    if v < 0:
        raise ValueError(f"{what} must be >= 0, not {v}")
    if v >> bits:
        raise OverflowError(f"{what} does not fit in {bits} bits: {v}")
    return v


def socket_path(socket=None):
    """The socket a Client(socket) connects to: socket, else $FERRY_SOCKET,
    else the default (/run/ferry/ferryd-0.sock)."""
    if socket is not None:
        return os.fsdecode(socket)
    return os.fsdecode(_c.ferry_socket_path(None))


def library_version():
    """The version of the libferry this package loaded."""
    return _c.ferry_version().decode()


# ---------------------------------------------------------------- buffer protocol
class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", ctypes.c_void_p),
    ]


_PyBUF_WRITABLE = 0x0001
_PyBUF_C_CONTIGUOUS = 0x0038  # PyBUF_STRIDES | 0x0020
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


@contextlib.contextmanager
def _view(obj, writable):
    """(address, length) of any C-contiguous buffer-protocol object, held
    (so it cannot move or shrink) until the block ends. No copy."""
    b = _PyBuffer()
    flags = _PyBUF_C_CONTIGUOUS | (_PyBUF_WRITABLE if writable else 0)
    try:
        _get_buffer(obj, ctypes.byref(b), flags)
    except (BufferError, TypeError) as e:
        need = "a writable, C-contiguous" if writable else "a C-contiguous"
        raise ValueError(f"ferry needs {need} buffer-protocol object ({type(obj).__name__}): {e}") from e
    try:
        yield b.buf or 0, b.len
    finally:
        _release_buffer(ctypes.byref(b))


def _timeout_ns(timeout):
    """None: wait for ever; else seconds (float)."""
    if timeout is None or timeout == float("inf"):
        return -1
    if not timeout >= 0:  # negative, or NaN
        raise ValueError(f"timeout must be None or >= 0 seconds, not {timeout}")
    return min(int(timeout * 1e9), (1 << 63) - 1)


@contextlib.contextmanager
def _spans(parts):
    """[(address, length), ...] of a list of sources, held until the block
    ends: buffer-protocol objects (C-contiguous), or CPU tensors that are
    contiguous (anything with data_ptr(), numel() and element_size(), such
    as torch.Tensor, which has no buffer protocol)."""
    with contextlib.ExitStack() as stack:
        out = []
        for p in parts:
            if hasattr(p, "data_ptr") and hasattr(p, "element_size"):
                if getattr(getattr(p, "device", None), "type", "cpu") != "cpu":
                    raise ValueError(f"ferry uploads from host memory, not from {p.device}")
                if not p.is_contiguous():
                    raise ValueError("ferry needs a contiguous tensor (call .contiguous())")
                out.append((p.data_ptr(), p.numel() * p.element_size()))
            else:
                out.append(stack.enter_context(_view(p, writable=False)))
        yield out


# ---------------------------------------------------------------- records
@dataclass(frozen=True)
class Info:
    """This client's id, staging geometry (slot_bytes: the largest transfer;
    slot_count), and the daemon's device and backend ("level-zero", "cuda")."""

    client_id: int
    slot_bytes: int
    slot_count: int
    device: str
    backend: str
    daemon_pid: int = 0  # ferryd's process as this one sees it (0: out of sight, another pid namespace)


@dataclass(frozen=True)
class Timeline:
    """Where this client's timeline words lie in its segment (see ferry.h)."""

    segment: int          # address of the mapped segment
    segment_bytes: int
    device_completed_address: int  # every ticket <= the word here is on the device
    app_value_address: int  # the application's value (upload_after)
    device_written: bool
    direct_completed_address: int = 0  # every direct upload numbered <= the word here is on the device


@dataclass(frozen=True)
class IpcHandle:
    """A buffer's IPC handle, to open in the consumer's own GPU context
    (zeMemOpenIpcHandle with `data` as ze_ipc_mem_handle_t, or
    cuIpcOpenMemHandle). Level Zero: `fd` is this process's descriptor of the
    memory, written into data's first bytes; close it (os.close) once opened.
    CUDA: fd is -1."""

    kind: int    # 1: Level Zero, 2: CUDA
    fd: int
    nbytes: int
    data: bytes  # 64 bytes


# ---------------------------------------------------------------- client
class Client:
    """A connection to ferryd. socket: its path; None reads $FERRY_SOCKET,
    else the default /run/ferry/ferryd-0.sock. name (str or bytes): what
    ferryctl shows for this client (its first 15 bytes kept, other than
    printable ASCII shown as ?); None or empty reads $FERRY_CLIENT_NAME, else
    the program's name. Use as a context manager, or call close(). Methods
    may be called from several threads at once."""

    def __init__(self, socket=None, name=None):
        self._c = _lib.c_client_p()
        self._closers = []  # called before the disconnect (registrations of the segment, say)
        self._pid = os.getpid()
        # Calls in flight, so that close() in one thread never frees the
        # connection under a call of another: it waits for them, and calls
        # after it raise.
        self._gate = threading.Condition()
        self._active = 0
        self._reservations = weakref.WeakSet()
        # Memory of reservations still referenced (their views, or arrays made
        # on them): the disconnect, which unmaps the segment, waits for the
        # last of them (_deferred holds the handle meanwhile).
        self._views = 0
        self._deferred = None
        self._closing = None  # (thread, handle) while close() runs the closers
        path = None if socket is None else os.fsencode(socket)
        label = None if name is None else name if isinstance(name, bytes) else os.fsencode(str(name))
        r = _c.ferry_connect_named(path, label, ctypes.byref(self._c))
        if r != 0:
            raise Error(r, "connect")  # the library's words say which socket and what to do
        self._daemon_pid = self.info().daemon_pid

    # ---- lifetime
    def close(self):
        """Disconnects; the daemon frees every buffer this client still holds.
        Safe while other threads use the client: it waits for their calls in
        flight to return, and later calls raise ferry.Error (ENOTCONN). The
        views of reservations not yet used are released (writing one raises
        ValueError). Where an array made on a reservation's view (used or
        not) still lives (numpy's frombuffer, say), the staging memory under
        it stays mapped, and the connection open, until the last such array
        is gone: writing it never touches memory ferry gave to anything else. In a forked child this
        only lets go of the child's copy of the connection (it belongs to the
        parent)."""
        if os.getpid() != self._pid:
            # A forked child: only its copy of the socket goes (no lock: it
            # may have been copied held).
            h, self._c = self._c, _lib.c_client_p()
            if h:
                _c.ferry_disconnect(h)
            return
        with self._gate:
            if not self._c:
                return
            h = self._c
            self._c = _lib.c_client_p()  # no new call starts, but the closers' own
            self._closing = (threading.get_ident(), h)
            while self._active:
                self._gate.wait()
        for f in reversed(self._closers):
            try:
                f()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        self._closers = []
        self._closing = None
        with self._gate:
            self._deferred = h
        for r in list(self._reservations):
            r._drop_view()
        self._disconnect_when_unviewed()

    def _view_made(self):
        with self._gate:
            self._views += 1

    def _view_gone(self):
        if os.getpid() != self._pid:
            return  # a forked child's copy: the gate may have been copied held, and nothing is its to close
        with self._gate:
            self._views -= 1
        self._disconnect_when_unviewed()

    def _disconnect_when_unviewed(self):
        """After close(): the disconnect, once no reservation memory is referenced."""
        with self._gate:
            h = self._deferred if self._views == 0 else None
            if h is not None:
                self._deferred = None
        if h is not None:
            _c.ferry_disconnect(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _call(self, fn, *args):
        """fn(handle, *args), with the handle kept alive until it returns."""
        closing = self._closing
        if closing is not None and closing[0] == threading.get_ident():
            return fn(closing[1], *args)  # a closer, run by close() itself
        if os.getpid() != self._pid:
            # A forked child: the lock may have been copied held; libferry
            # refuses the call itself (ECHILD).
            if not self._c:
                raise Error(-_errno.ENOTCONN, "ferry client", "closed")
            return fn(self._c, *args)
        with self._gate:
            if not self._c:
                raise Error(-_errno.ENOTCONN, "ferry client", "closed")
            h = self._c
            self._active += 1
        try:
            return fn(h, *args)
        finally:
            with self._gate:
                self._active -= 1
                if self._active == 0:
                    self._gate.notify_all()

    # ---- buffers
    def alloc(self, nbytes):
        """A device buffer of nbytes; a Buffer (a context manager that frees it)."""
        out = _lib.c_buffer()
        n = _u64(nbytes, "nbytes")
        _check(self._call(_c.ferry_buffer_alloc, n, ctypes.byref(out)), f"alloc {nbytes} bytes")
        return Buffer(self, out.value, n, owned=True)

    def import_buffer(self, handle):
        """Hands ferryd an allocation of this process's own GPU context (an
        IpcHandle: kind, the allocation's handle bytes, its size, and for
        Level Zero its descriptor, which stays the caller's), so that uploads
        can target it: an owned Buffer, with a fence, that may be granted.
        ferryd maps the allocation until Buffer.free() returns (or this
        client closes): free the memory only after that. ferry.device.alloc
        does all of this for you."""
        h = _lib.IpcHandle()
        h.kind = _u64(handle.kind, "kind", 32)
        h.fd = handle.fd
        h.bytes = _u64(handle.nbytes, "nbytes")
        data = bytes(handle.data)
        if len(data) != 64:
            raise ValueError(f"an IPC handle is 64 bytes, not {len(data)}")
        ctypes.memmove(h.data, data, 64)
        out = _lib.c_buffer()
        _check(self._call(_c.ferry_buffer_import, ctypes.byref(h), ctypes.byref(out)),
               f"import {handle.nbytes} bytes")
        return Buffer(self, out.value, h.bytes, owned=True)

    def open(self, token):
        """Opens a buffer another client granted (token: 32 bytes from Buffer.grant)."""
        t = _token(token)
        out, size = _lib.c_buffer(), ctypes.c_uint64()
        _check(self._call(_c.ferry_buffer_open, ctypes.byref(t), ctypes.byref(out), ctypes.byref(size)), "open")
        return Buffer(self, out.value, size.value, owned=False)

    # ---- transfers
    def upload(self, buffer, data, offset=0, after=None, release_after=None, publish=None):
        """Stages `data` (any C-contiguous buffer-protocol object, or a
        contiguous CPU tensor) and queues its copy to `buffer` at `offset`;
        returns the ticket once the bytes are staged (data may change right
        after). after: the copy waits until this client's application value
        reaches it (see signal()). release_after / publish: see
        upload_gather()."""
        return self.upload_gather(buffer, [data], offset, after, release_after, publish)

    def upload_gather(self, buffer, parts, offset=0, after=None, release_after=None, publish=None):
        """Uploads several sources back to back into `buffer` from `offset`,
        as one upload with one ticket: each part goes straight from where it
        lies into ferry's pinned staging memory (a batch collated from many
        samples needs no intermediate copy). Parts: buffer-protocol objects
        or contiguous CPU tensors.

        Across processes, on the device (the buffer's fence, Buffer.fence):
        release_after=v holds the copy until the buffer's owner released v
        (its queue is done reading what was there: write after read), and
        publish=v has the device write v into the fence right after the last
        byte, so that the owner's queue can wait for the bytes without this
        process telling it anything but v. Values should grow."""
        bid = _buffer_id(buffer)
        with _spans(parts) as spans:
            return self._upload_spans(bid, spans, offset, after, release_after, publish)

    def _upload_spans(self, bid, spans, offset=0, after=None, release_after=None, publish=None):
        """upload_gather of raw (address, length) pairs the caller keeps alive."""
        total = sum(n for _, n in spans)
        if total == 0:
            raise ValueError("nothing to upload (0 bytes)")
        iov = (_lib.CIovec * len(spans))(*[(a, n) for a, n in spans])
        opts = None
        if after is not None or release_after is not None or publish is not None:
            o = _lib.CUploadOpts()
            o.size = ctypes.sizeof(o)
            o.after = _u64(after or 0, "after")
            o.after_release = _u64(release_after or 0, "release_after")
            o.publish = _u64(publish or 0, "publish")
            opts = ctypes.byref(o)
        ticket = _lib.c_ticket()
        r = self._call(_c.ferry_upload_gather, bid, _u64(offset, "offset"), iov, len(spans), opts, ctypes.byref(ticket))
        _check(r, f"upload of {total} bytes to buffer {bid} at {offset}")
        return ticket.value

    def upload_direct(self, data, copy, write, queue=0, queue_context=0):
        """A direct upload, for a process with a GPU context of its own: ferry
        stages `data` (a C-contiguous buffer-protocol object, or a contiguous
        CPU tensor) into this client's pinned staging memory, then calls
        copy(dst_offset, staging_address, nbytes) to append each piece's copy
        to your queue and write(word_address, value) to append, after it, the
        device's write of this client's direct timeline word. Both are called
        in order, one at a time, maybe from libferry's staging threads;
        return nothing, or raise (the upload then fails with that exception
        raised here). queue: an int naming the queue (direct uploads of one
        client go to one queue at a time; a call on another first waits for
        the last one's). Returns the ticket (ferry.DIRECT_TICKET set) once
        data may be reused; never waits for the queue but for staging room.
        ferry.device.upload_direct does this for CUDA tensors and streams."""
        with _spans([data]) as spans:
            (address, nbytes), = spans
            return self._upload_direct_raw(address, nbytes, copy, write, queue, queue_context)

    def _upload_direct_raw(self, address, nbytes, copy, write, queue, queue_context=0):
        """upload_direct of raw memory (address, nbytes) the caller keeps alive."""
        if nbytes == 0:
            raise ValueError("nothing to upload (0 bytes)")
        failed = []

        def guard(fn, after_failure):
            def call(*args):
                if failed and not after_failure:
                    return -_errno.EIO  # the upload failed: no more copies of it
                try:
                    fn(*args)
                    return 0
                except BaseException as e:  # noqa: BLE001 - carried out of the C call, raised below
                    failed.append(e)
                    return -_errno.EIO
            return call

        # The write goes after a failed copy too: its number is done all the
        # same (a refused write would end the client).
        c_copy = _lib.DIRECT_COPY(guard(lambda _ctx, off, staging, n: copy(off, staging, n), False))
        c_write = _lib.DIRECT_WRITE(guard(lambda _ctx, word, value: write(word, value), True))
        ops = _lib.CDirectOps(size=ctypes.sizeof(_lib.CDirectOps), flags=0, ctx=None, queue=_u64(queue, "queue"),
                              queue_context=_u64(queue_context, "queue_context"), copy=c_copy, write=c_write)
        ticket = _lib.c_ticket()
        r = self._call(_c.ferry_upload_direct, address, nbytes, ctypes.byref(ops), ctypes.byref(ticket))
        if failed:
            raise Error(r or -_errno.EIO, f"direct upload of {nbytes} bytes",
                        f"your queue function raised {type(failed[0]).__name__}: {failed[0]}") from failed[0]
        _check(r, f"direct upload of {nbytes} bytes")
        return ticket.value

    def reserve(self, nbytes):
        """Pinned staging memory for one upload that you write in place (up to
        one slot, Info.slot_bytes): a Reservation. Fill reservation.view (a
        writable memoryview; numpy.frombuffer(r.view, dtype) gives an array on
        it), then r.commit(buffer, offset): one copy fewer than upload() from
        an array of your own. Until then this client's later transfers wait
        behind it. As a context manager, leaving the block without a commit
        gives it up (nothing is written)."""
        n = _u64(nbytes, "nbytes")
        made = []

        def reserve(h):
            # Inside the call's accounting: close() cannot unmap the segment
            # between the reservation and its view being counted.
            r = _lib.CReservation()
            rc = _c.ferry_upload_reserve(h, n, ctypes.byref(r))
            if rc == 0:
                made.append(Reservation(self, r))
            return rc

        _check(self._call(reserve), f"reserve {nbytes} bytes")
        self._reservations.add(made[0])
        return made[0]

    def download(self, buffer, out=None, offset=0, nbytes=None):
        """Copies device bytes back: into `out` (a writable C-contiguous
        buffer, filled entirely), or into a new bytearray of nbytes (default:
        the rest of the buffer from offset). Returns out, or the bytearray."""
        bid = _buffer_id(buffer)
        if out is None:
            if nbytes is None:
                if not isinstance(buffer, Buffer):
                    raise ValueError("download: give nbytes or out for a buffer id")
                nbytes = buffer.size - offset
            out = bytearray(int(nbytes))
        with _view(out, writable=True) as (addr, n):
            if n == 0:
                raise ValueError("nothing to download into (0 bytes)")
            self._download_to(bid, offset, addr, n)
        return out

    def _download_to(self, bid, offset, address, nbytes):
        """download into raw memory the caller owns (address, nbytes)."""
        _check(self._call(_c.ferry_download, bid, _u64(offset, "offset"), address, _u64(nbytes, "nbytes")),
               f"download of {nbytes} bytes")

    def wait(self, ticket, timeout=None):
        """Until the upload with this ticket is on the device (timeout: seconds,
        None for ever); raises its error if it failed."""
        _check(self._call(_c.ferry_wait, _u64(ticket, "ticket"), _timeout_ns(timeout)), f"wait for ticket {ticket}")

    def flush(self, timeout=None):
        """Until every upload so far is on the device; raises the oldest failure."""
        _check(self._call(_c.ferry_flush, _timeout_ns(timeout)), "flush")

    def connection_error(self):
        """0 while ferryd serves this client; once it stopped (or is stopping,
        as for a restart: -ESHUTDOWN) or the connection ended otherwise, the
        negative errno why. A closed client: -ENOTCONN. Does not block. The
        way back after a restart is a new Client."""
        try:
            return self._call(_c.ferry_connection_error)
        except Error:  # closed
            return -_errno.ENOTCONN

    @property
    def completed(self):
        """The highest ticket such that it and every earlier one are done (no wait)."""
        return self._call(_c.ferry_completed)

    # ---- queue order
    def signal(self, value):
        """Raises this client's application value (never lowers it): uploads
        made with after=v start once it reaches v."""
        _check(self._call(_c.ferry_signal, _u64(value, "value")), f"signal {value}")

    def timeline(self):
        """Where this client's timeline words lie in its segment (a Timeline)."""
        t = _lib.CTimeline(size=ctypes.sizeof(_lib.CTimeline))
        _check(self._call(_c.ferry_get_timeline, ctypes.byref(t)), "timeline")
        return Timeline(
            t.segment or 0,
            t.segment_bytes,
            ctypes.cast(t.device_completed, ctypes.c_void_p).value or 0,
            ctypes.cast(t.app_value, ctypes.c_void_p).value or 0,
            bool(t.device_written),
            ctypes.cast(t.direct_completed, ctypes.c_void_p).value or 0,
        )

    def info(self):
        """This client's geometry and device (an Info)."""
        i = _lib.CInfo(size=ctypes.sizeof(_lib.CInfo))
        _check(self._call(_c.ferry_get_info, ctypes.byref(i)), "info")
        return Info(i.client_id, i.slot_bytes, i.slot_count, i.device.decode(errors="replace"),
                    i.backend.decode(errors="replace"), i.daemon_pid)


def _forked(client, what):
    """ferry.Error ECHILD for `what`, used in a process forked from the client's."""
    return Error(-_errno.ECHILD, what,
                 f"this ferry client was connected by process {client._pid}; process {os.getpid()} is a fork of it "
                 "and does not map its staging memory: connect a Client in this process")


# Reservations whose view may still be open, so that a forked child (which
# does not map the staging memory: libferry leaves it out of the fork) gets
# ValueError from a view, not a signal.
_open_views = weakref.WeakSet()


def _release_views_in_child():
    for r in list(_open_views):
        r._drop_view()


os.register_at_fork(after_in_child=_release_views_in_child)


class Reservation:
    """Staging memory for one upload (Client.reserve): write into `view`,
    then commit() it to a buffer, or cancel() it. Either uses it up; the view
    must not be written after."""

    def __init__(self, client, c):
        self.client = client
        self._r = c
        self.nbytes = c.bytes
        memory = (ctypes.c_uint8 * c.bytes).from_address(c.data)
        # Alive while the view or anything made on it is, whatever becomes of
        # this object: the client's segment stays mapped until it goes.
        client._view_made()
        weakref.finalize(memory, client._view_gone)
        self.view = memoryview(memory).cast("B")
        _open_views.add(self)

    def __repr__(self):
        state = "open" if self._r.ticket else "used"
        return f"<ferry.Reservation of {self.nbytes} bytes, {state}>"

    def commit(self, buffer, offset=0):
        """Uploads the written bytes to `buffer` at `offset`; returns the ticket."""
        bid = _buffer_id(buffer)
        ticket = _lib.c_ticket()
        r = self.client._call(_c.ferry_upload_commit, ctypes.byref(self._r), bid, _u64(offset, "offset"),
                              ctypes.byref(ticket))
        self._drop_view()
        _check(r, f"commit of {self.nbytes} bytes to buffer {bid} at {offset}")
        return ticket.value

    def cancel(self):
        """Gives the reservation up: nothing is written anywhere."""
        r = self.client._call(_c.ferry_upload_cancel, ctypes.byref(self._r))
        self._drop_view()
        _check(r, "cancel of a reservation")

    def _drop_view(self):
        """Releases the view (an array made on it keeps the memory alive)."""
        try:
            self.view.release()
        except BufferError:
            pass  # a view of the view lives on

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._r.ticket:
            self.cancel()
        return False


class Fence:
    """The fence of a buffer this client allocated (Buffer.fence): three
    words in this client's segment that order uploads by other processes
    with this process's own work, on the device or on the host.

    ready: the last value an upload published into it (Client.upload_gather's
    publish), written by the device right after that upload's bytes landed.
    released: the last value this process (or its queue) released: uploads
    made with release_after <= it may start. failed: the value of the last
    publishing upload that failed (0: none)."""

    def __init__(self, buffer, c):
        self.buffer = buffer
        self._f = c

    def _word(self, fn):
        """fn() on the fence's words, which lie in the client's segment: only
        while the client is open (ferry.Error ENOTCONN after close), and only
        in the process that connected it (ECHILD in a forked child, which
        does not map the segment)."""
        client = self.buffer.client
        if os.getpid() != client._pid:
            raise _forked(client, "the fence of buffer %d" % self.buffer.id)
        return client._call(lambda _h: fn())

    @property
    def ready(self):
        """The last value published into the fence (read now)."""
        return self._word(lambda: self._f.ready[0])

    @property
    def released(self):
        """The last value released (read now)."""
        return self._word(lambda: self._f.released[0])

    @property
    def failed(self):
        """The value of the last publishing upload that failed; 0: none."""
        return self._word(lambda: self._f.failed[0])

    @property
    def ready_address(self):
        """The address of the ready word in this process (for a device wait on it)."""
        return ctypes.cast(self._f.ready, ctypes.c_void_p).value

    @property
    def released_address(self):
        """The address of the released word in this process (for a device write of it)."""
        return ctypes.cast(self._f.released, ctypes.c_void_p).value

    def release(self, value):
        """Releases the buffer up to `value` from the host: uploads into it
        made with release_after <= value may start."""
        v = _u64(value, "value")

        def store():
            self._f.released[0] = v

        self._word(store)

    def _fail_up_to(self, value):
        """Marks `value` failed and published, from the host, unless it was
        published already: for a fence whose ferryd went without a word (it
        was killed), so that a queue waiting on it goes on, and its consumer
        hears that the upload failed."""
        v = _u64(value, "value")

        def store():
            if self._f.ready[0] < v:
                self._f.failed[0] = v
                self._f.ready[0] = v

        self._word(store)

    def wait(self, value, timeout=None):
        """Until an upload published `value` (or more) into this fence, on the
        host; raises ferry.Error (EIO) if that upload failed, or on timeout."""
        b = self.buffer
        _check(b.client._call(_c.ferry_fence_wait, b.id, _u64(value, "value"), _timeout_ns(timeout)),
               f"wait for {value} on buffer {b.id}'s fence")

    def __repr__(self):
        return f"<ferry.Fence of buffer {self.buffer.id}: ready {self.ready}, released {self.released}>"


# Memory of imports whose ferryd went, given back once its process is gone
# (or, where its pid is out of sight, after a while): (pid, deadline, give_back).
_after_daemons = []
_after_lock = threading.Lock()
_after_thread = None


def _give_back_after(pid, give_back):
    global _after_thread
    with _after_lock:
        _after_daemons.append((pid, time.monotonic() + (60 if pid > 0 else 10), give_back))
        if _after_thread is None or not _after_thread.is_alive():
            _after_thread = threading.Thread(target=_give_back_due, name="ferry-give-back", daemon=True)
            _after_thread.start()


def _give_back_due():
    while True:
        time.sleep(0.05)
        now, due = time.monotonic(), []
        with _after_lock:
            for item in list(_after_daemons):
                pid, deadline, _ = item
                if (pid > 0 and not _alive(pid)) or now >= deadline:
                    _after_daemons.remove(item)
                    due.append(item[2])
            left = bool(_after_daemons)
        for give_back in due:
            try:
                give_back()
            except Exception:  # noqa: BLE001 - a driver gone too: nothing to give back
                pass
        if not left:
            return


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _buffer_id(buffer):
    return buffer.id if isinstance(buffer, Buffer) else _u64(buffer, "buffer")


def _token(token):
    raw = bytes(token)
    if len(raw) != 32:
        raise ValueError(f"a ferry token is 32 bytes, not {len(raw)}")
    t = _lib.Token()
    ctypes.memmove(t.bytes, raw, 32)
    return t


class Buffer:
    """A device buffer as this client names it. Owned ones (from alloc) are
    freed by free() or at the end of a with-block; opened ones (Client.open)
    let go of this client's name for it the same way, or with the client."""

    def __init__(self, client, buffer_id, size, owned):
        self.client = client
        self.id = buffer_id
        self.size = size
        self.owned = owned
        self._maps = {}  # ferry.device mappings of it in this process, by device
        self._maps_lock = threading.Lock()
        # An import's: gives this process's memory back, once ferryd no longer maps it.
        self._unmapped = None

    def __repr__(self):
        return f"<ferry.Buffer {self.id} of {self.size} bytes{'' if self.owned else ' (opened)'}>"

    def upload(self, data, offset=0, after=None, release_after=None, publish=None):
        """Client.upload into this buffer."""
        return self.client.upload(self, data, offset, after, release_after, publish)

    def upload_gather(self, parts, offset=0, after=None, release_after=None, publish=None):
        """Client.upload_gather into this buffer."""
        return self.client.upload_gather(self, parts, offset, after, release_after, publish)

    def download(self, out=None, offset=0, nbytes=None):
        """Client.download from this buffer."""
        return self.client.download(self, out, offset, nbytes)

    def grant(self, rights=RIGHT_UPLOAD | RIGHT_DOWNLOAD):
        """A 32-byte token whose holder may open this buffer with `rights`."""
        t = _lib.Token()
        _check(self.client._call(_c.ferry_buffer_grant, self.id, _u64(rights, "rights", 32), ctypes.byref(t)), "grant")
        return bytes(t.bytes)

    def revoke(self, token=None):
        """Ends one grant (token) or, with None, every grant of this buffer."""
        t = None if token is None else ctypes.byref(_token(token))
        _check(self.client._call(_c.ferry_buffer_revoke, self.id, t), "revoke")

    def export(self):
        """An IpcHandle of this buffer (one this client allocated), for a
        process that computes on it in its own context."""
        h = _lib.IpcHandle()
        _check(self.client._call(_c.ferry_buffer_export, self.id, ctypes.byref(h)), f"export buffer {self.id}")
        return IpcHandle(h.kind, h.fd, h.bytes, bytes(h.data))

    @property
    def fence(self):
        """This buffer's Fence (a buffer this client allocated)."""
        if not self.owned:
            raise ValueError("only the owner of a buffer sees its fence")
        f = _lib.CFence()
        _check(self.client._call(_c.ferry_buffer_fence, self.id, ctypes.byref(f)), f"fence of buffer {self.id}")
        return Fence(self, f)

    def free(self):
        """Frees the buffer (one this client allocated or imported): uploads
        in flight to it still finish first (an import's memory goes back to
        this process's context once they did). Refused (BufferError) while arrays of a
        ferry.device mapping of it live; the mappings close first. On a
        buffer opened through a grant it lets go of this client's name for
        it (the owner's buffer stays)."""
        with self._maps_lock:
            busy = [m for m in self._maps.values() if not m.closed and m.views]
            if busy:
                raise BufferError(f"buffer {self.id} has {sum(m.views for m in busy)} device arrays alive "
                                  "(ferry.device): drop them (and tensors made from them) first")
            for m in self._maps.values():
                m.close()
            self._maps.clear()
        if self.id:
            try:
                r = self.client._call(_c.ferry_buffer_free, self.id)
            except Error as e:  # the client is closed
                r = -e.errno
            gone = r != 0 and self._unmapped is not None and self.client.connection_error() != 0
            if r != 0 and not gone:
                _check(r, f"free buffer {self.id}")
            self.id = 0
            if gone:
                # An import of a client whose ferryd went (a restart): its
                # memory is given back once that ferryd's process is gone,
                # since it may map it until then (CUDA: freeing memory another
                # process maps is undefined).
                unmapped, self._unmapped = self._unmapped, None
                _give_back_after(self.client._daemon_pid, unmapped)
                return
        # ferryd answered the free of an import once it no longer mapped it.
        unmapped, self._unmapped = self._unmapped, None
        if unmapped is not None:
            unmapped()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.client._c:
            self.free()
