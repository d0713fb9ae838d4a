# SPDX-License-Identifier: MIT
"""The GPU paths (host-staged, zero-copy) through CuPy and PyTorch: the
tensors are on the device, at the block's own address (no copy), the
samples are gen's, the consumer's stream is made to wait for the block, and
a block is released after its last tensor. Skipped with "skipped: no CUDA
device" where neither library sees a GPU."""
import errno
import gc

import numpy as np
import pytest

import peerdma
from conftest import NO_CUDA, NO_GPU_PATH, cuda_libraries
from genref import GEN_SAMPLE_RATE, GenRun, gen_iq, samples_per_packet

pytestmark = pytest.mark.gpu
SPP = samples_per_packet()
GPU_PATHS = ["host-staged", "zero-copy"]


@pytest.fixture(scope="module")
def cuda():
    libs = cuda_libraries()
    if not libs:
        pytest.skip(NO_CUDA)
    return libs


def need(cuda, name):
    if name not in cuda:
        pytest.skip("%s is not installed (or sees no GPU)" % name)
    return cuda[name]


def fed(tool, tmp_path, path, packets=256, loss=20):
    try:
        # Room for every block of the run: the tests count them all.
        s = peerdma.Session(path=path, bind_addr="127.0.0.1", port=0, sample_rate=GEN_SAMPLE_RATE,
                            block_packets=16, window_blocks=64)
    except peerdma.NoDevice as e:
        pytest.fail("%s path on a machine with a GPU: %s" % (path, e))
    except peerdma.PeerdmaError as e:
        if e.errno == errno.EOPNOTSUPP:
            pytest.skip("%s: %s" % (NO_GPU_PATH, e))
        raise
    sub = s.subscribe(depth=64)
    s.start()
    gen = GenRun(tool, s.port, str(tmp_path / "gen.pcap"), streams=1, packets=packets, loss=loss,
                 seed=5).run()
    s.stop()
    return s, sub, gen


def expected(b):
    want = gen_iq(b.stream_id, b.first_sample, b.nsamples)
    for p, g in enumerate(b.gap_mask):
        if g:
            want[p * SPP:(p + 1) * SPP] = 0
    return want


@pytest.mark.parametrize("path", GPU_PATHS)
def test_cupy_zero_copy(cuda, tool, tmp_path, path):
    cp = need(cuda, "cupy")
    s, sub, gen = fed(tool, tmp_path, path)
    with s:
        n = gaps = 0
        for b in sub:
            assert b.mem == "cuda" and b.__dlpack_device__() == (2, b.device)
            assert b.cuda_event
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                a = cp.from_dlpack(b)   # passes stream.ptr to __dlpack__
            assert a.data.ptr == b.data, "CuPy copied the block"
            assert a.shape == (b.nsamples, 2) and a.dtype == cp.int16
            with stream:
                host = cp.asnumpy(a, stream=stream)
            stream.synchronize()
            np.testing.assert_array_equal(host, expected(b))
            gaps += b.gaps
            n += 1
        assert n == s.stats().blocks_published > 0 and sub.stats().overruns == 0
        assert gaps == sum(r["lost"] for r in gen.report["streams"])


@pytest.mark.parametrize("path", GPU_PATHS)
def test_torch_zero_copy(cuda, tool, tmp_path, path):
    torch = need(cuda, "torch")
    s, sub, gen = fed(tool, tmp_path, path)
    with s:
        n = 0
        for b in sub:
            ts = torch.cuda.Stream()
            with torch.cuda.stream(ts):
                t = torch.from_dlpack(b)
                assert t.is_cuda and t.data_ptr() == b.data, "PyTorch copied the block"
                host = t.cpu().numpy()   # on ts, after the block's event
            np.testing.assert_array_equal(host, expected(b))
            n += 1
        assert n > 0


