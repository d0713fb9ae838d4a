# SPDX-License-Identifier: MIT
"""Sessions, subscriptions and blocks: include/peerdma/ingest.h in Python.

    with peerdma.Session(port=0, sample_rate=10_000_000) as s:
        sub = s.subscribe()            # every stream, drop-oldest
        s.start()
        for block in sub:              # ends once s.stop() has drained it
            a = numpy.from_dlpack(block)   # int16 [nsamples, 2], no copy
            ...

Lifetimes. A Block holds one reference to its C block; each array made from
it through DLPack holds its own (pdma_block_dlpack takes it, the consumer's
deleter drops it). The samples stay valid and unchanged until the Block is
released (release(), `with`, or garbage collection) and every such array is
gone. A Block keeps its Session open (Python reference). Session.close()
releases the Blocks it handed out that are still alive; arrays may outlive
it (the library keeps a closed session's pools until the last release).

Threads: as the C API documents per call. Subscription.next() waits without
the GIL (other Python threads run), in slices so that Ctrl-C is seen.
"""
import collections
import ctypes
import errno
import threading
import weakref

from . import _dlpack
from . import _lib
from ._lib import lib
from .errors import Closed, Ended, InvalidArgument, NoDevice, check, error

PATHS = {
    "cpu": _lib.PATH_CPU,
    "host-staged": _lib.PATH_HOST_STAGED,
    "zero-copy": _lib.PATH_ZERO_COPY,
    "nic": _lib.PATH_NIC,
}
POLICIES = {"drop-oldest": _lib.SUB_DROP_OLDEST, "backpressure": _lib.SUB_BACKPRESSURE}
MEM_KINDS = {_lib.BLOCK_HOST: "host", _lib.BLOCK_CUDA: "cuda", _lib.BLOCK_CUDA_HOST: "cuda-host"}
_DL_DEVICE = {_lib.BLOCK_HOST: _dlpack.kDLCPU, _lib.BLOCK_CUDA: _dlpack.kDLCUDA,
              _lib.BLOCK_CUDA_HOST: _dlpack.kDLCUDAHost}

IngestStats = collections.namedtuple("IngestStats", [f for f, _ in _lib.IngestStats._fields_])
SubStats = collections.namedtuple("SubStats", [f for f, _ in _lib.SubStats._fields_])

_SLICE_MS = 200  # next(): longest wait without the GIL coming back (signals)


def _bad(what, msg):
    return InvalidArgument(errno.EINVAL, "%s: %s" % (what, msg))


