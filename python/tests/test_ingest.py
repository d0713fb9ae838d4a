# SPDX-License-Identifier: MIT
"""The Python package on the CPU path, against `peerdma gen` over loopback:
every sample as gen made it, gaps exactly where gen lost packets, numpy
zero-copy, blocks released after their last array, the iterator's end, errno
on errors, and a stalled consumer under drop-oldest and backpressure."""
import ctypes
import errno
import gc
import threading
import time

import numpy as np
import pytest

import peerdma
from genref import (GEN_SAMPLE_RATE, GEN_STREAM_BASE, GenRun, gen_iq, samples_per_packet)

SPP = samples_per_packet()


def session(**kw):
    kw.setdefault("sample_rate", GEN_SAMPLE_RATE)
    kw.setdefault("block_packets", 16)
    return peerdma.Session(bind_addr="127.0.0.1", port=0, **kw)


class Collector(threading.Thread):
    """Iterates a subscription on its own thread until the session stops,
    checking each block as it comes and releasing it."""

    def __init__(self, sub, check):
        super().__init__(daemon=True)
        self.sub, self.check = sub, check
        self.n = 0
        self.error = None

    def run(self):
        try:
            for b in self.sub:
                self.check(b)
                self.n += 1
                b.release()
        except BaseException as e:  # reported by the test thread
            self.error = e

    def finish(self):
        self.join(60)
        assert not self.is_alive(), "the iterator did not end after the session stopped"
        if self.error:
            raise self.error


class Checker:
    """Checks blocks against what gen sent; records what they covered."""

    def __init__(self):
        self.exp = None
        self.covered = {}   # stream_id -> list of packet sample starts
        self.gapped = {}    # stream_id -> set of gap packet sample starts
        self.gaps = 0
        self.blocks = []
        self.lock = threading.Lock()

    def __call__(self, b):
        assert b.format == 1 and b.bytes_per_sample == 4 and b.mem == "host"
        assert b.samples_per_packet == SPP
        assert b.nsamples == b.npackets * SPP
        assert b.first_sample == b.ts_int * GEN_SAMPLE_RATE + b.ts_frac
        assert b.first_sample % SPP == 0
        a = np.from_dlpack(b)
        assert a.dtype == np.int16 and a.shape == (b.nsamples, 2)
        assert a.ctypes.data == b.data, "numpy copied the block"
        mask = b.gap_mask
        assert sum(mask) == b.gaps
        want = gen_iq(b.stream_id, b.first_sample, b.nsamples)
        starts = [b.first_sample + p * SPP for p in range(b.npackets)]
        for p, g in enumerate(mask):
            if g:
                want[p * SPP:(p + 1) * SPP] = 0
        np.testing.assert_array_equal(a, want)
        with self.lock:
            self.covered.setdefault(b.stream_id, []).extend(starts)
            self.gapped.setdefault(b.stream_id, set()).update(s for s, g in zip(starts, mask) if g)
            self.gaps += b.gaps
            self.blocks.append((b.stream_id, b.seq, b.sample_rate, b.bandwidth))

    def verify(self, gen):
        """Every packet gen sent delivered once, in its place; gap bits
        exactly at the packets it lost (and nowhere inside the stream)."""
        exp = gen.expected()
        assert sorted(self.covered) == sorted(exp)
        for sid, (sent, lost) in exp.items():
            cov = self.covered[sid]
            assert len(cov) == len(set(cov)), "a packet position delivered twice"
            lo, hi = min(sent), max(sent)
            inside = {s for s in cov if lo <= s <= hi}
            assert inside == sent | lost, "packet positions missing from the blocks"
            assert self.gapped[sid] & inside == lost, "gap bits differ from what gen lost"
            outside_not_gap = {s for s in cov if not lo <= s <= hi} - self.gapped[sid]
            assert not outside_not_gap, "positions outside the stream not flagged as gaps"
            rep = [r for r in gen.report["streams"] if r["stream_id"] == sid][0]
            assert len(lost) == rep["lost"]


