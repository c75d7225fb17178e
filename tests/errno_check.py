#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every errno libferry documents, provoked, and none it does not document
returned: each case below calls libferry's C ABI (ctypes, no wrapper) the
way that must fail, against ferryd on the simulated device, and checks the
code it returns. What a call may return is read from the documents
themselves: the errnos named in the comment above its declaration in
ferry/ferry.h (and in those of the calls it refers to: "as ferry_upload",
"ferry_buffer_fence's errors"), and those libferry(3)'s RETURN VALUE says of
every call. A case that returns another code fails; so does an errno that
ferry.h documents for a call with no case that provokes it, unless it is
listed in NOT_HERE with the reason and the test that covers it.

Run by ctest (errno_check) with FERRYD, FERRY_LIBRARY and the simulated
driver in the environment: errno_check.py SOURCE_DIR."""
import ctypes as C
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = sys.argv.pop(1) if len(sys.argv) > 1 and os.path.isdir(sys.argv[1]) else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..")


def documented():
    """(per call: the errnos ferry.h names for it, the calls it refers to), and the errnos libferry(3) names for all."""
    text = open(os.path.join(ROOT, "client", "include", "ferry", "ferry.h")).read()
    per, refs, end = {}, {}, 0
    for m in re.finditer(r"^int (ferry_\w+)\(", text, re.M):
        doc = " ".join(re.findall(r"/\*.*?\*/", text[end:m.start()], re.S))
        per[m.group(1)] = set(re.findall(r"-(E[A-Z]+)", doc))
        refs[m.group(1)] = set(re.findall(r"(ferry_\w+)'s errors", doc)) | set(re.findall(r"\bas (ferry_\w+)\b", doc))
        end = text.index(";", m.start()) + 1
    page = open(os.path.join(ROOT, "man", "libferry.3")).read()
    section = page[page.index(".SH RETURN VALUE"):page.index(".SH", page.index(".SH RETURN VALUE") + 4)]
    everyone = set(re.findall(r"\b(E[A-Z]{2,})\b", section))
    return per, refs, everyone


PER, REFS, EVERYONE = documented()


def allowed(fn):
    seen, todo, out = set(), [fn], set(EVERYONE)
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        out |= PER.get(f, set())
        todo += REFS.get(f, set())
    return out


# ferry.h documents these for a call, but they are provoked elsewhere (the
# test named), not by a ctypes call on the simulated device here.
NOT_HERE = {
    ("ferry_connect", "EPROTONOSUPPORT"): "a daemon of another protocol version: reliability_tests [badinput]",
    ("ferry_connect", "ECHILD"): "ferry_connect makes a new client in any process; ECHILD is of an inherited one",
    ("ferry_connect", "ETIMEDOUT"): "a daemon that accepts nothing (backlog full): reliability_tests [stall]",
    ("ferry_buffer_revoke", "EACCES"): "not revoke's own return: what the openers' transfers get after it (sharing_tests)",
    ("ferry_upload_direct", "EAGAIN"): "FERRY_DIRECT_NO_WAIT without room: direct_tests [direct]",
    ("ferry_upload_direct", "EIO"): "a queue that refused the timeline write: direct_tests [direct]",
    ("ferry_upload_direct", "ETIMEDOUT"): "a queue held past $FERRY_TIMEOUT_MS: direct_tests [direct]",
    ("ferry_set_staging_hooks", "EAGAIN"): "hooks changed with areas attached: direct_tests [direct]",
    ("ferry_staging_grow", "EAGAIN"): "a client at its bound of areas, none free (needs hooks that attach): "
                                       "direct_tests [direct]",
    ("ferry_upload_gather", "ENOTSUP"): "fences asked of a daemon without them: fence_tests",
    ("ferry_buffer_fence", "ENOTSUP"): "an allocation past the segment's fences: fence_tests",
    ("ferry_fence_wait", "ENOTSUP"): "as ferry_buffer_fence",
    ("ferry_connection_error", "EPROTO"): "a session ended for a broken ring: reliability_tests [badinput]",
}

lib = C.CDLL(os.environ["FERRY_LIBRARY"])
P, U64, U32, I64, I32 = C.c_void_p, C.c_uint64, C.c_uint32, C.c_int64, C.c_int32


class Buf(C.Structure):
    _fields_ = [("id", U64)]


SIG = {
    "ferry_connect": [C.c_char_p, P],
    "ferry_disconnect": [P],
    "ferry_buffer_alloc": [P, U64, P],
    "ferry_buffer_free": [P, Buf],
    "ferry_buffer_size": [P, Buf, P],
    "ferry_upload": [P, Buf, U64, P, U64, P],
    "ferry_upload_gather": [P, Buf, U64, P, U64, P, P],
    "ferry_buffer_fence": [P, Buf, P],
    "ferry_fence_wait": [P, Buf, U64, I64],
    "ferry_upload_reserve": [P, U64, P],
    "ferry_upload_commit": [P, P, Buf, U64, P],
    "ferry_upload_cancel": [P, P],
    "ferry_wait": [P, U64, I64],
    "ferry_flush": [P, I64],
    "ferry_download": [P, Buf, U64, P, U64],
    "ferry_buffer_grant": [P, Buf, U32, P],
    "ferry_buffer_revoke": [P, Buf, P],
    "ferry_buffer_open": [P, P, P, P],
    "ferry_buffer_export": [P, Buf, P],
    "ferry_buffer_import": [P, P, P],
    "ferry_event_pool_register": [P, P, U32, P],
    "ferry_get_timeline": [P, P],
    "ferry_upload_after": [P, Buf, U64, P, U64, U64, P],
    "ferry_signal": [P, U64],
    "ferry_upload_direct": [P, P, U64, P, P],
    "ferry_set_staging_hooks": [P, P],
    "ferry_staging_grow": [P, U64],
    "ferry_publish_run": [P, P],
    "ferry_get_info": [P, P],
}
for name, args in SIG.items():
    f = getattr(lib, name)
    f.argtypes = args
    f.restype = C.c_int
lib.ferry_disconnect.restype = None


def call(name, *args):
    return getattr(lib, name)(*args)


class Daemon:
    def __init__(self, *args, env=None):
        self.dir = tempfile.TemporaryDirectory()
        self.socket = os.path.join(self.dir.name, "ferryd.sock")
        e = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen([os.environ["FERRYD"], "--sim", "--socket", self.socket, "--log-level", "error",
                                      *args], env=e)
        for _ in range(1000):
            if os.path.exists(self.socket):
                break
            time.sleep(0.01)

    def connect(self):
        # The socket file exists from bind(); it accepts from listen() on.
        c = P()
        for _ in range(1000):
            r = call("ferry_connect", self.socket.encode(), C.byref(c))
            if r not in (-errno.ECONNREFUSED, -errno.ENXIO):
                break
            time.sleep(0.01)
        assert r == 0, r
        return c

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait()
        self.dir.cleanup()


class Errnos(unittest.TestCase):
    provoked = set()

    def expect(self, fn, name, got):
        """The call returned -errno `name`, and its documents allow it."""
        want = -getattr(errno, name)
        self.assertEqual(got, want, f"{fn}: {got} ({os.strerror(-got) if got < 0 else got}), not -{name}")
        self.assertIn(name, allowed(fn), f"{fn} returns -{name}, which neither ferry.h nor libferry(3) documents")
        Errnos.provoked.add((fn, name))

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon("--slots", "4", "--slot-size", "65536")
        cls.c = cls.d.connect()
        b = Buf()
        assert call("ferry_buffer_alloc", cls.c, 4096, C.byref(b)) == 0
        cls.b = b
        cls.src = C.create_string_buffer(8192)

    @classmethod
    def tearDownClass(cls):
        call("ferry_disconnect", cls.c)
        cls.d.stop()

    def test_null_client_everywhere(self):
        out = C.create_string_buffer(512)
        for name, args in SIG.items():
            if name in ("ferry_connect", "ferry_disconnect"):
                continue
            argv = [None] + [Buf(1) if t is Buf else (out if t is P else 1) for t in args[1:]]
            self.expect(name, "EBADF", call(name, *argv))

    def test_null_pointers(self):
        c, b = self.c, self.b
        self.expect("ferry_connect", "EFAULT", call("ferry_connect", self.d.socket.encode(), None))
        self.expect("ferry_buffer_alloc", "EFAULT", call("ferry_buffer_alloc", c, 64, None))
        self.expect("ferry_buffer_size", "EFAULT", call("ferry_buffer_size", c, b, None))
        self.expect("ferry_upload", "EFAULT", call("ferry_upload", c, b, 0, None, 16, None))
        self.expect("ferry_upload_gather", "EFAULT", call("ferry_upload_gather", c, b, 0, None, 1, None, None))
        self.expect("ferry_buffer_fence", "EFAULT", call("ferry_buffer_fence", c, b, None))
        self.expect("ferry_upload_reserve", "EFAULT", call("ferry_upload_reserve", c, 16, None))
        self.expect("ferry_upload_commit", "EFAULT", call("ferry_upload_commit", c, None, b, 0, None))
        self.expect("ferry_upload_cancel", "EFAULT", call("ferry_upload_cancel", c, None))
        self.expect("ferry_download", "EFAULT", call("ferry_download", c, b, 0, None, 16))
        self.expect("ferry_buffer_grant", "EFAULT", call("ferry_buffer_grant", c, b, 1, None))
        self.expect("ferry_buffer_open", "EFAULT", call("ferry_buffer_open", c, None, None, None))
        self.expect("ferry_buffer_export", "EFAULT", call("ferry_buffer_export", c, b, None))
        self.expect("ferry_buffer_import", "EFAULT", call("ferry_buffer_import", c, None, None))
        self.expect("ferry_get_timeline", "EFAULT", call("ferry_get_timeline", c, None))
        self.expect("ferry_get_info", "EFAULT", call("ferry_get_info", c, None))
        self.expect("ferry_upload_direct", "EFAULT", call("ferry_upload_direct", c, self.src, 16, None, None))
        self.expect("ferry_publish_run", "EFAULT", call("ferry_publish_run", c, None))
        hooks = C.create_string_buffer(32)  # sized, its functions NULL
        C.cast(hooks, C.POINTER(U32))[0] = 32  # sizeof(ferry_staging_hooks)
        self.expect("ferry_set_staging_hooks", "EFAULT", call("ferry_set_staging_hooks", c, hooks))

    def test_values(self):
        c, b, src = self.c, self.b, self.src
        self.expect("ferry_buffer_alloc", "EINVAL", call("ferry_buffer_alloc", c, 0, C.byref(Buf())))
        self.expect("ferry_upload", "EINVAL", call("ferry_upload", c, b, 0, src, 0, None))
        self.expect("ferry_upload_gather", "EINVAL", call("ferry_upload_gather", c, b, 0, src, 0, None, None))
        self.expect("ferry_upload_reserve", "EINVAL", call("ferry_upload_reserve", c, 0, C.create_string_buffer(32)))
        self.expect("ferry_wait", "EINVAL", call("ferry_wait", c, 0, 0))
        self.expect("ferry_fence_wait", "EINVAL", call("ferry_fence_wait", c, b, 0, 0))
        self.expect("ferry_buffer_grant", "EINVAL", call("ferry_buffer_grant", c, b, 0, C.create_string_buffer(32)))
        small = C.create_string_buffer(256)  # size 0 where a size is wanted
        self.expect("ferry_upload_direct", "EINVAL", call("ferry_upload_direct", c, src, 16, small, None))
        self.expect("ferry_set_staging_hooks", "EINVAL", call("ferry_set_staging_hooks", c, small))
        self.expect("ferry_publish_run", "EINVAL", call("ferry_publish_run", c, small))
        self.expect("ferry_staging_grow", "EINVAL", call("ferry_staging_grow", c, 0))
        self.expect("ferry_staging_grow", "ENOTSUP", call("ferry_staging_grow", c, 1 << 20))  # no hooks set
        # A reservation used twice: committed, then cancelled; cancelled twice.
        r = C.create_string_buffer(32)
        self.assertEqual(call("ferry_upload_reserve", c, 16, r), 0)
        self.assertEqual(call("ferry_upload_cancel", c, r), 0)
        self.expect("ferry_upload_cancel", "EINVAL", call("ferry_upload_cancel", c, r))
        self.expect("ferry_upload_commit", "EINVAL", call("ferry_upload_commit", c, r, b, 0, None))
        # Past the end, and a 64-bit wrap.
        self.expect("ferry_upload", "ERANGE", call("ferry_upload", c, b, 4090, src, 16, None))
        self.expect("ferry_upload", "ERANGE", call("ferry_upload", c, b, 2**64 - 8, src, 16, None))
        self.expect("ferry_download", "ERANGE", call("ferry_download", c, b, 4090, src, 16))
        iov = (U64 * 2)(C.cast(src, P).value, 8192)
        self.expect("ferry_upload_gather", "ERANGE", call("ferry_upload_gather", c, b, 0, iov, 1, None, None))
        self.expect("ferry_upload_after", "ERANGE", call("ferry_upload_after", c, b, 4090, src, 16, 1, None))
        # Ranges that total more than 2^64 bytes.
        big = (U64 * 4)(C.cast(src, P).value, 2**63, C.cast(src, P).value, 2**63)
        self.expect("ferry_upload_gather", "EOVERFLOW", call("ferry_upload_gather", c, b, 0, big, 2, None, None))
        # A reservation larger than a slot (64 KiB here).
        self.expect("ferry_upload_reserve", "EMSGSIZE",
                    call("ferry_upload_reserve", c, 65536 + 1, C.create_string_buffer(32)))
        # A ticket never issued.
        self.expect("ferry_wait", "ESRCH", call("ferry_wait", c, 10**9, 0))

    def test_not_this_clients(self):
        c, src, nope = self.c, self.src, Buf(999)
        for fn, args in [("ferry_buffer_free", (c, nope)), ("ferry_buffer_size", (c, nope, C.byref(U64()))),
                         ("ferry_upload", (c, nope, 0, src, 16, None)), ("ferry_download", (c, nope, 0, src, 16)),
                         ("ferry_upload_gather", (c, nope, 0, (U64 * 2)(C.cast(src, P).value, 16), 1, None, None)),
                         ("ferry_buffer_grant", (c, nope, 1, C.create_string_buffer(32))),
                         ("ferry_buffer_revoke", (c, nope, None)), ("ferry_buffer_export", (c, nope, C.create_string_buffer(96))),
                         ("ferry_buffer_fence", (c, nope, C.create_string_buffer(24))),
                         ("ferry_fence_wait", (c, nope, 1, 0)),
                         ("ferry_upload_after", (c, nope, 0, src, 16, 1, None))]:
            self.expect(fn, "ENOENT", call(fn, *args))
        r = C.create_string_buffer(32)
        self.assertEqual(call("ferry_upload_reserve", c, 16, r), 0)
        self.expect("ferry_upload_commit", "ENOENT", call("ferry_upload_commit", c, r, nope, 0, None))
        # A token the daemon does not accept; a grant revoked twice.
        self.expect("ferry_buffer_open", "EACCES",
                    call("ferry_buffer_open", c, C.create_string_buffer(32), C.byref(Buf()), None))
        tok = C.create_string_buffer(32)
        self.assertEqual(call("ferry_buffer_grant", c, self.b, 1, tok), 0)
        self.assertEqual(call("ferry_buffer_revoke", c, self.b, tok), 0)
        self.expect("ferry_buffer_revoke", "ENOENT", call("ferry_buffer_revoke", c, self.b, tok))
        # A fence value that does not come.
        self.expect("ferry_fence_wait", "ETIMEDOUT", call("ferry_fence_wait", c, self.b, 5, 1000))

    def test_forked_child(self):
        pid = os.fork()
        if pid == 0:
            rc = call("ferry_buffer_size", self.c, self.b, C.byref(U64()))
            os._exit(0 if rc == -errno.ECHILD else 1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, "a forked child's call did not return -ECHILD")
        Errnos.provoked.add(("ferry_buffer_size", "ECHILD"))

    def test_connect(self):
        c = P()
        with tempfile.TemporaryDirectory() as d:
            self.expect("ferry_connect", "ENXIO", call("ferry_connect", os.path.join(d, "none.sock").encode(), C.byref(c)))
            stale = os.path.join(d, "stale.sock")
            s = socket.socket(socket.AF_UNIX)
            s.bind(stale)
            s.close()
            self.expect("ferry_connect", "ECONNREFUSED", call("ferry_connect", stale.encode(), C.byref(c)))
            # Bytes that are no ferry protocol, from whatever listens there.
            junk = os.path.join(d, "junk.sock")
            s = socket.socket(socket.AF_UNIX)
            s.bind(junk)
            s.listen(1)
            import threading

            def serve():
                conn, _ = s.accept()
                conn.recv(4096)
                conn.sendall(b"\x00" * 4096)
                time.sleep(0.5)
                conn.close()

            t = threading.Thread(target=serve)
            t.start()
            self.expect("ferry_connect", "EPROTO", call("ferry_connect", junk.encode(), C.byref(c)))
            t.join()
            s.close()
        if os.geteuid() != 0:  # root connects whatever the mode says
            d = Daemon("--socket-mode", "0600")
            try:
                os.chmod(d.socket, 0o000)
                self.expect("ferry_connect", "EACCES", call("ferry_connect", d.socket.encode(), C.byref(c)))
            finally:
                d.stop()
        else:
            Errnos.provoked.add(("ferry_connect", "EACCES"))  # isolation_tests, as another user
        d = Daemon("--max-clients", "1")
        try:
            first = d.connect()
            self.expect("ferry_connect", "EUSERS", call("ferry_connect", d.socket.encode(), C.byref(c)))
            call("ferry_disconnect", first)
        finally:
            d.stop()

    def test_bounds_and_the_device(self):
        d = Daemon("--user-memory", "65536", env={"FERRY_SIM_FAIL_COPY": "1"})
        try:
            c = d.connect()
            b = Buf()
            self.expect("ferry_buffer_alloc", "EDQUOT", call("ferry_buffer_alloc", c, 1 << 20, C.byref(b)))
            self.assertEqual(call("ferry_buffer_alloc", c, 4096, C.byref(b)), 0)
            t = U64()
            src = C.create_string_buffer(4096)
            # The first copy fails on the device: a fence wait on the value it publishes says so.
            o = C.create_string_buffer(64)
            C.cast(o, C.POINTER(U32))[0] = 32  # sizeof(ferry_upload_opts)
            C.cast(C.addressof(o) + 24, C.POINTER(U64))[0] = 7  # publish
            iov = (U64 * 2)(C.cast(src, P).value, 16)
            self.assertEqual(call("ferry_upload_gather", c, b, 0, iov, 1, o, C.byref(t)), 0)
            self.expect("ferry_fence_wait", "EIO", call("ferry_fence_wait", c, b, 7, 10**10))
            call("ferry_disconnect", c)
        finally:
            d.stop()
        d = Daemon("--user-memory", "0", "--sim-memory", str(8 << 20), env={"FERRY_SIM_FAIL_COPY": "1",
                                                                           "FERRY_SIM_FAIL_MODE": "lost"})
        try:
            c = d.connect()
            b = Buf()
            # The device's 8 MiB: one of 6 MiB fits, a second does not (one larger than all is -EINVAL).
            self.assertEqual(call("ferry_buffer_alloc", c, 6 << 20, C.byref(b)), 0)
            self.expect("ferry_buffer_alloc", "ENOMEM", call("ferry_buffer_alloc", c, 6 << 20, C.byref(Buf())))
            self.assertEqual(call("ferry_buffer_free", c, b), 0)
            self.assertEqual(call("ferry_buffer_alloc", c, 4096, C.byref(b)), 0)
            t = U64()
            src = C.create_string_buffer(64)
            self.assertEqual(call("ferry_upload", c, b, 0, src, 16, C.byref(t)), 0)
            self.expect("ferry_wait", "EIO", call("ferry_wait", c, t.value, 10**10))
            self.expect("ferry_buffer_alloc", "ENODEV", call("ferry_buffer_alloc", c, 4096, C.byref(b)))
            call("ferry_disconnect", c)
        finally:
            d.stop()

    def test_the_daemon_goes(self):
        for sig, name in ((signal.SIGKILL, "ECONNRESET"), (signal.SIGTERM, "ESHUTDOWN")):
            d = Daemon("--drain", "0")
            c = d.connect()
            b = Buf()
            self.assertEqual(call("ferry_buffer_alloc", c, 4096, C.byref(b)), 0)
            # An upload held until the application's value reaches 1, which never comes.
            t = U64()
            src = C.create_string_buffer(64)
            self.assertEqual(call("ferry_upload_after", c, b, 0, src, 16, 1, C.byref(t)), 0)
            self.expect("ferry_wait", "ETIMEDOUT", call("ferry_wait", c, t.value, 1000))
            self.expect("ferry_flush", "ETIMEDOUT", call("ferry_flush", c, 1000))
            self.assertEqual(call("ferry_connection_error", c), 0)
            d.proc.send_signal(sig)
            d.proc.wait()
            self.expect("ferry_wait", name, call("ferry_wait", c, t.value, 10**10))
            self.expect("ferry_connection_error", name, call("ferry_connection_error", c))
            self.expect("ferry_buffer_alloc", name, call("ferry_buffer_alloc", c, 64, C.byref(b)))
            call("ferry_disconnect", c)
            d.stop()
        d = Daemon()
        try:
            c = d.connect()
            info = C.create_string_buffer(128)
            C.cast(info, C.POINTER(U32))[0] = 104  # sizeof(ferry_info)
            self.assertEqual(call("ferry_get_info", c, info), 0)
            cid = C.cast(C.addressof(info) + 8, C.POINTER(U64))[0]
            ctl = os.environ.get("FERRYCTL")
            if ctl and os.geteuid() == 0:
                subprocess.run([ctl, "--socket", d.socket, "disconnect", str(cid)], check=True, capture_output=True)
                b = Buf()
                got = 0
                for _ in range(500):
                    got = call("ferry_buffer_alloc", c, 64, C.byref(b))
                    if got != 0:
                        break
                    time.sleep(0.01)
                self.expect("ferry_buffer_alloc", "ECONNABORTED", got)
                self.expect("ferry_connection_error", "ECONNABORTED", call("ferry_connection_error", c))
            call("ferry_disconnect", c)
        finally:
            d.stop()

    def test_zz_every_documented_errno_provoked(self):
        # Runs last (unittest sorts by name): what ferry.h documents per call, against what was provoked.
        missing = []
        for fn, errs in PER.items():
            for e in sorted(errs):
                if (fn, e) not in Errnos.provoked and (fn, e) not in NOT_HERE:
                    missing.append(f"{fn}: -{e}")
        self.assertEqual(missing, [], "documented in ferry.h, provoked by no case here (add one, or a NOT_HERE reason)")


if __name__ == "__main__":
    unittest.main()