@pytest.mark.parametrize("path", GPU_PATHS)
def test_consumer_stream_reaches_the_library(cuda, tool, tmp_path, path, monkeypatch):
    """The stream that CuPy and PyTorch name in __dlpack__(stream=) is the
    one pdma_block_dlpack is given (which makes it wait for the block's
    event)."""
    L = peerdma._lib.lib()
    real = L.pdma_block_dlpack
    seen = []

    def spy(b, stream, out):
        seen.append(stream)
        return real(b, stream, out)

    monkeypatch.setattr(L, "pdma_block_dlpack", spy)
    s, sub, gen = fed(tool, tmp_path, path, packets=64, loss=0)
    with s:
        b = sub.next(timeout=5)
        want = []
        if "cupy" in cuda:
            cp = cuda["cupy"]
            st = cp.cuda.Stream(non_blocking=True)
            with st:
                cp.from_dlpack(b)
            want.append(st.ptr)
        if "torch" in cuda:
            torch = cuda["torch"]
            ts = torch.cuda.Stream()
            with torch.cuda.stream(ts):
                torch.from_dlpack(b)
            want.append(ts.cuda_stream)
        assert seen == want


@pytest.mark.parametrize("path", GPU_PATHS)
def test_consumer_stream_honoured(cuda, tool, tmp_path, path):
    """__dlpack__(stream=S) makes S wait for the block's event: a copy
    queued on S right after sees the block's samples; the stream values the
    array API defines are taken, 0 is refused."""
    cp = need(cuda, "cupy")
    s, sub, gen = fed(tool, tmp_path, path, packets=64, loss=0)
    with s:
        b = sub.next(timeout=5)
        for st in (cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)):
            cap = b.__dlpack__(stream=st.ptr)
            with st:
                a = cp.from_dlpack(_Capsule(cap, b.__dlpack_device__()))
                out = cp.empty_like(a)
                out[...] = a
            st.synchronize()
            np.testing.assert_array_equal(cp.asnumpy(out), expected(b))
        for v in (None, 1, 2, -1):
            cap = b.__dlpack__(stream=v)
            del cap
        with pytest.raises(peerdma.InvalidArgument) as e:
            b.__dlpack__(stream=0)
        assert e.value.errno == errno.EINVAL


class _Capsule:
    """Hands an already made capsule to a consumer."""

    def __init__(self, cap, dev):
        self.cap, self.dev = cap, dev

    def __dlpack__(self, stream=None, **kw):  # numpy 2 adds max_version, ...
        return self.cap

    def __dlpack_device__(self):
        return self.dev


@pytest.mark.parametrize("path", GPU_PATHS)
def test_released_after_last_tensor(cuda, tool, tmp_path, path):
    s, sub, gen = fed(tool, tmp_path, path, packets=64, loss=0)
    with s:
        b = sub.next(timeout=5)
        ts = []
        if "cupy" in cuda:
            ts.append(cuda["cupy"].from_dlpack(b))
        if "torch" in cuda:
            ts.append(cuda["torch"].from_dlpack(b))
        b.release()
        while ts:
            assert sub.stats().held == 1, "released while a tensor views it"
            ts.pop()
            gc.collect()
        assert sub.stats().held == 0, "not released after its last tensor"


@pytest.mark.parametrize("path", GPU_PATHS)
def test_read_a_device_block(cuda, tool, tmp_path, path):
    """copy() (pdma_block_read) brings a GPU block to host memory without
    CuPy or PyTorch, after its event."""
    s, sub, gen = fed(tool, tmp_path, path, packets=64)
    with s:
        n = 0
        for b in sub:
            assert b.mem == "cuda"
            np.testing.assert_array_equal(b.copy(), expected(b))
            n += 1
        assert n > 0


def test_numpy_refuses_a_device_block(cuda, tool, tmp_path):
    """numpy cannot take a CUDA block: its error reaches the caller (not a
    SystemError), and the refused capsule does not keep the block."""
    s, sub, gen = fed(tool, tmp_path, "host-staged", packets=64, loss=0)
    with s:
        b = sub.next(timeout=5)
        with pytest.raises((RuntimeError, BufferError, TypeError, ValueError)) as e:
            np.from_dlpack(b)
        assert not isinstance(e.value, SystemError)
        b.release()
        assert sub.stats().held == 0
