// SPDX-License-Identifier: MIT
/* How a person or a script ends the commands that run until stopped:
 * SIGINT and SIGTERM (cmd.h). */
#include <signal.h>

#include "cmd.h"

void pdma_cmd_catch_stop(void (*handler)(int))
{
	/* SA_RESTART: a setup call that blocks (an ioctl, a connect, a send
	 * on a full socket buffer) goes on after the handler instead of
	 * failing with EINTR; nanosleep, poll and socket calls with a timeout
	 * return EINTR regardless (signal(7)), and every loop of ours stops on
	 * its flag, not on EINTR. */
	struct sigaction act = { .sa_handler = handler, .sa_flags = SA_RESTART };

	sigaction(SIGINT, &act, NULL);
	sigaction(SIGTERM, &act, NULL);
}
