# SPDX-License-Identifier: MIT
"""ferry for Python: non-blocking uploads to a GPU through ferryd.

Pure Python over libferry's C ABI (ctypes): nothing to build beyond the
library. Uploads take any buffer-protocol object (bytes, bytearray,
memoryview, array.array, numpy arrays, ...) without a copy on the Python
side; the bytes are staged into ferryd's pinned slots before the call
returns, so the object is free to change right after.

    import ferry, numpy as np
    with ferry.Client() as c, c.alloc(1 << 20) as buf:
        c.wait(buf.upload(np.arange(1000, dtype=np.float32)))

Every error of the C layer is raised as ferry.Error, an OSError that carries
the errno and ferry's own message.
"""

from ._api import (
    DIRECT_TICKET,
    RIGHT_DOWNLOAD,
    RIGHT_UPLOAD,
    Buffer,
    Client,
    Error,
    Fence,
    Info,
    IpcHandle,
    Reservation,
    Timeline,
    library_version,
)

__all__ = [
    "Buffer",
    "Client",
    "DIRECT_TICKET",
    "Error",
    "Fence",
    "Info",
    "IpcHandle",
    "RIGHT_DOWNLOAD",
    "RIGHT_UPLOAD",
    "Reservation",
    "Timeline",
    "library_version",
]
try:  # written by the build that installed this package (cmake --install, or pip)
    from ._build import VERSION as __version__
except ImportError:  # run from the source tree: the library it loaded
    __version__ = library_version()
