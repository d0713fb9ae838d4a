// SPDX-License-Identifier: MIT
/* Error strings: negative errno values, with the few peerdma adds. */
#include <string.h>

#include "peerdma/mr.h"

const char *pdma_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err == ETOOSMALL)
		return "Buffer too small";
	return strerror(err);
}
