# SPDX-License-Identifier: MIT
"""The remote side of `peerdma forward`: include/peerdma/forward.h's consumer
in Python. A Consumer connects to a forwarder over UCX and hands out the
same Subscriptions and Blocks as a local Session (numpy.from_dlpack, read(),
gaps, context), so a program reads local and remote streams alike.

    with peerdma.Consumer("10.0.0.1", 4992, name="a", streams=[0x1000]) as c:
        sub = c.subscribe()
        c.start()
        for block in sub:              # ends when the forwarder says END
            a = numpy.from_dlpack(block)
"""
import collections
import ctypes
import errno
import weakref

from . import _lib
from .errors import Closed, InvalidArgument, check, error
from .ingest import Subscription, _Scoped, sub_attr

ConsumeStats = collections.namedtuple("ConsumeStats", [f for f, _ in _lib.ConsumeStats._fields_])


class Consumer(_Scoped):
    """pdma_consume_open: connects to the forwarder at addr:port and says
    HELLO (name, stream IDs; None: every stream). Raises the forwarder's
    refusal (its reason in the message) or ConnectionRefusedError /
    TimeoutError. subscribe() before start(), as with a Session."""

    def __init__(self, addr, port, *, name="consumer", streams=None, max_streams=None,
                 pool_blocks=None, timeout_ms=None):
        self._c = None
        self._subs = []
        self._blocks = weakref.WeakSet()
        L = _lib.forward_lib()
        p = _lib.padded(_lib.ConsumeAttr)
        a = p.s
        L.pdma_consume_attr_init(ctypes.byref(a))
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port <= 65535:
            raise InvalidArgument(errno.EINVAL, "Consumer: port %r: 1 to 65535" % (port,))
        self._strs = [addr.encode(), name.encode()]
        a.addr, a.name = self._strs
        a.port = port
        ids = list(streams or [])
        if any(not isinstance(i, int) or not 0 <= i <= 0xffffffff for i in ids):
            raise InvalidArgument(errno.EINVAL, "Consumer: streams %r: 32-bit stream IDs" % (streams,))
        self._ids = (_lib._u32 * max(1, len(ids)))(*ids)
        a.streams = ctypes.cast(self._ids, ctypes.POINTER(_lib._u32))
        a.nstreams = len(ids)
        for f, v in (("max_streams", max_streams), ("pool_blocks", pool_blocks),
                     ("timeout_ms", timeout_ms)):
            if v is not None:
                setattr(a, f, v)
        c = ctypes.c_void_p()
        msg = ctypes.create_string_buffer(256)
        ret = L.pdma_consume_open(ctypes.byref(a), ctypes.byref(c), msg, len(msg))
        if ret < 0:
            raise error(-ret, "pdma_consume_open", msg.value.decode(errors="replace") or None)
        self._c = c
        self.streams = ids

    def _live(self):
        if self._c is None:
            raise Closed(errno.EBADF, "consumer closed")
        return self._c

    @property
    def block_packets(self):
        return _lib.forward_lib().pdma_consume_block_packets(self._live())

    @property
    def sample_rate(self):
        return _lib.forward_lib().pdma_consume_sample_rate(self._live())

    @property
    def ended(self):
        """The forwarder said END or went away: the subscriptions drain and end."""
        return bool(_lib.forward_lib().pdma_consume_ended(self._live()))

    def subscribe(self, stream_id=None, policy="backpressure", depth=None):
        """A Subscription (as Session.subscribe) to the blocks that arrive.
        backpressure (default) holds the forwarder's credits back while the
        program is behind; the forwarder then counts the blocks it could
        not send (stats().fwd_dropped_blocks)."""
        a = sub_attr(stream_id, policy, depth)
        sub = ctypes.c_void_p()
        check(_lib.forward_lib().pdma_consume_subscribe(self._live(), ctypes.byref(a), ctypes.byref(sub)),
              "pdma_consume_subscribe")
        s = Subscription(self, sub, stream_id, policy)
        self._subs.append(s)
        return s

    def start(self):
        check(_lib.forward_lib().pdma_consume_start(self._live()), "pdma_consume_start")

    def stats(self):
        p = _lib.padded(_lib.ConsumeStats)
        _lib.forward_lib().pdma_consume_stats(self._live(), ctypes.byref(p.s))
        return ConsumeStats(*(getattr(p.s, f) for f in ConsumeStats._fields))

    def close(self):
        """Release the Blocks still alive, close the subscriptions and the
        connection (arrays viewing its blocks stay valid). Idempotent."""
        if self._c is None:
            return
        for b in list(self._blocks):
            b.release()
        for s in self._subs:
            s.close()
        self._subs = []
        c, self._c = self._c, None
        _lib.forward_lib().pdma_consume_close(c)

    def __repr__(self):
        return "<peerdma.Consumer %s>" % ("closed" if self._c is None else "open")
