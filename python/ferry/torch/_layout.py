# SPDX-License-Identifier: MIT
"""A batch's layout: what of a collated batch ferry moves (_movable), where
each tensor lands in its buffer (_layout: its _Leaf), and torch's collate
with the stacking of tensors left to the upload (_collate_later)."""

import collections
import collections.abc
import copy
import ctypes

import torch
from torch.utils.data._utils import collate as _collate

_ALIGN = 256  # where each tensor of a batch starts in its buffer (DLPack's and CUDA's allocators' alignment)
_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
           "complex64", "complex128", "uint16", "uint32", "uint64"}


def _dtype_name(dtype):
    return str(dtype).rsplit(".", 1)[-1]


def _round(n):
    """Bytes a buffer gets for a batch of n: whole 64 KiB, at least one."""
    return max(65536, (n + 65535) // 65536 * 65536)


# ---------------------------------------------------------------- a batch's layout
class _Leaf:
    """A tensor of a batch, as the worker wrote it into the buffer."""

    __slots__ = ("offset", "dtype", "shape", "nbytes")

    def __init__(self, offset, dtype, shape, nbytes):
        self.offset, self.dtype, self.shape, self.nbytes = offset, dtype, shape, nbytes

    def __reduce__(self):
        return (_Leaf, (self.offset, self.dtype, self.shape, self.nbytes))


class _Stack:
    """torch.stack(parts) not made yet: the parts go to the buffer as they lie."""

    __slots__ = ("parts", "shape", "dtype")

    def __init__(self, parts, shape, dtype):
        self.parts, self.shape, self.dtype = parts, shape, dtype

    def realize(self):
        return torch.stack(self.parts, 0)


def _map(obj, leaf, is_leaf):
    """obj with every leaf x (is_leaf(x)) replaced by leaf(x), through the
    containers torch's collate makes (mappings, namedtuples, tuples, lists,
    other sequences). Each is rebuilt as what it was: a copy of the same type
    (its other attributes kept) where it can be, as torch's collate does."""
    if is_leaf(obj):
        return leaf(obj)
    if isinstance(obj, (str, bytes)):
        return obj
    if isinstance(obj, collections.abc.Mapping):
        items = {k: _map(v, leaf, is_leaf) for k, v in obj.items()}
        if type(obj) is dict:
            return items
        if isinstance(obj, collections.abc.MutableMapping):
            try:
                c = copy.copy(obj)
                c.update(items)
                return c
            except Exception:  # noqa: BLE001 - a mapping that does not copy: as below
                pass
        try:
            return type(obj)(items)
        except TypeError:
            return items
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map(v, leaf, is_leaf) for v in obj))
    if isinstance(obj, (tuple, list, collections.abc.Sequence)):
        items = [_map(v, leaf, is_leaf) for v in obj]
        if type(obj) is list:
            return items
        if type(obj) is tuple:
            return tuple(items)
        if isinstance(obj, collections.abc.MutableSequence):
            try:
                c = copy.copy(obj)
                c[:] = items
                return c
            except Exception:  # noqa: BLE001
                pass
        try:
            return type(obj)(items)
        except TypeError:
            return items
    return obj


def _movable(x):
    """A tensor ferry moves: a plain dense CPU tensor (not a subclass, not
    one autograd tracks) of a dtype DLPack names. Others travel as torch's
    DataLoader sends them."""
    if isinstance(x, _Stack):
        return True
    return (type(x) is torch.Tensor and x.layout == torch.strided and x.device.type == "cpu"
            and not x.requires_grad and not getattr(x, "is_nested", False) and _dtype_name(x.dtype) in _DTYPES)


def _plain(t):
    """t's values in plain row-major memory: conjugate and negative views
    resolved (their bytes are not their values), then made contiguous."""
    return t.resolve_conj().resolve_neg().contiguous()


def _layout(structure):
    """(template, spans, keepalive, nbytes): the batch with each movable
    tensor replaced by its _Leaf, the (address, length) pairs to upload back
    to back (padding included), and the tensors those addresses are in."""
    spans, keep = [], []
    at = 0

    def leaf(x):
        nonlocal at
        pad = -at % _ALIGN
        if pad:
            spans.append((_zeros(), pad))
            at += pad
        if isinstance(x, _Stack):
            parts = [_plain(p) for p in x.parts]
            shape, dtype = x.shape, x.dtype
        else:
            parts = [_plain(x)]
            shape, dtype = tuple(x.shape), x.dtype
        start = at
        for p in parts:
            n = p.numel() * p.element_size()
            if n:
                spans.append((p.data_ptr(), n))
                keep.append(p)
                at += n
        return _Leaf(start, _dtype_name(dtype), tuple(shape), at - start)

    template = _map(structure, leaf, _movable)
    return template, spans, keep, at


_zero_bytes = ctypes.create_string_buffer(_ALIGN)


def _zeros():
    """The address of _ALIGN zero bytes that live as long as the process (padding)."""
    return ctypes.addressof(_zero_bytes)


def _realize(structure):
    return _map(structure, lambda s: s.realize(), lambda x: isinstance(x, _Stack))


def _stack_later(batch, *, collate_fn_map=None):
    """torch's collate of a list of tensors, deferred: the parts themselves,
    when torch.stack would give a plain dense CPU tensor of them."""
    first = batch[0]
    regular = all(type(t) is torch.Tensor for t in batch) and _movable(first) and all(
        t.shape == first.shape and t.dtype == first.dtype and _movable(t) for t in batch)
    if not regular:  # torch decides what that means (type promotion, an error, ...)
        return _collate.collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
    return _Stack(list(batch), (len(batch), *first.shape), first.dtype)


def _collate_later(batch):
    """default_collate, with the stacking of tensors left to the upload. The
    map is torch's as it is now (types registered into it count)."""
    later = dict(_collate.default_collate_fn_map)
    later[torch.Tensor] = _stack_later
    return _collate.collate(batch, collate_fn_map=later)