def test_every_sample_and_every_gap(tool, tmp_path):
    """Two streams with 2% loss (and duplicates, adjacent swaps): every
    sample as pdma_gen_sample says, zeros and gap bits exactly where gen
    lost packets (read from its pcap), zero-copy numpy views."""
    chk = Checker()
    # Room for every block of the run (2 x 600 / 16 packets): a slow start
    # of the consumer thread must not overrun anything.
    with session(window_blocks=128) as s:
        sub = s.subscribe(depth=128)
        s.start()
        col = Collector(sub, chk)
        col.start()
        gen = GenRun(tool, s.port, str(tmp_path / "gen.pcap"), streams=2, packets=600, loss=20,
                     seed=7, extra=["--dup", "5", "--reorder", "10"]).run()
        s.stop()
        col.finish()
        st, ss = s.stats(), sub.stats()
    assert gen.report["streams"][0]["lost"] > 0 and gen.report["streams"][1]["lost"] > 0
    assert ss.overruns == 0 and st.window_drops == 0, (st, ss)
    chk.verify(gen)
    assert st.socket_drops == 0 and st.ring_overruns == 0 and st.late == 0
    assert ss.overruns == 0 and ss.delivered == col.n == st.blocks_published
    assert st.gap_packets == chk.gaps
    # gen's context packet (sample rate, bandwidth) reaches the blocks.
    assert all(r == GEN_SAMPLE_RATE and bw == GEN_SAMPLE_RATE * 0.8 for _, _, r, bw in chk.blocks)
    # Each stream's blocks in order (a block published early, after
    # flush_idle_ms without packets, shares its seq with the one that
    # carries the rest of its positions).
    for sid in (GEN_STREAM_BASE, GEN_STREAM_BASE + 1):
        seqs = [q for i, q, _, _ in chk.blocks if i == sid]
        assert seqs == sorted(seqs)


def test_stats_count_streams(tool, tmp_path):
    s, sub = fed_session(tool, tmp_path, streams=3, packets=32)
    with s:
        assert s.stats().streams == 3


def test_one_stream_subscription(tool, tmp_path):
    """A subscription by stream ID sees that stream only."""
    chk = Checker()
    with session(window_blocks=128) as s:
        sub = s.subscribe(stream_id=GEN_STREAM_BASE + 1, depth=128)
        s.start()
        col = Collector(sub, chk)
        col.start()
        gen = GenRun(tool, s.port, str(tmp_path / "gen.pcap"), streams=2, packets=300, loss=20,
                     seed=3).run()
        s.stop()
        col.finish()
    assert list(chk.covered) == [GEN_STREAM_BASE + 1]
    gen.sent = {GEN_STREAM_BASE + 1: gen.sent[GEN_STREAM_BASE + 1]}
    chk.verify(gen)


def fed_session(tool, tmp_path, packets=64, streams=1, **kw):
    """A session with one subscription, fed and stopped: its blocks wait
    in the queue."""
    s = session(**kw)
    sub = s.subscribe(depth=64)
    s.start()
    GenRun(tool, s.port, str(tmp_path / "gen.pcap"), streams=streams, packets=packets).run()
    s.stop()
    return s, sub


def test_block_released_after_last_view(tool, tmp_path):
    s, sub = fed_session(tool, tmp_path)
    with s:
        b = sub.next(timeout=5)
        assert sub.stats().held == 1
        a = np.from_dlpack(b)
        assert a.ctypes.data == b.data
        first = a.copy()
        v = a[3:10]               # a view of the view: keeps the array alive
        b.release()
        assert b.released
        assert sub.stats().held == 1, "released while an array views it"
        del a
        gc.collect()
        assert sub.stats().held == 1, "released while a view of the array lives"
        np.testing.assert_array_equal(v, first[3:10])
        del v
        gc.collect()
        assert sub.stats().held == 0, "not released after its last array"

        # The Block alone, dropped without release(): garbage collection.
        b = sub.next(timeout=5)
        assert sub.stats().held == 1
        del b
        assert sub.stats().held == 0

        # Two arrays of one block, the Block gone first.
        b = sub.next(timeout=5)
        a1, a2 = b.numpy(), np.from_dlpack(b)
        assert a1.ctypes.data == a2.ctypes.data == b.data
        del b
        assert sub.stats().held == 1
        del a1
        assert sub.stats().held == 1
        del a2
        assert sub.stats().held == 0

        # A context manager releases at its end.
        with sub.next(timeout=5) as b:
            assert sub.stats().held == 1
        assert sub.stats().held == 0 and b.released


