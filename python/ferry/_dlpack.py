# SPDX-License-Identifier: MIT
"""DLPack capsules made with ctypes (the DLPack 0.8 layout, an unversioned
"dltensor" capsule, which every consumer takes): ferry.device hands a view of
device memory to PyTorch, CuPy, JAX or NumPy without a copy. The capsule keeps
its producer object alive until the consumer calls the deleter."""

import ctypes

kDLCPU = 1
kDLCUDA = 2
kDLOneAPI = 14

# dtype name -> (DLDataType code, bits): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6
CODES = {
    "bool": (6, 8), "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
    "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "float16": (2, 16), "float32": (2, 32), "float64": (2, 64), "bfloat16": (4, 16),
    "complex64": (5, 64), "complex128": (5, 128),
}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

# The capsule's name, at an address that lives as long as the module: a
# consumer renames the capsule ("used_dltensor") when it takes it.
_NAME = ctypes.create_string_buffer(b"dltensor")
_new = ctypes.pythonapi.PyCapsule_New
_new.restype = ctypes.py_object
_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_NAME_ADDRESS = ctypes.addressof(_NAME)

# Every capsule's memory and its producer, by the managed tensor's address,
# until its deleter runs.
_live = {}


@_Deleter
def _delete(managed):
    _live.pop(ctypes.addressof(managed.contents), None)


def capsule(owner, data, device_type, device_id, dtype, shape, strides=None):
    """A "dltensor" capsule viewing `data` (an address) as `shape` of
    `dtype` (a name in CODES); strides in elements, or None (C order).
    `owner` stays alive until the consumer is done with the memory."""
    code, bits = CODES[dtype]
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides) if strides is not None else None
    m = DLManagedTensor()
    m.dl_tensor.data = data
    m.dl_tensor.device = DLDevice(device_type, device_id)
    m.dl_tensor.ndim = ndim
    m.dl_tensor.dtype = DLDataType(code, bits, 1)
    m.dl_tensor.shape = shape_arr
    m.dl_tensor.strides = strides_arr if strides_arr is not None else ctypes.POINTER(ctypes.c_int64)()
    m.dl_tensor.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _delete
    addr = ctypes.addressof(m)
    _live[addr] = (m, shape_arr, strides_arr, owner)
    # No destructor: a consumer that takes the capsule calls the deleter.
    # One written in Python could run while a consumer that refused the
    # capsule has its exception pending, and no Python code may run then;
    # so a capsule nobody takes keeps its producer (see ferry.device).
    return _new(addr, _NAME_ADDRESS, None)


def live():
    """How many capsules' memories are still held (for tests)."""
    return len(_live)
