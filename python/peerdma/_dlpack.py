# SPDX-License-Identifier: MIT
"""DLPack capsules for the DLManagedTensor that pdma_block_dlpack makes.

The protocol (the legacy, unversioned DLManagedTensor, which numpy 1.23+,
CuPy and PyTorch all import): __dlpack__ returns a PyCapsule named
"dltensor" holding the DLManagedTensor*. A consumer that takes the tensor
renames the capsule "used_dltensor" and from then on owns it: it calls the
tensor's deleter when its array dies. A capsule nobody consumed still owns
its tensor, and whoever holds that ownership must call the deleter, but only
then: calling it for a consumed capsule would release the block under a live
array.

DLPack's own ctypes example (apps/numpy_dlpack in dmlc/dlpack) gives the
capsule a destructor written in Python that does this check. That breaks
where it matters: a consumer that refuses a tensor (numpy given a CUDA
block) sets its exception and then drops the capsule, so the destructor runs
with an exception pending; ctypes then fails the destructor's first call,
the tensor is never deleted (the block stays held for ever) and the caller
gets "SystemError: returned NULL without setting an exception" instead of
the consumer's error (tried with numpy 1.24). A Python callback cannot run
with an exception set, nor leave one set on return.

So the capsules have no destructor. The Block that made them keeps them
(retire() below): when the Block is released, every capsule of it still
named "dltensor" is renamed (so that nobody can consume it later) and its
tensor deleted. That runs from release() or __del__, where the interpreter
has saved any pending exception. An unconsumed capsule therefore keeps its
block reference until the Block goes, which the Block's own reference does
anyway. Capsules are consumed by the thread that asked for them, at once
(from_dlpack does both in one C call); one handed to another thread that
consumes it while this Block is being released races with retire().

The capsule calls have their own prototypes (PYFUNCTYPE) instead of setting
restype/argtypes on ctypes.pythonapi's shared function objects, which other
modules in the same process may declare differently.
"""
import ctypes

_api = ctypes.pythonapi
_vp, _cp, _po = ctypes.c_void_p, ctypes.c_char_p, ctypes.py_object

_capsule_new = ctypes.PYFUNCTYPE(_po, _vp, _cp, _vp)(("PyCapsule_New", _api))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, _po, _cp)(("PyCapsule_IsValid", _api))
_capsule_get_pointer = ctypes.PYFUNCTYPE(_vp, _po, _cp)(("PyCapsule_GetPointer", _api))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, _po, _cp)(("PyCapsule_SetName", _api))

# Capsule names must outlive the capsules that carry them: module-level
# buffers (a retired capsule can outlive its Block).
_NAME = ctypes.create_string_buffer(b"dltensor")
_DEAD = ctypes.create_string_buffer(b"peerdma_released_dltensor")
_NAME_P = ctypes.cast(_NAME, _cp)
_DEAD_P = ctypes.cast(_DEAD, _cp)

# DLDeviceType
kDLCPU, kDLCUDA, kDLCUDAHost = 1, 2, 3


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", _vp),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


Deleter = ctypes.CFUNCTYPE(None, _vp)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", _vp), ("deleter", Deleter)]


def delete_tensor(addr):
    """Call the managed tensor's own deleter (for a block's tensor: it drops
    the block reference that pdma_block_dlpack took)."""
    mt = DLManagedTensor.from_address(addr)
    if mt.deleter:
        mt.deleter(addr)


def capsule(managed_tensor_addr):
    """A "dltensor" capsule of the DLManagedTensor at the address (no
    destructor: the caller keeps it and retires it)."""
    return _capsule_new(managed_tensor_addr, _NAME_P, None)


def consumed(cap):
    """Whether a consumer took the capsule's tensor (renamed it)."""
    return not _capsule_is_valid(cap, _NAME_P)


def retire(cap):
    """If nobody consumed cap: make it unconsumable and delete its tensor.
    Returns whether it did."""
    if consumed(cap):
        return False
    addr = _capsule_get_pointer(cap, _NAME_P)
    _capsule_set_name(cap, _DEAD_P)
    if addr:
        delete_tensor(addr)
    return True
