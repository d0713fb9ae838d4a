# SPDX-License-Identifier: MIT
"""peerdma: VITA-49 sample blocks from a peerdma ingest session, in Python,
zero-copy through DLPack (numpy, CuPy, PyTorch); from a remote `peerdma
forward` alike (Consumer). ctypes over libpeerdma_ingest.so
(include/peerdma/ingest.h, forward.h), found through $PEERDMA_LIBRARY, next
to this package, or the system's library path."""
from ._lib import API_VERSION, library_path
from .errors import (ApiMismatch, Busy, Closed, ConnectionRefused, ConnectionReset, Ended,
                     InvalidArgument, LibraryNotFound, NoDevice, PeerdmaError, Timeout)
from .forward import ConsumeStats, Consumer
from .ingest import IngestStats, PATHS, POLICIES, Block, Session, SubStats, Subscription

__version__ = "0.1.0"
__all__ = ["API_VERSION", "ApiMismatch", "Block", "Busy", "Closed", "ConnectionRefused",
           "ConnectionReset", "ConsumeStats", "Consumer", "Ended", "IngestStats",
           "InvalidArgument", "LibraryNotFound", "NoDevice", "PATHS", "POLICIES", "PeerdmaError",
           "Session", "SubStats", "Subscription", "Timeout", "library_path"]
