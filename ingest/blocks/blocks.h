/* SPDX-License-Identifier: MIT */
/*
 * Sample blocks for consumers (the implementation behind
 * include/peerdma/ingest.h's subscriptions and blocks).
 *
 * A block's way: the deframer places each stream's packets into its output
 * window (deframe/: position p mod out_pkts, shared by the CPU and GPU
 * deframers and left as it is). The accounting's observer (acct.h) shows
 * this layer every descriptor in arrival order; it mirrors which packet each
 * window position holds (the deframer's tags) and, once a stream has moved
 * late_blocks blocks past a block's end, publishes the block: its packets are
 * copied out of the window into a buffer of the stream's pool (converted to
 * host byte order, gaps zero-filled) and queued to every matching
 * subscription. The consumer reads the buffer in place until it releases
 * the block; the window goes on being overwritten meanwhile, so a held block
 * never changes, whatever the consumer's speed (blocks.c). Subscriptions,
 * their queues and policies, and references live in sub.c; the DLPack view
 * in dlpack.c.
 *
 * Why a copy out of the window rather than blocks in the window itself: the
 * window's positions are written by whichever deframer runs, the GPU's in
 * parallel, by packet index; keeping them off limits while a consumer holds
 * them would put a hold check in every deframer kernel and stall a stream's
 * window behind its slowest consumer. The copy costs one pass over the
 * payload per subscribed block (none when nobody subscribes) and converts
 * the byte order in the same pass.
 *
 * Threads: publish/observe/flush from the one thread that drives the
 * deframer; sub.c's calls from any thread (one mutex, bl->lock).
 */
#ifndef PDMA_INGEST_BLOCKS_BLOCKS_H
#define PDMA_INGEST_BLOCKS_BLOCKS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "deframe/deframe_cpu.h"
#include "peerdma/ingest.h"

struct pdma_blocks;

/* One block buffer of a stream's pool, with its public view first. */
struct pdma_blk {
	struct pdma_block pub;
	struct pdma_blocks *bl;
	atomic_uint refs;         /* queue entries and consumers, and the producer until delivered */
	uint32_t stream;          /* stream table index */
	struct pdma_blk *next;    /* free list */
	uint64_t mask[];          /* gap mask: block_packets bits */
};

struct pdma_sub {
	struct pdma_blocks *bl;
	struct pdma_sub_attr a;
	struct pdma_blk **q;      /* ring of depth entries */
	uint32_t qhead, qlen;
	uint32_t held;
	struct pdma_sub_stats st;
	pthread_cond_t avail;
	bool ended, closed;
	int wake_fd;              /* armed (pdma_sub_arm): written at the next block, end or close */
	void *refs_mem;           /* sub.c's references, one per pool buffer */
	pthread_t th;             /* callback subscriptions' delivery thread */
	bool has_th;
	struct pdma_sub *next;
};

struct pdma_blk_stream {
	bool have;
	uint32_t stream_id;
	uint32_t plen, spp;
	uint64_t next;            /* first packet of the next unpublished block */
	uint64_t high;            /* highest data packet index seen */
	uint64_t *ptag;           /* [out_pkts] p + 1 of the packet at each position */
	struct pdma_blk *free;
	uint32_t nfree;
	uint32_t ctx_fields;
	double ctx_rate, ctx_freq, ctx_bw;
};

/* Where the window's payload is and how to copy a block out of it: host
 * memory (the CPU deframer) or device memory (the GPU's, through the GPU
 * deframer module). */
struct pdma_blk_mem {
	enum pdma_block_mem kind;
	int device;
	/* dst <- src, n bytes, 16-bit byte swap (host: NULL: memcpy-like) */
	int (*copy)(void *arg, void *dst, const void *src, size_t n);
	int (*zero)(void *arg, void *dst, size_t n);
	/* after a publication's copies: the event that marks them done */
	int (*fence)(void *arg, void **event);
	/* make a CUDA stream wait for a publication's event */
	int (*stream_wait)(void *arg, intptr_t stream, void *event);
	void (*event_destroy)(void *arg, void *event);
	/* n bytes of a block to host memory dst, once its event has completed */
	int (*read)(void *arg, void *dst, const void *src, size_t n, void *event);
	int (*alloc)(void *arg, size_t n, void **p);
	void (*free)(void *arg, void *p);
	void (*fini)(void *arg);   /* at close, last (may be NULL) */
	void *arg;
};

