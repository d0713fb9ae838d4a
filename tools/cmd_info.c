// SPDX-License-Identifier: MIT
/* PLACEHOLDER: replaced by the owner of this subcommand. */
#include <stdio.h>
#include "cmd.h"

int pdma_cmd_info(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "peerdma %s: not available in this build\n", argv[0]);
	return 1;
}
