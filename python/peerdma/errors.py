# SPDX-License-Identifier: MIT
"""Exceptions: every error of the library is an OSError carrying the errno
the C call returned (negated there), so `except OSError as e: e.errno` works,
and the common ones are also the matching Python built-in exception
(TimeoutError, ValueError, ...) so that callers can catch them by kind."""
import errno as _errno
import os


class PeerdmaError(OSError):
    """An error of libpeerdma_ingest (or of this binding); .errno is set."""


class InvalidArgument(PeerdmaError, ValueError):
    """EINVAL: a bad attribute, stream value or call for this object."""


class Timeout(PeerdmaError, TimeoutError):
    """ETIMEDOUT: no block within the timeout."""


class Ended(PeerdmaError, BrokenPipeError):
    """EPIPE: the session stopped and the subscription's queue is drained."""


class Busy(PeerdmaError):
    """EBUSY: e.g. subscribing once the session started."""


class NoDevice(PeerdmaError):
    """ENODEV / ENOENT from open: a GPU path without a CUDA device or GPU
    deframer module, a NIC path without the NIC."""


class ConnectionRefused(PeerdmaError, ConnectionRefusedError):
    """ECONNREFUSED: nothing listens where a Consumer connects."""


class ConnectionReset(PeerdmaError, ConnectionResetError):
    """ECONNRESET: the peer went away (a forwarder that ended)."""


class Closed(PeerdmaError, ValueError):
    """EBADF: the session, subscription or block was closed or released."""


class LibraryNotFound(PeerdmaError, FileNotFoundError):
    """ENOENT: libpeerdma_ingest.so could not be loaded (raised at the first
    Session, not at import: the package imports without the library)."""


class ApiMismatch(PeerdmaError):
    """The loaded library is not the API this package binds (ENOSYS: a
    function is missing; EPROTO: a structure's size differs)."""


_BY_ERRNO = {
    _errno.EINVAL: InvalidArgument,
    _errno.ETIMEDOUT: Timeout,
    _errno.EPIPE: Ended,
    _errno.EBUSY: Busy,
    _errno.ENODEV: NoDevice,
    _errno.EBADF: Closed,
    _errno.ECONNREFUSED: ConnectionRefused,
    _errno.ECONNRESET: ConnectionReset,
}


def error(err, what, msg=None):
    """The exception for errno err (positive) from the call named what."""
    cls = _BY_ERRNO.get(err, PeerdmaError)
    text = "%s: %s" % (what, msg) if msg else "%s: %s" % (what, os.strerror(err))
    return cls(err, text)


def check(ret, what, msg=None):
    """Raise for a negative errno return of a C call; pass 0 and positives."""
    if ret < 0:
        raise error(-ret, what, msg)
    return ret
