# SPDX-License-Identifier: MIT
"""libpeerdma_ingest.so through ctypes: where the library is found, the C
structures of include/peerdma/ingest.h, and the function prototypes.

The structures are declared field for field as the header has them; ctypes
lays them out as the C compiler does. Where the library writes a structure
for us (pdma_ingest_attr_init, the stats calls), the buffer is padded past
its declared size, and the size the library reports is checked, so a library
built from a newer header can never write past what Python allocated.
"""
import ctypes
import ctypes.util
import errno
import os
import threading

from .errors import LibraryNotFound, ApiMismatch

API_VERSION = 1  # PDMA_INGEST_API_VERSION this binding was written for

# enum pdma_ingest_path_kind
PATH_CPU, PATH_HOST_STAGED, PATH_ZERO_COPY, PATH_NIC = 0, 1, 2, 3
# enum pdma_sub_policy
SUB_DROP_OLDEST, SUB_BACKPRESSURE = 0, 1
# enum pdma_block_mem
BLOCK_HOST, BLOCK_CUDA, BLOCK_CUDA_HOST = 1, 2, 3
FMT_CI16 = 1
SUB_ALL_STREAMS = (1 << 64) - 1
CTX_SAMPLE_RATE, CTX_RF_FREQ, CTX_BANDWIDTH = 1 << 0, 1 << 1, 1 << 2

_u8, _u16, _u32, _u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64
_int, _enum = ctypes.c_int, ctypes.c_int  # C enums here are int-sized
_pad = 256  # bytes of slack after each structure the library writes


class IngestAttr(ctypes.Structure):
    _fields_ = [
        ("size", _u32),
        ("path", _enum),
        ("bind_addr", ctypes.c_char_p),
        ("port", _u16),
        ("threads", _u32),
        ("sample_rate", _u64),
        ("max_streams", _u32),
        ("max_payload", _u32),
        ("block_packets", _u32),
        ("window_blocks", _u32),
        ("late_blocks", _u32),
        ("cuda_device", _int),
        ("nic_dev", ctypes.c_char_p),
        ("kernel_device", ctypes.c_char_p),
        ("flush_idle_ms", _u32),
    ]


class Block(ctypes.Structure):
    _fields_ = [
        ("stream_id", _u32),
        ("format", _u32),
        ("bytes_per_sample", _u32),
        ("samples_per_packet", _u32),
        ("first_sample", _u64),
        ("ts_int", _u64),
        ("ts_frac", _u64),
        ("nsamples", _u64),
        ("npackets", _u32),
        ("gaps", _u32),
        ("gap_mask", ctypes.POINTER(_u64)),
        ("seq", _u64),
        ("data", ctypes.c_void_p),
        ("mem", _enum),
        ("device", _int),
        ("cuda_event", ctypes.c_void_p),
        ("ctx_fields", _u32),
        ("ctx_sample_rate", ctypes.c_double),
        ("ctx_rf_freq", ctypes.c_double),
        ("ctx_bandwidth", ctypes.c_double),
    ]


# pdma_block_cb: unused by this binding (Python consumes with pdma_sub_next),
# declared so that pdma_sub_attr has its C layout.
BlockCb = ctypes.CFUNCTYPE(None, ctypes.POINTER(Block), ctypes.c_void_p)


class SubAttr(ctypes.Structure):
    _fields_ = [
        ("size", _u32),
        ("stream_id", _u64),
        ("policy", _enum),
        ("depth", _u32),
        ("cb", BlockCb),
        ("cb_arg", ctypes.c_void_p),
    ]


class IngestStats(ctypes.Structure):
    _fields_ = [
        ("datagrams", _u64),
        ("bytes", _u64),
        ("ring_overruns", _u64),
        ("socket_drops", _u64),
        ("packets_placed", _u64),
        ("window_drops", _u64),
        ("late", _u64),
        ("blocks_published", _u64),
        ("gap_packets", _u64),
        ("streams", _u32),
    ]


class SubStats(ctypes.Structure):
    _fields_ = [
        ("delivered", _u64),
        ("overruns", _u64),
        ("waits", _u64),
        ("queued", _u32),
        ("held", _u32),
        ("overrun_packets", _u64),
    ]


class ConsumeAttr(ctypes.Structure):
    """struct pdma_consume_attr (include/peerdma/forward.h)."""
    _fields_ = [
        ("size", _u32),
        ("addr", ctypes.c_char_p),
        ("port", _u16),
        ("name", ctypes.c_char_p),
        ("streams", ctypes.POINTER(_u32)),
        ("nstreams", _u32),
        ("max_streams", _u32),
        ("pool_blocks", _u32),
        ("timeout_ms", _int),
    ]


class ConsumeStats(ctypes.Structure):
    _fields_ = [
        ("blocks", _u64),
        ("bytes", _u64),
        ("gap_packets", _u64),
        ("local_drops", _u64),
        ("fwd_dropped_blocks", _u64),
        ("fwd_dropped_packets", _u64),
        ("ended", ctypes.c_bool),
        ("lost", ctypes.c_bool),
        ("error", _int),
    ]


def padded(struct_type):
    """A zeroed instance of struct_type with _pad bytes of room after it."""
    class _Padded(ctypes.Structure):
        _fields_ = [("s", struct_type), ("pad", ctypes.c_uint8 * _pad)]
    return _Padded()


