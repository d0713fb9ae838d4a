/* SPDX-License-Identifier: MIT */
/*
 * peerdma ingest with a consumer attached: a command built on ingest's
 * receive options and loop (peerdma record) brings its own options and two
 * hooks around the session, so the receive side (every --path, the domain,
 * the stop conditions, the summary) exists once, in cmd_ingest.c.
 */
#ifndef PDMA_TOOLS_INGEST_EXT_H
#define PDMA_TOOLS_INGEST_EXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "opt.h"

struct json_t;
struct pdma_ingest;
struct pdma_ingest_config;

struct pdma_ingest_ext {
	const char *cmd;             /* "peerdma record": messages' prefix */
	const char *usage;           /* its usage lines, printed before ingest's options */
	const struct option *opts;   /* its long options ({ 0 }-terminated), val >= 256 */
	/* one of its options (o->name, optarg): 0, or -EINVAL with the line printed */
	int (*opt)(void *arg, const struct pdma_opt *o, int val);
	/* after the last option: 0, or 2 with the line printed (pdma_opt_fail) */
	int (*check)(void *arg, const struct pdma_opt *o, const struct pdma_ingest_config *c);
	/* after the session opened, before it starts (blocks, subscriptions):
	 * 0, or 1 having said why */
	int (*attach)(void *arg, struct pdma_ingest *ing, const struct pdma_ingest_config *c, bool quiet);
	/* after attach succeeded, once the session stopped (or failed to start:
	 * summary NULL): finish, add to the JSON summary; 0 or 1 */
	int (*detach)(void *arg, struct pdma_ingest *ing, struct json_t *summary);
	void *arg;
};

/* For an attach hook: sample blocks on ing (pdma_ingest_enable_blocks);
 * 0, or 1 having said why, as "CMD: sample blocks on this path: ...", with
 * what to change where the option that caused it is known. */
int pdma_ingest_ext_blocks(const char *cmd, struct pdma_ingest *ing,
			   const struct pdma_ingest_config *c, uint32_t block_packets,
			   uint32_t late_blocks, uint32_t pool_blocks, uint32_t flush_idle_ms);

/* peerdma ingest's main with x attached (NULL: plain ingest). */
int pdma_ingest_main(int argc, char **argv, const struct pdma_ingest_ext *x);
/* Parse and check only, as pdma_cmd_NAME_check (cmd.h). */
int pdma_ingest_main_check(int argc, char **argv, const struct pdma_ingest_ext *x);

#endif /* PDMA_TOOLS_INGEST_EXT_H */
