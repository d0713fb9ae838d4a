/* SPDX-License-Identifier: MIT */
/*
 * peerdma forwarding: an ingest session's blocks sent to consumer nodes over
 * UCX (UCP active messages), and the consumer side that hands them out
 * through the same block API as a local subscription (ingest.h:
 * pdma_sub_next, pdma_block_release, pdma_block_read, pdma_block_dlpack).
 * Protocol, credits and what a dead or stalled consumer does:
 * ingest/forward/DESIGN.md. Errors: 0 or a negative errno.
 *
 * Forwarder: pdma_fwd_open on an opened session with blocks (before
 * pdma_ingest_start: it subscribes to every stream), pdma_fwd_start, and
 * after pdma_ingest_stop, pdma_fwd_close (sends END to every consumer, waits
 * for the sends in flight). One thread of its own drives UCP.
 *
 * Consumer: pdma_consume_open (connects and says HELLO; the forwarder's
 * WELCOME gives the block geometry), pdma_consume_subscribe (as
 * pdma_ingest_subscribe; the stream IDs a subscription may see are those
 * asked of the forwarder), pdma_consume_start, pdma_sub_next ... -EPIPE once
 * the forwarder said END (or went away: pdma_consume_stats says which), then
 * pdma_sub_close and pdma_consume_close. Blocks are in host memory.
 *
 * UCX (libucp.so.0, or PEERDMA_LIBUCP) is loaded by the first pdma_fwd_open
 * or pdma_consume_open of the process, not linked: a program that never
 * forwards never loads it. That first open sets UCX_MEM_EVENTS=no (setenv)
 * unless the environment sets UCX_MEM_EVENTS: Debian's UCX 1.13 otherwise
 * patches libc's mremap at load and breaks MREMAP_FIXED process-wide. Make
 * the first open before other threads may call getenv, or set the variable
 * yourself. Without UCX both opens return -ENODEV (msg says what is missing).
 */
#ifndef PEERDMA_FORWARD_H
#define PEERDMA_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peerdma/ingest.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pool buffers per stream the forwarder may hold besides max_credits: its
 * subscription's queue and a consumer's queue of blocks waiting for credit,
 * 16 each. */
#define PDMA_FWD_POOL_RESERVE 32

struct pdma_fwd_attr {
	uint32_t size;          /* sizeof (pdma_fwd_attr_init) */
	const char *addr;       /* IPv4 address to listen on (default 0.0.0.0) */
	uint16_t port;          /* 0: ephemeral (pdma_fwd_port) */
	uint32_t stall_ms;      /* drop a consumer without credit this long (default 5000; 0: never) */
	bool stage;             /* stage host blocks too (GPU blocks are staged where UCX has no CUDA) */
	uint32_t stage_buffers; /* staging buffers (default 64) */
	/* blocks in flight to one consumer, at most, whatever it grants
	 * (default 16). Each holds a buffer of its stream's pool until its send
	 * completes, as do the 16 blocks at most that wait for a consumer's
	 * credit: the session's pool_blocks must hold the forwarder's queue
	 * (16), those 16 and max_credits (PDMA_FWD_POOL_RESERVE + max_credits),
	 * or a dead consumer's sends (until UCX reports it) hold up the others. */
	uint32_t max_credits;
	/* Blocks of at most this many bytes go as eager active messages (the
	 * consumer copies them out of UCX's receive buffers), larger ones as
	 * UCX decides (rendezvous: zero-copy into the consumer's pool). 0
	 * (default): UCX's own threshold for every block. Over UCX's tcp
	 * transport eager is faster up to 256 KiB (bench/results/forward.md);
	 * on RDMA transports leave it to UCX. */
	uint32_t eager_max;
};

struct pdma_fwd_stats {
	uint32_t consumers;       /* slots: live or gone */
	uint32_t live;
	uint64_t blocks_in;       /* taken from the session */
	uint64_t sent_blocks, sent_bytes;
	uint64_t dropped_blocks, dropped_packets; /* every consumer's, summed */
	uint64_t staged_blocks, staged_bytes; /* staging copies: one a block, however many
				   * consumers it goes to (a consumer sent it later finds
				   * the copy unless stage_buffers newer ones took its buffer) */
	uint64_t eager_blocks;    /* sent as eager AMs (eager_max) */
	uint64_t stage_drops;     /* sends not made: no staging buffer free (or the copy
				   * failed); one for each consumer the block was for, each
				   * counted in its no_credit_blocks */
	double stage_seconds;     /* in the staging copies (pdma_block_read: the D2H copy) */
	double stage_wait_seconds; /* before them, waiting for each block's event (the
				   * copies that produced it still running on the GPU) */
	uint64_t refused;         /* connections refused (garbage, another version) */
	bool ucx_cuda;            /* the installed UCX has the CUDA memory type */
};