_P = ctypes.c_void_p
_PROTOTYPES = {
    # name: (restype, argtypes)
    "pdma_ingest_attr_init": (None, [ctypes.POINTER(IngestAttr)]),
    "pdma_ingest_open": (_int, [ctypes.POINTER(IngestAttr), ctypes.POINTER(_P),
                                ctypes.c_char_p, ctypes.c_size_t]),
    "pdma_ingest_port": (_u16, [_P]),
    "pdma_ingest_start": (_int, [_P]),
    "pdma_ingest_stop": (_int, [_P]),
    "pdma_ingest_ended": (ctypes.c_bool, [_P]),
    "pdma_ingest_stats": (None, [_P, ctypes.POINTER(IngestStats)]),
    "pdma_ingest_close": (None, [_P]),
    "pdma_sub_attr_init": (None, [ctypes.POINTER(SubAttr)]),
    "pdma_ingest_subscribe": (_int, [_P, ctypes.POINTER(SubAttr), ctypes.POINTER(_P)]),
    "pdma_sub_next": (_int, [_P, ctypes.POINTER(ctypes.POINTER(Block)), _int]),
    "pdma_sub_stats": (None, [_P, ctypes.POINTER(SubStats)]),
    "pdma_sub_close": (None, [_P]),
    "pdma_block_read": (_int, [ctypes.POINTER(Block), _u32, _u32, ctypes.c_void_p]),
    "pdma_block_retain": (None, [ctypes.POINTER(Block)]),
    "pdma_block_release": (None, [ctypes.POINTER(Block)]),
    "pdma_block_dlpack": (_int, [ctypes.POINTER(Block), ctypes.c_ssize_t, ctypes.POINTER(_P)]),
}

# include/peerdma/forward.h's consumer (PEERDMA_INGEST_0.2): bound on first
# use (forward_lib()), so that a library without it still serves Session.
_FORWARD_PROTOTYPES = {
    "pdma_consume_attr_init": (None, [ctypes.POINTER(ConsumeAttr)]),
    "pdma_consume_open": (_int, [ctypes.POINTER(ConsumeAttr), ctypes.POINTER(_P),
                                 ctypes.c_char_p, ctypes.c_size_t]),
    "pdma_consume_block_packets": (_u32, [_P]),
    "pdma_consume_sample_rate": (_u64, [_P]),
    "pdma_consume_subscribe": (_int, [_P, ctypes.POINTER(SubAttr), ctypes.POINTER(_P)]),
    "pdma_consume_start": (_int, [_P]),
    "pdma_consume_ended": (ctypes.c_bool, [_P]),
    "pdma_consume_stats": (None, [_P, ctypes.POINTER(ConsumeStats)]),
    "pdma_consume_close": (None, [_P]),
}
_forward_bound = False

LIB_NAME = "peerdma_ingest"
_lock = threading.Lock()
_lib = None


def _candidates():
    """Where the library may be, in order: $PEERDMA_LIBRARY, next to this
    package, the linker's search (ldconfig), then the bare soname for dlopen
    (LD_LIBRARY_PATH)."""
    env = os.environ.get("PEERDMA_LIBRARY")
    if env:
        # Named explicitly: nothing else is tried, so a wrong path is an error,
        # not a silent fall-back to some other installed copy.
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, n) for n in ("libpeerdma_ingest.so", "libpeerdma_ingest.so.0")
           if os.path.exists(os.path.join(here, n))]
    found = ctypes.util.find_library(LIB_NAME)
    if found:
        out.append(found)
    out += ["libpeerdma_ingest.so.0", "libpeerdma_ingest.so"]
    return out


def _bind(dll):
    for name, (res, args) in _PROTOTYPES.items():
        try:
            f = getattr(dll, name)
        except AttributeError:
            raise ApiMismatch(errno.ENOSYS, "%s lacks %s: not the ingest API this package binds"
                              % (dll._name, name)) from None
        f.restype, f.argtypes = res, args
    # The library's idea of the attribute sizes must be ours (the size
    # fields say sizeof in C): otherwise the layouts above are wrong.
    for init, st in (("pdma_ingest_attr_init", IngestAttr), ("pdma_sub_attr_init", SubAttr)):
        p = padded(st)
        getattr(dll, init)(ctypes.byref(p.s))
        if p.s.size != ctypes.sizeof(st):
            raise ApiMismatch(errno.EPROTO, "%s: %s says size %u, this package's layout has %u "
                              "(different API version)" % (dll._name, init, p.s.size, ctypes.sizeof(st)))
    return dll


def lib():
    """The loaded library (loaded once, on first use, so that importing the
    package never needs it)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            tried = []
            for c in _candidates():
                try:
                    dll = ctypes.CDLL(c)
                except OSError as e:
                    tried.append("%s (%s)" % (c, e))
                    continue
                _lib = _bind(dll)
                break
            else:
                raise LibraryNotFound(errno.ENOENT, "libpeerdma_ingest.so not found; tried: %s. "
                                      "Set PEERDMA_LIBRARY to its path" % "; ".join(tried))
    return _lib


def forward_lib():
    """The library with the consumer calls bound: ApiMismatch where it has
    none (built before forwarding) or their layout differs."""
    global _forward_bound
    dll = lib()
    with _lock:
        if not _forward_bound:
            for name, (res, args) in _FORWARD_PROTOTYPES.items():
                try:
                    f = getattr(dll, name)
                except AttributeError:
                    raise ApiMismatch(errno.ENOSYS, "%s lacks %s: a library without forwarding"
                                      % (dll._name, name)) from None
                f.restype, f.argtypes = res, args
            p = padded(ConsumeAttr)
            dll.pdma_consume_attr_init(ctypes.byref(p.s))
            if p.s.size != ctypes.sizeof(ConsumeAttr):
                raise ApiMismatch(errno.EPROTO, "%s: pdma_consume_attr_init says size %u, this "
                                  "package's layout has %u" % (dll._name, p.s.size,
                                                               ctypes.sizeof(ConsumeAttr)))
            _forward_bound = True
    return dll


def library_path():
    """The path (or soname) the library was loaded from."""
    return lib()._name
