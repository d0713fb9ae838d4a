// SPDX-License-Identifier: MIT
/* peerdma forward: peerdma ingest (its options, paths and loop:
 * ingest_ext.h) with a forwarder attached: the session's blocks go to the
 * consumers (peerdma consume) that connect over UCX and ask for their
 * streams (include/peerdma/forward.h, ingest/forward/DESIGN.md). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "ingest.h"
#include "ingest_ext.h"
#include "peerdma/forward.h"

struct forward {
	struct pdma_fwd_attr fa;
	uint32_t block_packets, pool_blocks, late_blocks, flush_idle_ms;
	bool quiet;
	struct pdma_fwd *f;
};

enum { O_LISTEN = 256, O_FWD_PORT, O_STALL, O_STAGE, O_STAGE_BUFFERS, O_CREDITS, O_BLOCK_PACKETS,
       O_POOL_BLOCKS, O_LATE_BLOCKS, O_FLUSH_IDLE, O_EAGER_MAX };

static const struct option forward_opts[] = {
	{ "listen", required_argument, NULL, O_LISTEN },
	{ "fwd-port", required_argument, NULL, O_FWD_PORT },
	{ "stall-ms", required_argument, NULL, O_STALL },
	{ "stage", no_argument, NULL, O_STAGE },
	{ "stage-buffers", required_argument, NULL, O_STAGE_BUFFERS },
	{ "credits", required_argument, NULL, O_CREDITS },
	{ "block-packets", required_argument, NULL, O_BLOCK_PACKETS },
	{ "pool-blocks", required_argument, NULL, O_POOL_BLOCKS },
	{ "late-blocks", required_argument, NULL, O_LATE_BLOCKS },
	{ "flush-idle", required_argument, NULL, O_FLUSH_IDLE },
	{ "eager-max", required_argument, NULL, O_EAGER_MAX },
	{ 0 }
};

static const char forward_usage[] =
	"usage: peerdma forward [OPTIONS]\n"
	"Receive VITA-49 streams as peerdma ingest does and send their sample blocks over\n"
	"UCX to the consumers (peerdma consume) that connect and ask for stream IDs. Each\n"
	"consumer grants credits; blocks for a consumer without credit wait (16 at most,\n"
	"then the oldest is dropped); a block for a consumer that is gone is counted as\n"
	"dropped for it. No consumer ever makes the others wait. Prints \"UCX listener on\n"
	"ADDR:PORT\" and how GPU blocks go (directly, or staged through host memory where\n"
	"the installed UCX has no CUDA memory type).\n\n"
	"      --listen ADDR     IPv4 address for the consumers (default 0.0.0.0)\n"
	"      --fwd-port N      UCX listener port (default 4992; 0: ephemeral, printed)\n"
	"      --stall-ms MS     drop a consumer without credit this long (default 5000;\n"
	"                        0: never)\n"
	"      --stage           stage host blocks through the staging buffers too\n"
	"      --stage-buffers N staging buffers of a block each (default 64): a block\n"
	"                        is copied once and its copy serves every consumer sent\n"
	"                        it while the buffer holds it; a send that finds none\n"
	"                        free is dropped and counted (stage_drops)\n"
	"      --credits N       blocks in flight per consumer at most (default 16); the\n"
	"                        pool must hold 32 + N (the forwarder's queue, 16, and\n"
	"                        16 waiting for a consumer's credit)\n"
	"      --block-packets N packets per block (default 64)\n"
	"      --pool-blocks N   blocks per stream in flight, queued or held (default 64)\n"
	"      --late-blocks N   blocks a packet may arrive late (default 1)\n"
	"      --flush-idle MS   send open blocks after MS idle (default 100)\n"
	"      --eager-max B     send blocks of at most B bytes as eager messages (default\n"
	"                        0: UCX decides); over UCX's tcp, 262144 is faster\n"
	"The JSON summary (--json) has a \"forward\" object: totals and per consumer its\n"
	"name, streams, blocks and bytes sent, blocks dropped (no credit, gone), connects.\n"
	"UCX's own settings apply (UCX_TLS=tcp: the TCP transport only).\n\n"
	"Receive options (as peerdma ingest):\n";

static int forward_opt(void *arg, const struct pdma_opt *o, int val)
{
	struct forward *w = arg;
	uint32_t v;
	int e;

	switch (val) {
	case O_LISTEN: return pdma_opt_ipv4(o, &w->fa.addr);
	case O_FWD_PORT:
		e = pdma_opt_u32(o, 0, 65535, &v);
		w->fa.port = (uint16_t)v;
		return e;
	case O_STALL: return pdma_opt_u32(o, 0, 3600000, &w->fa.stall_ms);
	case O_STAGE: w->fa.stage = true; return 0;
	case O_STAGE_BUFFERS: return pdma_opt_u32(o, 1, 4096, &w->fa.stage_buffers);
	case O_CREDITS: return pdma_opt_u32(o, 1, 4096, &w->fa.max_credits);
	case O_BLOCK_PACKETS: return pdma_opt_u32(o, 1, 65536, &w->block_packets);
	case O_POOL_BLOCKS: return pdma_opt_u32(o, 2, 4096, &w->pool_blocks);
	case O_LATE_BLOCKS: return pdma_opt_u32(o, 0, 64, &w->late_blocks);
	case O_FLUSH_IDLE: return pdma_opt_u32(o, 0, 3600000, &w->flush_idle_ms);
	case O_EAGER_MAX: return pdma_opt_u32(o, 0, 1u << 30, &w->fa.eager_max);
	default: return -EINVAL;
	}
}

static int forward_check(void *arg, const struct pdma_opt *o, const struct pdma_ingest_config *c)
{
	struct forward *w = arg;

	if (w->pool_blocks < PDMA_FWD_POOL_RESERVE + w->fa.max_credits)
		return pdma_opt_fail(o, "--pool-blocks (%u) must hold %u + --credits (%u)", w->pool_blocks,
				     PDMA_FWD_POOL_RESERVE, w->fa.max_credits);
	if (c->dfr.out_pkts % w->block_packets ||
	    (uint64_t)(w->late_blocks + 2) * w->block_packets > c->dfr.out_pkts)
		return pdma_opt_fail(o, "--out-packets (%u) must be a multiple of --block-packets "
				     "and hold --late-blocks + 2 blocks", c->dfr.out_pkts);
	return 0;
}

static int forward_attach(void *arg, struct pdma_ingest *ing, const struct pdma_ingest_config *c,
			  bool quiet)
{
	struct forward *w = arg;
	char msg[256];
	int ret;

	w->quiet = quiet;
	if (pdma_ingest_ext_blocks("peerdma forward", ing, c, w->block_packets, w->late_blocks,
				   w->pool_blocks, w->flush_idle_ms))
		return 1;
	ret = pdma_fwd_open(ing, &w->fa, &w->f, msg, sizeof(msg));
	if (!ret) {
		ret = pdma_fwd_start(w->f);
		snprintf(msg, sizeof(msg), "%s", strerror(-ret));
	}
	if (ret) {
		fprintf(stderr, "peerdma forward: %s\n", msg);
		pdma_fwd_close(w->f);
		w->f = NULL;
		return 1;
	}
	/* always printed (not -q): the consumers need the port */
	fprintf(stderr, "peerdma forward: UCX listener on %s:%u; %s\n", w->fa.addr, pdma_fwd_port(w->f),
		pdma_fwd_describe(w->f));
	return 0;
}

