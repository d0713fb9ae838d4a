/* SPDX-License-Identifier: MIT */
/*
 * peerdma ingest: VITA-49 sample streams received over UDP (or written by a
 * NIC into GPU memory), deframed, loss-checked and handed to the program as
 * blocks of samples while they arrive. Link with `pkg-config --libs peerdma`.
 *
 * The model:
 *  - A session (struct pdma_ingest) receives on one UDP port (or one NIC),
 *    deframes every stream into a per-stream output window in host memory (cpu
 *    path) or GPU memory (host-staged and zero-copy paths), and cuts each
 *    stream into blocks of block_packets packets (aligned to multiples of
 *    block_packets in the packet index; a stream's first block starts at its
 *    first packet, and a block published early ends at the newest packet).
 *  - A subscription (struct pdma_sub) names the streams it wants (all, or one
 *    stream ID) and how the producer treats it when it falls behind (policy).
 *  - A block (struct pdma_block) holds block_packets consecutive packet
 *    positions of one stream. It is published once the stream has moved
 *    block_packets * late_blocks packets past its end (room for reordered
 *    packets), when nothing has arrived for flush_idle_ms, or when the
 *    session stops. Publication copies the block's packets out of the
 *    window into a buffer of the stream's pool (window_blocks buffers, in
 *    the window's memory: host or GPU), converting the byte order; streams
 *    nobody subscribes to are not copied. Packets that never came are
 *    gaps: their samples read as zero and their bits are set in the
 *    block's gap mask. A packet that arrives after its block was published
 *    is not in it (counted: late).
 *  - The consumer holds a block until pdma_block_release(); nothing writes
 *    the block's buffer meanwhile, however far the window has moved on.
 *    Held and queued blocks take buffers of their stream's pool: when a
 *    block is published and its pool has none free, drop-oldest takes the
 *    oldest block of that stream from the queue of the subscription that
 *    queues most (counted there: overruns, overrun_packets); backpressure
 *    makes the deframer wait for a release, the receive rings fill, and
 *    the receive path drops (ring_overruns, socket_drops). A block whose
 *    every buffer is held by consumers is dropped (window_drops).
 *
 * Samples: complex 16-bit integers (I then Q), in host byte order: the
 * copy into the pool converts VITA-49's big-endian payload
 * (PDMA_FMT_CI16). sample index = integer seconds * sample rate + the
 * timestamp's sample count (TSF = 1), so first_sample says where the block
 * sits in time.
 *
 * Errors: calls that can fail return 0 or a negative errno value.
 *
 * Thread safety (per call):
 *  - pdma_ingest_attr_init, pdma_sub_attr_init: any thread, no shared state.
 *  - pdma_ingest_open, _start, _stop, _close, _subscribe: from one controlling
 *    thread; pdma_ingest_close only after every subscription is closed.
 *    Blocks still held then (a DLPack view outliving its session) stay valid:
 *    the session's pools and GPU memory go with the last release.
 *  - pdma_ingest_stats, pdma_ingest_port, pdma_ingest_ended: any thread.
 *  - pdma_sub_next, pdma_sub_stats: any thread; concurrent pdma_sub_next calls
 *    on one subscription each get distinct blocks.
 *  - pdma_sub_close: once, when no other thread is in pdma_sub_next on it;
 *    blocks still held stay valid until released.
 *  - pdma_block_retain, pdma_block_release: any thread (atomic reference
 *    count); pdma_block_dlpack likewise.
 *  - Callbacks (pdma_sub_attr.cb) run on the subscription's own delivery
 *    thread, one call at a time, in publication order.
 */
#ifndef PEERDMA_INGEST_H
#define PEERDMA_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PDMA_INGEST_API_VERSION 1

/* Receive path (peerdma-ingest(1) --path). */
enum pdma_ingest_path_kind {
	PDMA_INGEST_PATH_CPU = 0,       /* sockets, CPU deframer, host memory */
	PDMA_INGEST_PATH_HOST_STAGED,   /* sockets, host ring copied to the GPU, GPU deframer */
	PDMA_INGEST_PATH_ZERO_COPY,     /* sockets, GPU deframer reading the mapped host ring */
	PDMA_INGEST_PATH_NIC,           /* a NIC (drivers/e1000) writing frames into GPU memory */
};

/* What the producer does when a subscriber falls behind. */
enum pdma_sub_policy {
	/* The subscription's queue holds at most depth blocks; publishing into
	 * a full queue drops its oldest block (counted: overruns). Held blocks
	 * are never touched. */
	PDMA_SUB_DROP_OLDEST = 0,
	/* Never drop a block while the session runs: when the queue is full,
	 * or a stream's pool has no free buffer, the deframer waits for
	 * releases; the receive rings then fill and the receive path drops
	 * (counted there: ring_overruns, socket_drops). Stalls every stream of
	 * the session. pdma_ingest_stop never waits: blocks that find the
	 * queue full from then on take the drop-oldest way (overruns). */
	PDMA_SUB_BACKPRESSURE,
};