def test_array_outlives_its_session(tool, tmp_path):
    """An array may outlive the Session (and its Block): the samples stay
    readable until it goes (ASan and valgrind runs check the memory)."""
    s, sub = fed_session(tool, tmp_path)
    b = sub.next(timeout=5)
    a = np.from_dlpack(b)
    sub.close()                  # closing the subscription first changes nothing
    want = gen_iq(b.stream_id, b.first_sample, b.nsamples)
    s.close()
    assert b.released and s.closed
    np.testing.assert_array_equal(a, want)
    del a


def test_read_copies(tool, tmp_path):
    """read() / copy(): host copies through pdma_block_read, equal to the
    in-place view; a range outside the block is EINVAL."""
    s, sub = fed_session(tool, tmp_path, packets=64)
    with s:
        b = sub.next(timeout=5)
        view = np.from_dlpack(b)
        c = b.copy()
        assert c.ctypes.data != b.data
        np.testing.assert_array_equal(c, view)
        nb = b.samples_per_packet * 4
        assert b.read(2, 3) == view.tobytes()[2 * nb:5 * nb]
        assert b.read(b.npackets) == b""
        for bad in ((b.npackets, 1), (0, b.npackets + 1), (-1, 1)):
            with pytest.raises(peerdma.InvalidArgument) as e:
                b.read(*bad)
            assert e.value.errno == errno.EINVAL


def test_torch_cpu_zero_copy(tool, tmp_path):
    """PyTorch (where installed) views a host block in place too."""
    torch = pytest.importorskip("torch")
    s, sub = fed_session(tool, tmp_path)
    with s:
        b = sub.next(timeout=5)
        t = torch.from_dlpack(b)
        assert t.device.type == "cpu" and t.data_ptr() == b.data
        assert t.dtype == torch.int16 and tuple(t.shape) == (b.nsamples, 2)
        np.testing.assert_array_equal(t.numpy(), gen_iq(b.stream_id, b.first_sample, b.nsamples))
        b.release()
        assert sub.stats().held == 1
        del t
        assert sub.stats().held == 0


def test_unconsumed_capsule(tool, tmp_path):
    """A capsule nobody consumed holds the block until the Block goes; then
    it is voided, so a late consumer cannot read released samples."""
    s, sub = fed_session(tool, tmp_path)
    with s:
        b = sub.next(timeout=5)
        caps = [b.__dlpack__(), b.__dlpack__()]
        assert sub.stats().held == 1
        del caps[1]
        b.release()
        assert sub.stats().held == 0

        class Late:
            def __dlpack__(self, stream=None, **kw):  # numpy 2 adds max_version, ...
                return caps[0]

            def __dlpack_device__(self):
                return (1, 0)

        with pytest.raises(Exception):
            np.from_dlpack(Late())
        assert sub.stats().held == 0


def test_released_block_raises_ebadf(tool, tmp_path):
    s, sub = fed_session(tool, tmp_path)
    with s:
        b = sub.next(timeout=5)
        b.release()
        b.release()  # idempotent
        for f in (lambda: b.data, lambda: b.__dlpack__(), lambda: np.from_dlpack(b)):
            with pytest.raises(peerdma.Closed) as e:
                f()
            assert e.value.errno == errno.EBADF


def test_held_blocks_never_change(tool, tmp_path):
    """Blocks held across the rest of the stream: their samples never change
    while later blocks are delivered and released."""
    s, sub = fed_session(tool, tmp_path, packets=400)
    with s:
        held = [sub.next(timeout=5) for _ in range(3)]
        raw = [ctypes.string_at(b.data, b.nsamples * 4) for b in held]
        rest = sum(1 for _ in sub)
        assert rest > 0
        for b, r in zip(held, raw):
            assert ctypes.string_at(b.data, b.nsamples * 4) == r


def test_iterator_ends_with_stop(tool, tmp_path):
    with session() as s:
        sub = s.subscribe(depth=64)
        s.start()
        got = []
        t = threading.Thread(target=lambda: got.extend(b.seq for b in sub), daemon=True)
        t.start()
        GenRun(tool, s.port, str(tmp_path / "gen.pcap"), streams=1, packets=200).run()
        time.sleep(0.2)
        assert t.is_alive(), "the iterator ended before the session stopped"
        s.stop()
        t.join(30)
        assert not t.is_alive()
        assert len(got) == s.stats().blocks_published > 0
        with pytest.raises(peerdma.Ended) as e:
            sub.next(timeout=1)
        assert e.value.errno == errno.EPIPE and isinstance(e.value, BrokenPipeError)