static int forward_detach(void *arg, struct pdma_ingest *ing, json_t *summary)
{
	struct forward *w = arg;
	struct pdma_fwd_stats s;
	struct pdma_fwd_consumer_stats cs;
	json_t *o = json_object(), *a = json_array();

	(void)ing;
	pdma_fwd_drain(w->f); /* what the stop published, sent: final counts */
	pdma_fwd_stats(w->f, &s);
	for (uint32_t i = 0; pdma_fwd_consumer(w->f, i, &cs) == 0; i++) {
		json_t *j = json_object(), *ids = json_array();

		if (!w->quiet)
			fprintf(stderr, "consumer %-16s %10llu blocks sent %8llu dropped (no credit %llu, "
				"gone %llu) %u connect(s)%s%s%s\n", cs.name,
				(unsigned long long)cs.sent_blocks,
				(unsigned long long)(cs.no_credit_blocks + cs.gone_blocks),
				(unsigned long long)cs.no_credit_blocks, (unsigned long long)cs.gone_blocks,
				cs.connects, cs.stalled ? ", stalled" : "", cs.last_error[0] ? ": " : "",
				cs.last_error);
		for (uint32_t k = 0; k < cs.nstreams && k < 8; k++)
			json_array_append_new(ids, json_integer(cs.streams[k]));
		json_object_set_new(j, "name", json_string(cs.name));
		json_object_set_new(j, "streams", ids);
		json_object_set_new(j, "sent_blocks", json_integer((json_int_t)cs.sent_blocks));
		json_object_set_new(j, "sent_bytes", json_integer((json_int_t)cs.sent_bytes));
		json_object_set_new(j, "no_credit_blocks", json_integer((json_int_t)cs.no_credit_blocks));
		json_object_set_new(j, "gone_blocks", json_integer((json_int_t)cs.gone_blocks));
		json_object_set_new(j, "dropped_packets", json_integer((json_int_t)cs.dropped_packets));
		json_object_set_new(j, "connects", json_integer(cs.connects));
		json_object_set_new(j, "stalled", json_boolean(cs.stalled));
		json_object_set_new(j, "last_error", json_string(cs.last_error));
		json_array_append_new(a, j);
	}
	pdma_fwd_close(w->f);
	w->f = NULL;
	json_object_set_new(o, "consumers", a);
	json_object_set_new(o, "blocks_in", json_integer((json_int_t)s.blocks_in));
	json_object_set_new(o, "sent_blocks", json_integer((json_int_t)s.sent_blocks));
	json_object_set_new(o, "sent_bytes", json_integer((json_int_t)s.sent_bytes));
	json_object_set_new(o, "dropped_blocks", json_integer((json_int_t)s.dropped_blocks));
	json_object_set_new(o, "dropped_packets", json_integer((json_int_t)s.dropped_packets));
	json_object_set_new(o, "staged_blocks", json_integer((json_int_t)s.staged_blocks));
	json_object_set_new(o, "eager_blocks", json_integer((json_int_t)s.eager_blocks));
	json_object_set_new(o, "staged_bytes", json_integer((json_int_t)s.staged_bytes));
	json_object_set_new(o, "stage_buffers", json_integer(w->fa.stage_buffers));
	json_object_set_new(o, "stage_drops", json_integer((json_int_t)s.stage_drops));
	json_object_set_new(o, "stage_seconds", json_real(s.stage_seconds));
	json_object_set_new(o, "stage_wait_seconds", json_real(s.stage_wait_seconds));
	json_object_set_new(o, "stage_GBps", json_real(s.stage_seconds > 0 ?
						       s.staged_bytes / s.stage_seconds / 1e9 : 0));
	json_object_set_new(o, "refused", json_integer((json_int_t)s.refused));
	json_object_set_new(o, "ucx_cuda", json_boolean(s.ucx_cuda));
	if (!w->quiet)
		fprintf(stderr, "forward: %llu blocks in, %llu sent (%llu bytes, %llu staged), %llu dropped, "
			"%llu connection(s) refused\n", (unsigned long long)s.blocks_in,
			(unsigned long long)s.sent_blocks, (unsigned long long)s.sent_bytes,
			(unsigned long long)s.staged_blocks, (unsigned long long)s.dropped_blocks,
			(unsigned long long)s.refused);
	if (summary)
		json_object_set_new(summary, "forward", o);
	else
		json_decref(o);
	return 0;
}