struct pdma_fwd_consumer_stats {
	char name[33];
	bool live;
	uint32_t nstreams;        /* 0: every stream */
	uint32_t streams[8];      /* the first ones */
	uint64_t sent_blocks, sent_bytes;
	uint64_t no_credit_blocks, gone_blocks; /* dropped: without credit, while gone */
	uint64_t dropped_packets;
	uint32_t connects;        /* HELLOs accepted under this name */
	bool stalled;             /* dropped for --stall-ms without credit */
	char last_error[80];
};

struct pdma_fwd;

void pdma_fwd_attr_init(struct pdma_fwd_attr *a);
/* -EINVAL bad attributes, or a session whose pool cannot hold what the
 * forwarder keeps (above); -EOPNOTSUPP no blocks on the session; -EBUSY the
 * session has started; -EADDRINUSE; -ENODEV no UCX; -EIO a UCX failure (msg
 * says which). */
int pdma_fwd_open(struct pdma_ingest *ing, const struct pdma_fwd_attr *a, struct pdma_fwd **f,
		  char *msg, size_t msglen);
uint16_t pdma_fwd_port(const struct pdma_fwd *f);
/* The line to print: UCX's memory types and how GPU blocks go. */
const char *pdma_fwd_describe(const struct pdma_fwd *f);
int pdma_fwd_start(struct pdma_fwd *f);
void pdma_fwd_stats(struct pdma_fwd *f, struct pdma_fwd_stats *s);
/* Consumer slot i (0 .. stats.consumers - 1): -ENOENT past the last. */
int pdma_fwd_consumer(struct pdma_fwd *f, uint32_t i, struct pdma_fwd_consumer_stats *s);
/* After pdma_ingest_stop: waits until the forwarder has sent what the stop
 * published and END to every consumer (as pdma_fwd_close does first); the
 * stats and consumer slots are final from then on. Before it they may still
 * grow. */
void pdma_fwd_drain(struct pdma_fwd *f);
void pdma_fwd_close(struct pdma_fwd *f);

struct pdma_consume_attr {
	uint32_t size;          /* sizeof (pdma_consume_attr_init) */
	const char *addr;       /* the forwarder's IPv4 address */
	uint16_t port;
	const char *name;       /* this consumer's name (default "consumer") */
	const uint32_t *streams;/* stream IDs wanted ... */
	uint32_t nstreams;      /* ... how many (0: every stream) */
	uint32_t max_streams;   /* streams at most (default 16) */
	uint32_t pool_blocks;   /* buffers per stream; also the credits granted (default 16) */
	int timeout_ms;         /* connection and WELCOME (default 5000) */
};

struct pdma_consume_stats {
	uint64_t blocks, bytes, gap_packets;
	uint64_t local_drops;       /* blocks with no free buffer here */
	uint64_t fwd_dropped_blocks, fwd_dropped_packets; /* END's count */
	bool ended;                 /* END came */
	bool lost;                  /* the forwarder went away before END */
	int error;                  /* what ended the connection before END (then
				     * lost): a protocol error or the transport's
				     * (the forwarder gone: -ECONNRESET, -ETIMEDOUT, ...) */
};

struct pdma_consume;

void pdma_consume_attr_init(struct pdma_consume_attr *a);
/* -ECONNREFUSED / -ETIMEDOUT no forwarder; -EPROTONOSUPPORT or the
 * forwarder's refusal (msg: its reason); -ENODEV no UCX; -EIO UCX. */
int pdma_consume_open(const struct pdma_consume_attr *a, struct pdma_consume **c, char *msg,
		      size_t msglen);
uint32_t pdma_consume_block_packets(const struct pdma_consume *c);
uint64_t pdma_consume_sample_rate(const struct pdma_consume *c);
int pdma_consume_subscribe(struct pdma_consume *c, const struct pdma_sub_attr *a, struct pdma_sub **sub);
int pdma_consume_start(struct pdma_consume *c);
bool pdma_consume_ended(struct pdma_consume *c);
void pdma_consume_stats(struct pdma_consume *c, struct pdma_consume_stats *s);
/* After every subscription is closed (held blocks stay valid). */
void pdma_consume_close(struct pdma_consume *c);

#ifdef __cplusplus
}
#endif

#endif /* PEERDMA_FORWARD_H */
