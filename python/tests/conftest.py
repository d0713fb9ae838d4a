# SPDX-License-Identifier: MIT
"""pytest set-up for the peerdma package: the package from this tree, the
library from $PEERDMA_LIBRARY (ctest sets it; by hand it falls back to
build/libpeerdma_ingest.so of this checkout), `peerdma gen` from
$PEERDMA_TOOL (or build/peerdma).

GPU tests (marker gpu) are skipped with "skipped: no CUDA device" when
neither CuPy nor PyTorch sees one (or "skipped: the library has no GPU-path
blocks" where pdma_ingest_open says EOPNOTSUPP); a run in which every test
was skipped for these reasons exits 77, which ctest reports as skipped (the
C GPU tests' way).
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
REPO = os.path.dirname(PKG)
sys.path.insert(0, PKG)

for var, name in (("PEERDMA_LIBRARY", "libpeerdma_ingest.so"), ("PEERDMA_TOOL", "peerdma")):
    if not os.environ.get(var):
        cand = os.path.join(REPO, "build", name)
        if os.path.exists(cand):
            os.environ[var] = cand

NO_CUDA = "skipped: no CUDA device"
NO_GPU_PATH = "skipped: the library has no GPU-path blocks"
_skip_reasons = set()


def cuda_libraries():
    """{"cupy": module, "torch": module} for those that import and see a
    CUDA device."""
    out = {}
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            out["cupy"] = cupy
    except Exception:
        pass
    try:
        import torch
        if torch.cuda.is_available():
            out["torch"] = torch
    except Exception:
        pass
    return out


@pytest.fixture(scope="session")
def tool():
    t = os.environ.get("PEERDMA_TOOL")
    if not t or not os.access(t, os.X_OK):
        pytest.fail("PEERDMA_TOOL (the peerdma binary, for `peerdma gen`) is not set or not executable: %r" % t)
    return t


@pytest.fixture(scope="session", autouse=True)
def library():
    import peerdma
    return peerdma.library_path()


def pytest_runtest_logreport(report):
    for reason in (NO_CUDA, NO_GPU_PATH):
        if report.skipped and reason in str(report.longrepr):
            _skip_reasons.add(reason)


def pytest_sessionfinish(session, exitstatus):
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    passed = len(tr.stats.get("passed", []))
    failed = len(tr.stats.get("failed", [])) + len(tr.stats.get("error", []))
    if _skip_reasons and not passed and not failed:
        print("")
        for reason in sorted(_skip_reasons):
            print(reason)
        session.exitstatus = 77