/* Where a block's samples are. */
enum pdma_block_mem {
	PDMA_BLOCK_HOST = 1,      /* host memory (DLPack kDLCPU) */
	PDMA_BLOCK_CUDA = 2,      /* CUDA device memory (kDLCUDA) */
	PDMA_BLOCK_CUDA_HOST = 3, /* pinned host memory the GPU maps (kDLCUDAHost) */
};

#define PDMA_FMT_CI16 1 /* complex int16, host order: 4 bytes a sample */

#define PDMA_SUB_ALL_STREAMS UINT64_MAX /* pdma_sub_attr.stream_id: every stream */

struct pdma_ingest_attr {
	uint32_t size;            /* sizeof(struct pdma_ingest_attr) (pdma_ingest_attr_init) */
	enum pdma_ingest_path_kind path;
	const char *bind_addr;    /* IPv4 address (default 127.0.0.1) */
	uint16_t port;            /* 0: ephemeral (pdma_ingest_port); nic path: the UDP
				   * destination port its frames carry (not 0) */
	uint32_t threads;         /* receive threads (default 1) */
	uint64_t sample_rate;     /* samples per second (default 1e7, as peerdma gen; the timestamps' unit) */
	uint32_t max_streams;     /* default 16 */
	uint32_t max_payload;     /* payload bytes per packet, at most (default 8192) */
	uint32_t block_packets;   /* packets per block (default 64) */
	uint32_t window_blocks;   /* buffers in each stream's block pool, and the least
				   * size of its deframer window in blocks (default 16;
				   * the window grows to hold a receive batch; a
				   * forwarder needs PDMA_FWD_POOL_RESERVE + its
				   * max_credits: 48 at forward.h's defaults) */
	uint32_t late_blocks;     /* publish a block once its stream is this many
				   * blocks past its end (default 1; 0: at once) */
	int cuda_device;          /* GPU paths: the device ordinal (default 0) */
	const char *nic_dev;      /* nic path: /dev/peerdma_nicN (default /dev/peerdma_nic0) */
	const char *kernel_device;/* nic path: /dev/peerdma (default) */
	uint32_t flush_idle_ms;   /* publish every stream's open blocks
				   * (ending at its newest packet) once nothing has
				   * arrived for this long (default 100; 0: only at stop) */
};

struct pdma_block {
	uint32_t stream_id;
	uint32_t format;          /* PDMA_FMT_CI16 */
	uint32_t bytes_per_sample;
	uint32_t samples_per_packet;
	uint64_t first_sample;    /* index of data[0] in the stream's time line */
	uint64_t ts_int;          /* VITA-49 timestamp of data[0]: integer seconds */
	uint64_t ts_frac;         /* and the sample count within that second */
	uint64_t nsamples;        /* npackets * samples_per_packet */
	uint32_t npackets;        /* block_packets; fewer for a stream's first block and
				   * one published early (above) */
	uint32_t gaps;            /* packets of the block that never came (zero samples) */
	const uint64_t *gap_mask; /* bit i of word i / 64 set: packet i is a gap */
	uint64_t seq;             /* the block's number in its stream: its first packet
				   * index / block_packets */
	void *data;               /* the samples (host or device address) */
	enum pdma_block_mem mem;
	int device;               /* CUDA device ordinal (mem != PDMA_BLOCK_HOST) */
	void *cuda_event;         /* GPU paths: a CUevent; the samples are valid once it
				   * completes (pdma_block_dlpack makes a stream wait on it) */
	/* The stream's context (VITA-49 CIF0 fields) as of publication: each
	 * field's value from the latest context packet that carried it (a
	 * context packet that leaves a field out does not forget it);
	 * ctx_fields has the PDMA_CTX_* bits of the fields any carried. */
	uint32_t ctx_fields;
	double ctx_sample_rate;   /* Hz */
	double ctx_rf_freq;       /* RF reference frequency, Hz */
	double ctx_bandwidth;     /* Hz */
};

#define PDMA_CTX_SAMPLE_RATE (1u << 0)
#define PDMA_CTX_RF_FREQ     (1u << 1)
#define PDMA_CTX_BANDWIDTH   (1u << 2)

/* A block's callback (pdma_sub_attr.cb): the block is the callback's to
 * release, then or later. */
typedef void (*pdma_block_cb)(struct pdma_block *b, void *arg);

struct pdma_sub_attr {
	uint32_t size;            /* sizeof(struct pdma_sub_attr) (pdma_sub_attr_init) */
	uint64_t stream_id;       /* one VITA-49 stream ID, or PDMA_SUB_ALL_STREAMS */
	enum pdma_sub_policy policy;
	uint32_t depth;           /* queued blocks at most (default 8); a stream's blocks
				   * queued and held are also bounded by its pool
				   * (window_blocks) */
	pdma_block_cb cb;         /* NULL: pdma_sub_next; else a delivery thread calls it */
	void *cb_arg;
};

