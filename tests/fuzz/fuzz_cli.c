// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the peerdma subcommands' option parsers
 * (pdma_cmd_NAME_check, tools/cmd.h): the first byte picks the command, the
 * rest is its argument list, words split at NUL bytes. Checks, beyond "no
 * crash, no undefined behaviour" (ASan/UBSan): the status is 0 or 2, and 2
 * comes with exactly one line on stderr, "peerdma NAME: ...", 0 with none.
 * tests/unit/test_cli_opts.c runs the same parsers over generated lists
 * whose bad values it knows; this explores what no generator thought of.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"

#define MAXARGS 32

static const struct {
	const char *name;
	int (*check)(int argc, char **argv);
} cmds[] = {
	{ "gen", pdma_cmd_gen_check },     { "ingest", pdma_cmd_ingest_check },
	{ "bench", pdma_cmd_bench_check }, { "info", pdma_cmd_info_check },
	{ "demo", pdma_cmd_demo_check },   { "deframe", pdma_cmd_deframe_check },
	{ "forward", pdma_cmd_forward_check }, { "consume", pdma_cmd_consume_check },
};

static FILE *cap;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *argv[MAXARGS + 1], *buf, err[4096];
	int argc = 1, saved, st;
	size_t n;

	if (size < 1 || size > 4096)
		return 0;
	if (!cap) {
		cap = tmpfile();
		/* --help writes its usage to stdout: not wanted by the thousand */
		if (!cap || !freopen("/dev/null", "w", stdout))
			abort();
	}
	const unsigned ci = data[0] % (sizeof(cmds) / sizeof(cmds[0]));
	buf = malloc(size);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = 0;
	argv[0] = (char *)cmds[ci].name;
	for (size_t i = 0; i < size - 1 && argc < MAXARGS; ) {
		argv[argc++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	argv[argc] = NULL;

	fflush(stderr);
	if (ftruncate(fileno(cap), 0))
		abort();
	rewind(cap);
	saved = dup(STDERR_FILENO);
	dup2(fileno(cap), STDERR_FILENO);
	st = cmds[ci].check(argc, argv);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(cap);
	n = fread(err, 1, sizeof(err) - 1, cap);
	err[n] = 0;
	free(buf);

	if (st != 0 && st != 2) {
		fprintf(stderr, "status %d\n", st);
		abort();
	}
	if (st == 0 && n) {
		fprintf(stderr, "status 0 with stderr: %s\n", err);
		abort();
	}
	if (st == 2) {
		char pre[32];

		snprintf(pre, sizeof(pre), "peerdma %s: ", cmds[ci].name);
		if (!n || err[n - 1] != '\n' || memchr(err, '\n', n - 1) || strncmp(err, pre, strlen(pre))) {
			fprintf(stderr, "not one line naming the command: %s\n", err);
			abort();
		}
	}
	return 0;
}