struct pdma_blocks {
	struct pdma_dfr_config cfg;
	uint32_t B, late, pool;   /* block_packets, late_blocks, buffers per stream */
	size_t buf_bytes;         /* B * max_payload */
	const uint8_t *window;    /* the deframer's out (host or device address) */
	struct pdma_blk_mem mem;
	struct pdma_blk_stream *st;
	uint64_t *scratch;        /* [out_pkts]: block numbers, the jump pass (blocks.c) */
	uint8_t *pool_mem;        /* max_streams * pool buffers */
	uint8_t *blk_mem;         /* the pdma_blk structs */
	size_t blk_size;
	pthread_mutex_t lock;
	pthread_cond_t room;      /* a buffer or queue room freed (backpressure) */
	struct pdma_sub *subs;
	bool any_backpressure;
	atomic_bool stopping;     /* flush at stop: no waits */
	bool started;
	uint64_t held_total;      /* consumer references out (all subscriptions) */
	bool closing;             /* closed with blocks held: the last release frees */
	void (*fin)(void *arg);   /* ... and then calls this (the session's GPU deframer) */
	void *fin_arg;
	/* counters (the deframer's thread writes, any reads) */
	_Atomic uint64_t published, gap_packets, late_pkts, window_drops, placed;
	_Atomic uint32_t streams;
};

/* window: the deframer's output (pdma_dfr_tables.out), host or device
 * address per mem. -EINVAL, -ENOMEM. */
int pdma_blocks_open(struct pdma_blocks **bl, const struct pdma_dfr_config *cfg, uint32_t block_packets,
		     uint32_t late_blocks, uint32_t pool_blocks, const uint8_t *window,
		     const struct pdma_blk_mem *mem);
/* Frees the blocks layer, or, while consumers still hold blocks (DLPack
 * views may outlive the session), marks it closing: the last
 * pdma_block_release frees it. fin(fin_arg) runs after the free, whenever
 * that is (the session closes the GPU deframer there, whose memory the pools
 * are). */
void pdma_blocks_close(struct pdma_blocks *bl, void (*fin)(void *arg), void *fin_arg);
/* The free itself (lock not held, nothing held). */
void pdma_blocks_free(struct pdma_blocks *bl);
/* The accounting observer (acct.h): one descriptor, its datagram when in
 * host memory (context fields, payload length) else NULL. */
void pdma_blocks_observe(void *bl, const struct pdma_dfr_desc *d, uint32_t payload_len,
			 const uint8_t *dg, uint32_t dglen);
/* After a batch: publish every block its stream has moved past. */
void pdma_blocks_publish(struct pdma_blocks *bl);
/* Publish every stream's open blocks, the last ending at its newest packet
 * (the session's idle flush; a packet that comes later for them is late). */
void pdma_blocks_publish_open(struct pdma_blocks *bl);
/* From now on publication never waits (backpressure ends at stop). */
void pdma_blocks_stop(struct pdma_blocks *bl);
/* At stop: publish what is left (last blocks end at their stream's highest
 * packet), then end every subscription. */
void pdma_blocks_flush(struct pdma_blocks *bl);
void pdma_blocks_stats(struct pdma_blocks *bl, struct pdma_ingest_stats *s);

/* sub.c */
int pdma_blocks_subscribe(struct pdma_blocks *bl, const struct pdma_sub_attr *a, struct pdma_sub **sub);
/* Hand a new block to the matching subscriptions (bl->lock held); may wait
 * (backpressure). Consumes the producer's reference pdma_blocks_get_buf gave:
 * the buffer goes back to the pool when no subscription took it. Returns the
 * number of subscriptions it went to. */
uint32_t pdma_blocks_deliver(struct pdma_blocks *bl, struct pdma_blk *b);
/* A free buffer of stream idx (bl->lock held), by the policies, holding one
 * reference, the producer's: NULL when none can be had without waiting on a
 * drop-oldest-only stream. */
struct pdma_blk *pdma_blocks_get_buf(struct pdma_blocks *bl, uint32_t idx);
bool pdma_blocks_wanted(struct pdma_blocks *bl, uint32_t stream_id);
/* A buffer from pdma_blocks_get_buf back to the pool unused (lock held). */
void pdma_blocks_put_buf(struct pdma_blocks *bl, struct pdma_blk *b);
void pdma_blocks_end_subs(struct pdma_blocks *bl);
/* For a thread that sleeps in poll(2) on other things too (the forwarder,
 * on UCX's fd): arms sub to write 1 to eventfd fd at its next block, its
 * end or its close, once. Returns 0 when armed, 1 when there is something
 * to take already (do not sleep). The caller reads fd before it re-arms. */
int pdma_sub_arm(struct pdma_sub *sub, int fd);
/* The session started (on) or its start was undone (off): subscribing is
 * refused while started. */
void pdma_blocks_start(struct pdma_blocks *bl, bool on);
void pdma_blocks_free_subs(struct pdma_blocks *bl);
/* The GPU deframer's window as a block source (gpu_mem.c): *mem's
 * operations, *window its device address. */
struct pdma_gpu_batch;
int pdma_blocks_gpu_mem(struct pdma_gpu_batch *gb, struct pdma_blk_mem *mem, const uint8_t **window);
/* A consumer's CUDA stream waits for block b's event (dlpack.c). */
int pdma_blocks_stream_wait(struct pdma_block *b, intptr_t stream);
/* The host waits until block b's data is complete (a GPU block: its event),
 * copying nothing: the forwarder times that apart from its staging copy. */
int pdma_blocks_ready(const struct pdma_block *b);

#endif /* PDMA_INGEST_BLOCKS_BLOCKS_H */
