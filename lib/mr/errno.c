// SPDX-License-Identifier: MIT
/*
 * Error codes: peerdma's strings, and the conversion to and from libfabric's
 * fi_errno numbers (include/rdma/fi_errno.h).
 *
 * libfabric defines most FI_E* codes as the errno value itself (FI_EINVAL is
 * EINVAL), but a few have numbers of their own from 256 up: FI_ETOOSMALL is
 * 257, FI_ENOKEY 266. peerdma returns plain negative errno values only; where
 * libfabric has a number of its own, the conversion below gives it.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "peerdma/mr.h"

/* libfabric's own numbers (fi_errno.h, "FI specific return values: >= 256"). */
enum {
	FI_EOTHER = 256,
	FI_ETOOSMALL = 257,
	FI_EOPBADSTATE = 258,
	FI_EBADFLAGS = 260,
	FI_ETRUNC = 265,
	FI_ENOKEY = 266,
};

/* The errno values that libfabric defines as FI_E<same name> = E<name>. */
static const int fi_direct[] = {
	EPERM,      ENOENT,     EINTR,        EIO,          E2BIG,        EBADF,
	EAGAIN,     ENOMEM,     EACCES,       EFAULT,       EBUSY,        ENODEV,
	EINVAL,     EMFILE,     ENOSPC,       ENOSYS,       ENOMSG,       ENODATA,
	EOVERFLOW,  EMSGSIZE,   ENOPROTOOPT,  EOPNOTSUPP,   EADDRINUSE,   EADDRNOTAVAIL,
	ENETDOWN,   ENETUNREACH, ECONNABORTED, ECONNRESET,  ENOBUFS,      EISCONN,
	ENOTCONN,   ESHUTDOWN,  ETIMEDOUT,    ECONNREFUSED, EHOSTDOWN,    EHOSTUNREACH,
	EALREADY,   EINPROGRESS, EREMOTEIO,   ECANCELED,    EKEYREJECTED,
};

static int is_direct(int e)
{
	for (size_t i = 0; i < sizeof(fi_direct) / sizeof(fi_direct[0]); i++)
		if (fi_direct[i] == e)
			return 1;
	return 0;
}

static int abs_err(int e)
{
	return e < 0 ? -e : e;
}

static int with_sign(int like, int v)
{
	return like < 0 ? -v : v;
}

int pdma_errno_to_fi(int err)
{
	int e = abs_err(err);

	if (!e || is_direct(e))
		return err;
	if (e == ERANGE)
		return with_sign(err, FI_ETOOSMALL);
	if (e == ENOKEY)
		return with_sign(err, FI_ENOKEY);
	return with_sign(err, FI_EOTHER);
}

int pdma_errno_from_fi(int fi_err)
{
	int e = abs_err(fi_err);

	if (!e || (e < FI_EOTHER && is_direct(e)))
		return fi_err;
	switch (e) {
	case FI_ETOOSMALL:
		return with_sign(fi_err, ERANGE);
	case FI_ENOKEY:
		return with_sign(fi_err, ENOKEY);
	case FI_EBADFLAGS:
		return with_sign(fi_err, EINVAL);
	case FI_EOPBADSTATE:
		return with_sign(fi_err, EBUSY);
	case FI_ETRUNC:
		return with_sign(fi_err, EMSGSIZE);
	default:
		return with_sign(fi_err, EIO);
	}
}

const char *pdma_strerror(int err)
{
	err = abs_err(err);
	/* peerdma returns ERANGE only for a caller's buffer that is too small
	 * (as getcwd(3) does); libc's text speaks of a math result. */
	if (err == ERANGE)
		return "Buffer too small";
	/* Only a kernel-device domain used in a child of the process that
	 * opened it (lib/mr/fork.h); libc's text speaks of wait(2). */
	if (err == ECHILD)
		return "Kernel-device domain was opened by the parent process";
	return strerror(err);
}