def test_close_while_another_thread_waits():
    """Closing a subscription (or the session) while another thread waits
    in next(): the waiter ends (Closed, or the iterator's end) and the C
    subscription is closed only after it left pdma_sub_next."""
    with session() as s:
        sub1, sub2 = s.subscribe(), s.subscribe()
        s.start()
        out = {}

        def wait1():
            try:
                sub1.next()
            except peerdma.Closed as e:
                out["sub1"] = e.errno

        def wait2():
            out["sub2"] = list(sub2)

        ts = [threading.Thread(target=wait1, daemon=True), threading.Thread(target=wait2, daemon=True)]
        for t in ts:
            t.start()
        time.sleep(0.3)
        sub1.close()
        ts[0].join(5)
        assert not ts[0].is_alive() and out["sub1"] == errno.EBADF
        s.close()
        ts[1].join(5)
        assert not ts[1].is_alive() and out["sub2"] == []


def test_errors_carry_errno(tool, tmp_path):
    def raises(cls, err, f):
        with pytest.raises(cls) as e:
            f()
        assert isinstance(e.value, OSError) and e.value.errno == err, e.value
        return e.value

    raises(peerdma.InvalidArgument, errno.EINVAL, lambda: peerdma.Session(path="bogus"))
    e = raises(peerdma.InvalidArgument, errno.EINVAL, lambda: peerdma.Session(bind_addr="no.such.address"))
    assert isinstance(e, ValueError)
    raises(peerdma.InvalidArgument, errno.EINVAL, lambda: peerdma.Session(block_packets=-1))
    raises(peerdma.InvalidArgument, errno.EINVAL, lambda: peerdma.Session(port=70000))
    with session() as s:
        raises(peerdma.InvalidArgument, errno.EINVAL, lambda: s.subscribe(policy="sometimes"))
        raises(peerdma.InvalidArgument, errno.EINVAL, lambda: s.subscribe(stream_id=1 << 40))
        sub = s.subscribe()
        e = raises(peerdma.Timeout, errno.ETIMEDOUT, lambda: sub.next(timeout=0))
        assert isinstance(e, TimeoutError)
        t0 = time.monotonic()
        raises(peerdma.Timeout, errno.ETIMEDOUT, lambda: sub.next(timeout=0.3))
        assert time.monotonic() - t0 >= 0.29
        s.start()
        raises(peerdma.Busy, errno.EBUSY, lambda: s.subscribe())
        GenRun(tool, s.port, str(tmp_path / "gen.pcap"), streams=1, packets=40).run()
        s.stop()
        b = sub.next(timeout=5)
        raises(peerdma.InvalidArgument, errno.EINVAL, lambda: b.__dlpack__(stream=7))
        with pytest.raises(BufferError):
            b.__dlpack__(copy=True)
        b.release()
    raises(peerdma.Closed, errno.EBADF, lambda: s.port)
    raises(peerdma.Closed, errno.EBADF, lambda: sub.next())


def test_gpu_path_without_device():
    from conftest import cuda_libraries
    if cuda_libraries():
        pytest.skip("a CUDA device is present (test_gpu.py covers the GPU paths)")
    for path in ("host-staged", "zero-copy"):
        with pytest.raises(peerdma.PeerdmaError) as e:
            peerdma.Session(path=path)
        # ENODEV / ENOENT: no device or no GPU deframer module; EOPNOTSUPP:
        # a library without the GPU paths' blocks.
        assert e.value.errno in (errno.ENODEV, errno.ENOENT, errno.EOPNOTSUPP), e.value


