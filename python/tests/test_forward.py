# SPDX-License-Identifier: MIT
"""peerdma.Consumer against a `peerdma forward` over loopback (UCX's tcp
transport): the same Subscription and Block API as a local Session, and the
same checks (test_ingest.Checker): every sample as gen made it, gap bits
exactly where gen lost packets, numpy zero-copy; only the stream asked for;
the iterator ends with the forwarder's END; no forwarder: an error, at once."""
import os
import re
import subprocess
import time

import pytest

import peerdma
from genref import GEN_STREAM_BASE, GenRun
from test_ingest import Checker, Collector

UCX_ENV = {"UCX_TLS": "tcp"}


class Forwarder:
    """`peerdma forward` on ephemeral ports: udp_port (gen's), ucx_port."""

    def __init__(self, tool, tmp_path, *extra):
        env = dict(os.environ, **UCX_ENV)
        env.pop("LD_PRELOAD", None)  # the tool links its own runtime (genref.GenRun)
        self.err_path = str(tmp_path / "forward.err")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([tool, "forward", "--bind", "127.0.0.1", "--port", "0",
                                      "--listen", "127.0.0.1", "--fwd-port", "0", "--idle", "1000",
                                      "--block-packets", "16"] + list(extra),
                                     stderr=self.err, env=env)
        self.udp_port = self.ucx_port = None
        for _ in range(600):
            text = open(self.err_path).read()
            u = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            f = re.search(r"UCX listener on 127\.0\.0\.1:(\d+)", text)
            if u and f:
                self.udp_port, self.ucx_port = int(u.group(1)), int(f.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.proc.kill()
        raise AssertionError("peerdma forward did not start: " + open(self.err_path).read())

    def wait(self):
        assert self.proc.wait(timeout=120) == 0, open(self.err_path).read()
        return open(self.err_path).read()


class OneStream:
    """gen's run as seen by a consumer of one of its streams."""

    def __init__(self, gen, sid):
        self.gen, self.sid, self.report = gen, sid, gen.report

    def expected(self):
        return {self.sid: self.gen.expected()[self.sid]}


@pytest.fixture(autouse=True)
def ucx_tcp(monkeypatch):
    for k, v in UCX_ENV.items():
        monkeypatch.setenv(k, v)


def test_remote_blocks_as_local(tool, tmp_path):
    sid = GEN_STREAM_BASE + 1
    fwd = Forwarder(tool, tmp_path)
    chk = Checker()
    with peerdma.Consumer("127.0.0.1", fwd.ucx_port, name="py", streams=[sid],
                          pool_blocks=64) as c:
        assert c.block_packets == 16 and c.sample_rate == 10_000_000
        sub = c.subscribe(depth=128)
        c.start()
        col = Collector(sub, chk)
        col.start()
        gen = GenRun(tool, fwd.udp_port, str(tmp_path / "gen.pcap"), streams=2, packets=600,
                     loss=20, seed=7, extra=["--dup", "5", "--reorder", "10"]).run()
        fwd.wait()
        col.finish()  # the forwarder's END ends the iterator
        st, ss = c.stats(), sub.stats()
        assert c.ended
    rep = [r for r in gen.report["streams"] if r["stream_id"] == sid][0]
    assert rep["lost"] > 0
    assert sorted(chk.covered) == [sid], "blocks of a stream not asked for"
    chk.verify(OneStream(gen, sid))
    assert st.ended and not st.lost and st.error == 0
    assert st.fwd_dropped_blocks == 0 and st.local_drops == 0 and ss.overruns == 0
    assert st.gap_packets == chk.gaps == rep["lost"]
    assert st.blocks == ss.delivered == col.n


def test_no_forwarder(tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    t0 = time.monotonic()
    with pytest.raises(peerdma.PeerdmaError) as e:
        peerdma.Consumer("127.0.0.1", port, timeout_ms=3000)
    assert time.monotonic() - t0 < 10
    assert e.value.errno in (111, 110), e.value  # ECONNREFUSED, ETIMEDOUT
    # the built-in exception the docstring promises, by kind
    assert isinstance(e.value, ConnectionRefusedError if e.value.errno == 111 else TimeoutError)
