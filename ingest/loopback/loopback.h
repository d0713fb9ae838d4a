/* SPDX-License-Identifier: MIT */
/*
 * Loopback runs: the generator (gen/) sends into a receive session (ingest.h)
 * over 127.0.0.1 inside one process, and what the generator injected is
 * compared with what the session detected, per stream, down to every deframed
 * byte. The demo, the tests and the benchmarks use it.
 */
#ifndef PDMA_INGEST_LOOPBACK_LOOPBACK_H
#define PDMA_INGEST_LOOPBACK_LOOPBACK_H

#include <stdbool.h>
#include <stdint.h>

#include "deframe/acct.h"
#include "gen/gen.h"
#include "ingest.h"

struct pdma_loopback_stream {
	struct pdma_gen_inject injected;
	struct pdma_stream_stats detected;
	uint64_t content_errors;  /* output words that differ from what gen sent */
	uint64_t checked_packets; /* output positions verified */
	/* What a subscriber (include/peerdma/ingest.h) got, pdma_loopback_run
	 * only: packets in blocks, gap packets among them, and packets whose
	 * samples differ from gen's (host order) or are not zero at a gap */
	uint64_t block_packets, block_gaps, block_errors;
	bool match;               /* detected == injected (lost, dup, reordered), and
				   * the blocks hold every packet, gaps where gen lost */
};
struct pdma_loopback_result {
	uint32_t streams;
	struct pdma_loopback_stream *s; /* [streams], free() by caller */
	struct pdma_ingest_totals totals;
	double seconds, rate_pps;
	double send_seconds;            /* the sender alone (first to last datagram) */
	uint64_t malformed;
	bool match;                     /* every stream matches, no content errors */
	int attempts;
	uint64_t blocks;                /* blocks the subscriber took (pdma_loopback_run) */
	bool blocks_on;                 /* ... when the session's path gives blocks */
};
/* Runs gen (in a thread) into a fresh ingest session on an ephemeral port,
 * with a subscriber (backpressure) that checks every block's samples while
 * they arrive, where the path gives blocks (blocks_on).
 * When the kernel dropped datagrams (socket_drops, ring overruns) the run is
 * repeated at half the rate, up to 4 attempts, since such loss is not the
 * generator's injection. rate_pps 0: unpaced. */
int pdma_loopback_run(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
		      double rate_pps, struct pdma_loopback_result *res);
/* One attempt, no retry (benchmarks: loss is the measurement). */
int pdma_loopback_once(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
		       double rate_pps, struct pdma_loopback_result *res);
/* How gen sends in a run, and from where (benchmarks). */
struct pdma_loopback_opts {
	const char *host;     /* gen's destination (NULL: 127.0.0.1); the session binds
			       * ic->bind_addr */
	uint32_t send_batch;  /* pdma_gen_send_opts.batch (0: 64; 1: one datagram a call) */
	bool gso;             /* pdma_gen_send_opts.gso */
	/* Network namespaces (open fds of /proc/.../ns/net; -1: the
	 * caller's): the session's sockets are opened in rx_netns, gen's in
	 * tx_netns (a veth pair between them instead of loopback). The
	 * calling thread is back in its own namespace on return. */
	int rx_netns, tx_netns;
};
/* pdma_loopback_once with o (NULL: as pdma_loopback_once). */
/* fn(arg) with the calling thread in network namespace ns (-1: where it is),
 * then back in its own. Returns 0 with fn's result in *fn_ret, or a negative
 * errno: the thread could not enter ns (fn not run, *fn_ret untouched) or
 * could not come back (fn ran, *fn_ret set: the caller must undo what fn
 * did and not go on in this thread). */
int pdma_loopback_in_netns(int ns, int (*fn)(void *), void *arg, int *fn_ret);

int pdma_loopback_once_opts(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
			    double rate_pps, const struct pdma_loopback_opts *o, struct pdma_loopback_result *res);

/* A block (its samples at iq, in host memory) against the generator: every
 * sample of a packet that came equals pdma_gen_sample's word in host order
 * (I the high half, Q the low), a gap packet is zeros. Returns the packets
 * that differ; *gaps the block's gap packets. */
uint32_t pdma_loopback_check_block(const struct pdma_block *b, const int16_t *iq, uint32_t *gaps);

#endif /* PDMA_INGEST_LOOPBACK_LOOPBACK_H */