class _Scoped:
    """A context manager that ends the object (_end: close or release) at
    the end of its with-block and when it is collected."""

    __slots__ = ()

    def _end(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._end()

    def __del__(self):
        try:
            self._end()
        except Exception:  # pragma: no cover - interpreter teardown, half-built objects
            pass


def sub_attr(stream_id, policy, depth):
    """struct pdma_sub_attr for subscribe() (a Session's, a forward.Consumer's)."""
    if policy not in POLICIES:
        raise _bad("subscribe", "policy %r: one of %s" % (policy, ", ".join(POLICIES)))
    p = _lib.padded(_lib.SubAttr)
    a = p.s
    lib().pdma_sub_attr_init(ctypes.byref(a))
    if stream_id is not None:
        if not isinstance(stream_id, int) or not 0 <= stream_id <= 0xffffffff:
            raise _bad("subscribe", "stream_id %r: a 32-bit VITA-49 stream ID" % (stream_id,))
        a.stream_id = stream_id
    else:
        a.stream_id = _lib.SUB_ALL_STREAMS
    a.policy = POLICIES[policy]
    if depth is not None:
        if not isinstance(depth, int) or not 0 <= depth <= 0xffffffff:
            raise _bad("subscribe", "depth %r: a 32-bit count" % (depth,))
        a.depth = depth
    return a


class Session(_Scoped):
    """An ingest session (pdma_ingest_open): receives on one UDP port (or a
    NIC), deframes, and publishes blocks to its subscriptions.

    Keyword arguments are struct pdma_ingest_attr's fields; None keeps the
    library's default. path is "cpu", "host-staged", "zero-copy" or "nic".
    port: on the socket paths 0 picks an ephemeral port (Session.port); on
    the nic path it is the UDP destination port the frames carry, and 0 is
    refused (InvalidArgument). The session is open once constructed;
    start() begins receiving.
    """

    _ATTRS = ("threads", "sample_rate", "max_streams", "max_payload", "block_packets",
              "window_blocks", "late_blocks", "cuda_device", "flush_idle_ms")

    def __init__(self, *, path="cpu", bind_addr=None, port=0, threads=None, sample_rate=None,
                 max_streams=None, max_payload=None, block_packets=None, window_blocks=None,
                 late_blocks=None, cuda_device=None, nic_dev=None, kernel_device=None,
                 flush_idle_ms=None):
        self._ing = None
        self._subs = []
        self._blocks = weakref.WeakSet()
        self._started = self._stopped = False
        L = lib()
        if path not in PATHS:
            raise _bad("Session", "path %r: one of %s" % (path, ", ".join(PATHS)))
        p = _lib.padded(_lib.IngestAttr)
        a = p.s
        L.pdma_ingest_attr_init(ctypes.byref(a))
        a.path = PATHS[path]
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise _bad("Session", "port %r: 0 (ephemeral) to 65535" % (port,))
        a.port = port
        kw = dict(threads=threads, sample_rate=sample_rate, max_streams=max_streams,
                  max_payload=max_payload, block_packets=block_packets,
                  window_blocks=window_blocks, late_blocks=late_blocks, cuda_device=cuda_device,
                  flush_idle_ms=flush_idle_ms)
        for name in self._ATTRS:
            v = kw[name]
            if v is None:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise _bad("Session", "%s %r: a non-negative integer" % (name, v))
            try:
                setattr(a, name, v)
            except (TypeError, OverflowError):
                raise _bad("Session", "%s %r out of range" % (name, v)) from None
            if getattr(a, name) != v:  # ctypes truncates silently
                raise _bad("Session", "%s %r out of range" % (name, v))
        # The strings must live until open returns: kept on self.
        self._strs = [s.encode() if isinstance(s, str) else s for s in (bind_addr, nic_dev, kernel_device)]
        for field, s in zip(("bind_addr", "nic_dev", "kernel_device"), self._strs):
            if s is not None:
                setattr(a, field, s)
        ing = ctypes.c_void_p()
        msg = ctypes.create_string_buffer(256)
        ret = L.pdma_ingest_open(ctypes.byref(a), ctypes.byref(ing), msg, len(msg))
        if ret < 0:
            m = msg.value.decode(errors="replace") or None
            if -ret in (errno.ENODEV, errno.ENOENT):
                raise NoDevice(-ret, "pdma_ingest_open: %s" % (m or "no device"))
            raise error(-ret, "pdma_ingest_open", m)
        self._ing = ing
        self._attr = {f: getattr(a, f) for f, _ in _lib.IngestAttr._fields_ if f != "size"}
        self.path = path

    def _live(self):
        if self._ing is None:
            raise Closed(errno.EBADF, "session closed")
        return self._ing

    @property
    def port(self):
        """The UDP port it receives on (the ephemeral one for port=0; on the
        nic path the port its frames carry)."""
        return lib().pdma_ingest_port(self._live())

    @property
    def sample_rate(self):
        return self._attr["sample_rate"]

    @property
    def block_packets(self):
        return self._attr["block_packets"]

    @property
    def closed(self):
        return self._ing is None

    @property
    def ended(self):
        """Every receive thread ended on its own (an error or a revocation)."""
        return bool(lib().pdma_ingest_ended(self._live()))

    def subscribe(self, stream_id=None, policy="drop-oldest", depth=None):
        """A Subscription to one stream ID (None: every stream). Before
        start(): Busy (EBUSY) after it."""
        L = lib()
        ing = self._live()
        a = sub_attr(stream_id, policy, depth)
        sub = ctypes.c_void_p()
        check(L.pdma_ingest_subscribe(ing, ctypes.byref(a), ctypes.byref(sub)), "pdma_ingest_subscribe")
        s = Subscription(self, sub, stream_id, policy)
        self._subs.append(s)
        return s

    def start(self):
        check(lib().pdma_ingest_start(self._live()), "pdma_ingest_start")
        self._started = True

    def stop(self):
        """Drain what arrived, publish every open block, end the
        subscriptions (their iterators finish once drained). Idempotent."""
        if self._stopped:
            return
        ing = self._live()
        self._stopped = True
        if self._started:
            check(lib().pdma_ingest_stop(ing), "pdma_ingest_stop")

    def stats(self):
        p = _lib.padded(_lib.IngestStats)
        lib().pdma_ingest_stats(self._live(), ctypes.byref(p.s))
        return IngestStats(*(getattr(p.s, f) for f in IngestStats._fields))

    def close(self):
        """Stop, release the Blocks still alive, close the subscriptions and
        the session (arrays that view its blocks stay valid). Idempotent."""
        if self._ing is None:
            return
        try:
            if self._started and not self._stopped:
                self.stop()
        finally:
            for b in list(self._blocks):
                b.release()
            for s in self._subs:
                s.close()
            self._subs = []
            ing, self._ing = self._ing, None
            lib().pdma_ingest_close(ing)

    def __repr__(self):
        if self._ing is None:
            return "<peerdma.Session closed>"
        return "<peerdma.Session %s port %u>" % (self.path, self.port)


class Subscription(_Scoped):
    """Blocks of one stream (or all), in publication order. Iterating waits
    for each block and ends when the session has stopped and the queue is
    drained. Not made directly: Session.subscribe().

    next() may run on several threads at once (each gets distinct blocks).
    close() (or the Session's) from another thread is safe too: it waits
    for the next() calls in progress, which give up within _SLICE_MS, and
    only then closes the C subscription, as pdma_sub_close requires."""

    def __init__(self, session, handle, stream_id, policy):
        self._session = session
        self._sub = handle
        self._closed = False
        self._closing = False
        self._inflight = 0
        self._cond = threading.Condition()
        self.stream_id = stream_id
        self.policy = policy

    def _live(self):
        if self._closing:
            raise Closed(errno.EBADF, "subscription closed")
        return self._sub

    def next(self, timeout=None):
        """The next Block, waiting up to timeout seconds (None: as long as it
        takes; 0: poll). Raises Timeout (TimeoutError, ETIMEDOUT) when none
        came, Ended (BrokenPipeError, EPIPE) once the session stopped and
        the queue is drained, Closed (EBADF) once closed."""
        L = lib()
        if timeout is not None and (timeout != timeout or timeout < 0):
            raise _bad("next", "timeout %r: seconds >= 0, or None" % (timeout,))
        with self._cond:
            sub = self._live()
            self._inflight += 1
        try:
            bp = ctypes.POINTER(_lib.Block)()
            left = None if timeout is None else int(timeout * 1000 + 0.999)
            while True:
                ms = _SLICE_MS if left is None else min(left, _SLICE_MS)
                ret = L.pdma_sub_next(sub, ctypes.byref(bp), ms)
                if left is not None:
                    left -= ms
                if ret != -errno.ETIMEDOUT or (left is not None and left <= 0):
                    break
                if self._closing:
                    raise Closed(errno.EBADF, "subscription closed while waiting")
            check(ret, "pdma_sub_next")
            b = Block(self._session, bp)
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()
        self._session._blocks.add(b)
        return b

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return self.next()
        except Ended:
            raise StopIteration from None

    def stats(self):
        with self._cond:
            sub = self._live()
            p = _lib.padded(_lib.SubStats)
            lib().pdma_sub_stats(sub, ctypes.byref(p.s))
        return SubStats(*(getattr(p.s, f) for f in SubStats._fields))

    def close(self):
        """Close the subscription: next() calls in progress end (with a
        block, Ended or Closed), later ones raise Closed; blocks still held
        stay valid. Idempotent."""
        with self._cond:
            if self._closing:
                while not self._closed:
                    self._cond.wait()
                return
            self._closing = True
            while self._inflight:
                self._cond.wait()
        lib().pdma_sub_close(self._sub)
        with self._cond:
            self._closed = True
            self._cond.notify_all()



class Block(_Scoped):
    """A block of one stream's samples, in place (host or GPU memory), until
    released. Exports DLPack: numpy.from_dlpack(block), cupy.from_dlpack,
    torch.from_dlpack see int16 [nsamples, 2] (I, Q) without a copy."""

    __slots__ = ("_b", "_session", "_capsules", "_lock", "__weakref__")

    def __init__(self, session, bp):
        self._b = bp
        self._session = session
        self._capsules = []
        self._lock = threading.Lock()

    def _c(self):
        b = self._b
        if b is None:
            raise Closed(errno.EBADF, "block released")
        return b.contents

    # The C block's fields, read-only.
    stream_id = property(lambda s: s._c().stream_id)
    format = property(lambda s: s._c().format)
    bytes_per_sample = property(lambda s: s._c().bytes_per_sample)
    samples_per_packet = property(lambda s: s._c().samples_per_packet)
    first_sample = property(lambda s: s._c().first_sample, doc="index of sample 0 in the stream's time line")
    ts_int = property(lambda s: s._c().ts_int, doc="VITA-49 integer seconds of sample 0")
    ts_frac = property(lambda s: s._c().ts_frac, doc="sample count within that second")
    nsamples = property(lambda s: s._c().nsamples)
    npackets = property(lambda s: s._c().npackets)
    gaps = property(lambda s: s._c().gaps, doc="packets of the block that never came (zeros)")
    seq = property(lambda s: s._c().seq, doc="the stream's block number")
    data = property(lambda s: s._c().data or 0, doc="address of the samples (host or device)")
    device = property(lambda s: s._c().device)
    cuda_event = property(lambda s: s._c().cuda_event, doc="CUevent after which the samples are valid (GPU paths)")

    @property
    def mem(self):
        """Where the samples are: "host", "cuda" or "cuda-host"."""
        return MEM_KINDS.get(self._c().mem, self._c().mem)

    @property
    def ts(self):
        """(integer seconds, sample count) of sample 0."""
        c = self._c()
        return (c.ts_int, c.ts_frac)

    @property
    def gap_mask(self):
        """A list of npackets bools: True where the packet never came."""
        c = self._c()
        n = c.npackets
        w = c.gap_mask
        if not w:
            return [False] * n
        return [bool(w[i >> 6] >> (i & 63) & 1) for i in range(n)]

    @property
    def gap_packets(self):
        """Indices (within the block) of the packets that never came."""
        return [i for i, g in enumerate(self.gap_mask) if g]

    def _ctx(self, bit, field):
        c = self._c()
        return getattr(c, field) if c.ctx_fields & bit else None

    sample_rate = property(lambda s: s._ctx(_lib.CTX_SAMPLE_RATE, "ctx_sample_rate"),
                           doc="Hz, from the stream's latest context packet (None: none said)")
    rf_freq = property(lambda s: s._ctx(_lib.CTX_RF_FREQ, "ctx_rf_freq"),
                       doc="RF reference frequency, Hz, from a context packet (or None)")
    bandwidth = property(lambda s: s._ctx(_lib.CTX_BANDWIDTH, "ctx_bandwidth"),
                         doc="Hz, from a context packet (or None)")

    @property
    def released(self):
        return self._b is None

    def _end(self):
        self.release()

    def __dlpack_device__(self):
        c = self._c()
        t = _DL_DEVICE.get(c.mem)
        if t is None:
            raise error(errno.EPROTO, "__dlpack_device__", "unknown memory kind %d" % c.mem)
        return (t, c.device if t != _dlpack.kDLCPU else 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A "dltensor" capsule viewing the samples, holding its own block
        reference. stream (CUDA blocks): the consumer's stream, which is
        made to wait for the block's event: None or 1 the legacy default
        stream, 2 the per-thread default stream, else a cudaStream_t as an
        integer; -1: no synchronisation. Host blocks take None (or -1).
        max_version: the consumer's highest DLPack version; the capsule is
        the legacy (unversioned) one, which every version accepts."""
        with self._lock:
            c = self._c()
            if copy:
                raise BufferError("peerdma blocks are exported in place; copy=True is not offered")
            if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
                raise BufferError("block is on %r, not %r" % (self.__dlpack_device__(), tuple(dl_device)))
            if c.mem == _lib.BLOCK_HOST:
                if stream not in (None, -1):
                    raise _bad("__dlpack__", "stream %r for a host block: None" % (stream,))
                s = -1  # pdma_block_dlpack: no stream
            else:
                if stream is None:
                    s = 1  # the array API's default for CUDA: the legacy default stream
                elif isinstance(stream, int) and stream != 0:
                    s = stream
                else:
                    raise _bad("__dlpack__", "stream %r: None, -1, 1, 2 or a CUDA stream handle" % (stream,))
            # Capsules consumed since the last call need no watching.
            self._capsules = [k for k in self._capsules if not _dlpack.consumed(k)]
            mt = ctypes.c_void_p()
            check(lib().pdma_block_dlpack(self._b, s, ctypes.byref(mt)), "pdma_block_dlpack")
            try:
                cap = _dlpack.capsule(mt.value)
            except BaseException:
                _dlpack.delete_tensor(mt.value)
                raise
            self._capsules.append(cap)
            return cap

    def numpy(self):
        """numpy.from_dlpack(self): int16 [nsamples, 2], no copy (host
        blocks; a GPU block: copy())."""
        import numpy
        return numpy.from_dlpack(self)

    def read(self, first_packet=0, npackets=None):
        """A host copy (bytes: int16 I, Q in host order) of npackets packets
        from first_packet (default: to the block's end), taken after the
        block's CUDA event where it has one (pdma_block_read): GPU blocks
        for a program without CuPy or PyTorch."""
        with self._lock:
            c = self._c()
            if npackets is None and isinstance(first_packet, int):
                npackets = c.npackets - first_packet
            for name, v in (("first_packet", first_packet), ("npackets", npackets)):
                if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 0xffffffff:
                    raise _bad("read", "%s %r: a packet count within the block" % (name, v))
            n = npackets * c.samples_per_packet * c.bytes_per_sample
            buf = ctypes.create_string_buffer(max(n, 1))
            check(lib().pdma_block_read(self._b, first_packet, npackets, buf), "pdma_block_read")
            return buf.raw[:n]

    def copy(self):
        """A numpy copy of the samples, int16 [nsamples, 2], in host memory
        whatever the block's (read())."""
        import numpy
        return numpy.frombuffer(self.read(), dtype=numpy.int16).reshape(-1, 2).copy()

    def release(self):
        """Drop this Block's reference (arrays made from it keep theirs).
        Capsules from __dlpack__ that nobody consumed are voided. Idempotent."""
        lock = getattr(self, "_lock", None)  # None: __init__ never ran
        if lock is None:
            return
        with lock:
            b = self._b
            if b is None:
                return
            self._b = None
            caps, self._capsules = self._capsules, []
        try:
            for k in caps:
                _dlpack.retire(k)
        finally:
            lib().pdma_block_release(b)

    def __repr__(self):
        if self._b is None:
            return "<peerdma.Block released>"
        c = self._c()
        return ("<peerdma.Block stream 0x%x seq %u first_sample %u nsamples %u gaps %u %s>"
                % (c.stream_id, c.seq, c.first_sample, c.nsamples, c.gaps, self.mem))