static void forward_init(struct forward *w, struct pdma_ingest_ext *x)
{
	memset(w, 0, sizeof(*w));
	pdma_fwd_attr_init(&w->fa);
	w->fa.port = 4992; /* beside gen's and ingest's 4991: where consume looks */
	w->block_packets = 64;
	/* room for the forwarder's queue (16) and the blocks in flight to
	 * three consumers of a stream (16 each): a dead consumer's hold only
	 * its own (forward.h, max_credits) */
	w->pool_blocks = 64;
	w->late_blocks = 1;
	w->flush_idle_ms = 100;
	*x = (struct pdma_ingest_ext){
		.cmd = "peerdma forward", .usage = forward_usage, .opts = forward_opts,
		.opt = forward_opt, .check = forward_check, .attach = forward_attach,
		.detach = forward_detach, .arg = w,
	};
}

int pdma_cmd_forward(int argc, char **argv)
{
	struct pdma_ingest_ext x;
	struct forward w;

	forward_init(&w, &x);
	return pdma_ingest_main(argc, argv, &x);
}

int pdma_cmd_forward_check(int argc, char **argv)
{
	struct pdma_ingest_ext x;
	struct forward w;

	forward_init(&w, &x);
	return pdma_ingest_main_check(argc, argv, &x);
}
