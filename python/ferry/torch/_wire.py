# SPDX-License-Identifier: MIT
"""What the trainer and its workers send each other (a task's _Job, a
worker's _Batch or _Spill), and when a ferryd counts as gone."""

import errno


class _Job:
    """Where one batch goes: slot `slot` (a buffer the trainer granted with
    `token`, `capacity` bytes), after the fence released `release`, and what
    the upload publishes. forget: slots whose buffers are gone."""

    __slots__ = ("slot", "token", "capacity", "release", "publish", "forget")

    def __init__(self, slot, token, capacity, release, publish, forget):
        self.slot, self.token, self.capacity = slot, token, capacity
        self.release, self.publish, self.forget = release, publish, forget

    def __reduce__(self):
        return (_Job, (self.slot, self.token, self.capacity, self.release, self.publish, self.forget))


class _Batch:
    """A batch on the device: its layout, where it is, and its fence's value
    (times: the worker's part of the account, when it is kept)."""

    def __init__(self, template, nbytes, slot, value, times=None):
        self.template, self.nbytes, self.slot, self.value = template, nbytes, slot, value
        self.times = times
        self.arrived = 0  # when the trainer received it (the account; set there)


class _Spill:
    """A batch that did not fit the buffer it was given (or had none): its
    tensors, as torch's DataLoader would send them. The trainer uploads it."""

    def __init__(self, structure, nbytes):
        self.structure, self.nbytes = structure, nbytes


# ferryd went away (stopped for a restart or an upgrade, or killed), none
# listens yet, or a new one does not know the old one's grants: the batch
# travels as torch's DataLoader would send it, and the next ones through the
# ferryd that listens next.
_GONE = {errno.ESHUTDOWN, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.EPIPE, errno.ECONNREFUSED,
         errno.ENXIO, errno.ENOENT, errno.EACCES, errno.EPROTO, errno.ETIMEDOUT}


def _gone(client):
    """Whether `client` (or None) can no longer serve: a new one is needed."""
    return client is None or client.connection_error() != 0