struct pdma_ingest_stats {
	uint64_t datagrams, bytes;   /* received by the receive path */
	uint64_t ring_overruns;      /* receive path: dropped, ring full */
	uint64_t socket_drops;       /* receive path: dropped by the kernel */
	uint64_t packets_placed;     /* data packets written into a window */
	uint64_t window_drops;       /* data packets placed but in no block: the window
				      * wrapped over them before their block was
				      * published, or every pool buffer was held */
	uint64_t late;               /* data packets after their block was published (placed
				      * = in blocks + window_drops + late, for a subscriber
				      * that takes every block) */
	uint64_t blocks_published;
	uint64_t gap_packets;        /* gaps in published blocks */
	uint32_t streams;            /* streams seen */
};

struct pdma_sub_stats {
	uint64_t delivered;          /* blocks handed to the consumer */
	uint64_t overruns;           /* blocks dropped from a full queue (drop-oldest) */
	uint64_t waits;              /* times the producer waited for it (backpressure) */
	uint32_t queued, held;       /* now */
	uint64_t overrun_packets;    /* packets of the overrun blocks */
};

struct pdma_ingest;
struct pdma_sub;

void pdma_ingest_attr_init(struct pdma_ingest_attr *a);
/* Opens the sockets (or attaches the NIC) and allocates the windows. -EINVAL
 * for bad attributes, -ENODEV / -ENOENT where a GPU path has no CUDA device or
 * no GPU deframer module; msg (msglen bytes, may be NULL) says what failed. */
int pdma_ingest_open(const struct pdma_ingest_attr *a, struct pdma_ingest **ing, char *msg,
		     size_t msglen);
uint16_t pdma_ingest_port(const struct pdma_ingest *ing);
/* Starts the receive and deframer threads. -EALREADY when started; a thread
 * that cannot be created (-EAGAIN, ...) leaves the session as it was, not
 * started: subscribing and starting again work. */
int pdma_ingest_start(struct pdma_ingest *ing);
/* Drains what has arrived (until the source has been quiet for 20 ms, 0.5 s
 * at most: traffic that goes on does not hold the stop up), publishes every
 * block still open (gaps flagged), then ends the subscriptions:
 * pdma_sub_next returns -EPIPE once drained. */
int pdma_ingest_stop(struct pdma_ingest *ing);
/* Every receive thread ended on its own (an error or a revocation). */
bool pdma_ingest_ended(struct pdma_ingest *ing);
void pdma_ingest_stats(struct pdma_ingest *ing, struct pdma_ingest_stats *s);
void pdma_ingest_close(struct pdma_ingest *ing);

void pdma_sub_attr_init(struct pdma_sub_attr *a);
/* Before pdma_ingest_start (blocks published earlier are not replayed).
 * -EINVAL for bad attributes, -EBUSY once started. */
int pdma_ingest_subscribe(struct pdma_ingest *ing, const struct pdma_sub_attr *a,
			  struct pdma_sub **sub);
/* The next block, waiting up to timeout_ms (-1: no limit; 0: poll).
 * -ETIMEDOUT: none yet; -EPIPE: the session stopped and the queue is empty;
 * -EINVAL: a callback subscription. */
int pdma_sub_next(struct pdma_sub *sub, struct pdma_block **b, int timeout_ms);
void pdma_sub_stats(struct pdma_sub *sub, struct pdma_sub_stats *s);
/* Ends the subscription; blocks it has handed out stay valid until released.
 * Blocks still queued are dropped, except on a callback subscription whose
 * session has stopped (pdma_ingest_stop): its callback first runs on each of
 * them, so it sees every block published. */
void pdma_sub_close(struct pdma_sub *sub);

/* Copy npackets packets of the block, from packet first_packet, to host
 * memory dst (npackets * samples_per_packet * bytes_per_sample bytes),
 * after the block's event where it has one: how a consumer that does not
 * link CUDA reads a GPU block. -EINVAL out of range, -EIO on a CUDA error. */
int pdma_block_read(const struct pdma_block *b, uint32_t first_packet, uint32_t npackets, void *dst);
void pdma_block_retain(struct pdma_block *b);
/* Drops a reference; the last one gives the buffer back to the stream's
 * pool, where a later block's copy may overwrite it at once. On the GPU
 * paths that copy runs on the library's own stream, which does not wait for
 * the consumer's: drop the last reference (and a DLPack view's, through its
 * deleter) only once the device work that reads the block has completed
 * (its stream synchronized, or an event after it). */
void pdma_block_release(struct pdma_block *b);

/*
 * DLPack (dlpack.h, version 0.6 or later; legacy DLManagedTensor): a new
 * managed tensor viewing the block's samples as int16 [nsamples, 2] on the
 * block's device, holding a reference to the block that its deleter drops.
 * stream: for a CUDA block, the consumer's CUstream (as __dlpack__(stream=)
 * names it: 1 the legacy default stream, 2 per-thread default); the call
 * makes it wait for the block's event. -EINVAL for a bad stream value,
 * -ENOMEM.
 */
int pdma_block_dlpack(struct pdma_block *b, intptr_t stream, void **managed_tensor);

#ifdef __cplusplus
}
#endif

#endif /* PEERDMA_INGEST_H */