class StalledConsumer(threading.Thread):
    """Takes `hold` blocks and keeps them, stalls `stall` seconds, then
    drains the subscription until the session stops, checking every block."""

    def __init__(self, sub, hold, stall):
        super().__init__(daemon=True)
        self.sub, self.hold, self.stall = sub, hold, stall
        self.held, self.raw, self.views = [], [], []
        self.took = threading.Event()
        self.drained = 0
        self.error = None

    def run(self):
        try:
            for _ in range(self.hold):
                b = self.sub.next(timeout=10)
                self.held.append(b)
                self.raw.append(ctypes.string_at(b.data, b.nsamples * 4))
                self.views.append(np.from_dlpack(b))
            self.took.set()
            time.sleep(self.stall)
            for b in self.sub:
                chk_block(b)
                self.drained += 1
                b.release()
        except BaseException as e:
            self.error = e
            self.took.set()


def wait_idle(s, sub, quiet=0.5):
    """Until nothing arrives, nothing is published and the queue is empty
    for `quiet` seconds (gen has finished; the last blocks were published
    on flush_idle_ms)."""
    last = None
    t_end = time.monotonic() + 60
    while time.monotonic() < t_end:
        st, ss = s.stats(), sub.stats()
        now = (st.datagrams, st.blocks_published, ss.delivered, ss.queued)
        if now == last and ss.queued == 0:
            return
        last = now
        time.sleep(quiet)
    raise AssertionError("the session never went idle")


def stalled_run(tool, tmp_path, policy, depth=4, packets=3000, rate=5000, hold=2, stall=1.0):
    """A consumer that holds `hold` blocks and stalls for `stall` seconds
    while gen sends 2 streams at `rate` packets/s, then drains. The held
    blocks must not change; returns the counters."""
    with session(window_blocks=16) as s:
        sub = s.subscribe(policy=policy, depth=depth)
        s.start()
        gen = GenRun(tool, s.port, str(tmp_path / "gen.pcap"), streams=2, packets=packets,
                     rate=rate).start()
        c = StalledConsumer(sub, hold, stall)
        c.start()
        assert c.took.wait(30)
        gen.wait()
        wait_idle(s, sub)
        s.stop()
        c.join(60)
        assert not c.is_alive(), "the consumer's iterator did not end at stop"
        if c.error:
            raise c.error
        for b, r, v in zip(c.held, c.raw, c.views):
            assert ctypes.string_at(b.data, b.nsamples * 4) == r, "a held block changed"
            chk_block(b)
            assert v.ctypes.data == b.data
            np.testing.assert_array_equal(v, np.frombuffer(r, dtype=np.int16).reshape(-1, 2))
        del v  # the loop's last view
        st, ss = s.stats(), sub.stats()
        assert ss.held == hold
        for b in c.held:
            b.release()
        c.views.clear()
        assert sub.stats().held == 0
    return st, ss, hold + c.drained, gen


def chk_block(b):
    a = np.from_dlpack(b)
    want = gen_iq(b.stream_id, b.first_sample, b.nsamples)
    for p, g in enumerate(b.gap_mask):
        if g:
            want[p * SPP:(p + 1) * SPP] = 0
    np.testing.assert_array_equal(a, want)


def test_stalled_consumer_drop_oldest(tool, tmp_path):
    """Drop-oldest: the stall overruns the queue; every block published and
    not delivered is counted as an overrun, exactly."""
    st, ss, delivered, gen = stalled_run(tool, tmp_path, "drop-oldest")
    assert ss.delivered == delivered
    assert ss.overruns > 0, "the stall caused no overrun: the test did not stall anything"
    assert ss.overruns == st.blocks_published - ss.delivered
    assert ss.waits == 0


def test_stalled_consumer_backpressure(tool, tmp_path):
    """Backpressure: no block is dropped; the producer waited, and what the
    receive path lost meanwhile is counted there: every datagram gen sent is
    either received or counted as a drop."""
    # 1.5 s of 20000 packets/s: more than the receive ring (8192 slots) and
    # the socket buffer hold.
    st, ss, delivered, gen = stalled_run(tool, tmp_path, "backpressure", packets=20000, rate=20000,
                                         stall=1.5)
    assert ss.overruns == 0
    assert ss.delivered == delivered == st.blocks_published
    assert ss.waits > 0, "the producer never waited: the test did not stall anything"
    sent = sum(r["sent"] + r["context"] for r in gen.report["streams"])
    assert st.socket_drops + st.ring_overruns > 0, "nothing was dropped: the stall was too short"
    assert st.datagrams + st.socket_drops + st.ring_overruns == sent, st
