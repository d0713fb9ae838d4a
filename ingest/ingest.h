/* SPDX-License-Identifier: MIT */
/*
 * The VITA-49 ingest pipeline (library peerdma_ingest): rings, the CPU
 * deframer, exact per-stream accounting, the packet generator and the socket
 * receive session. Errors are negative errno values.
 *
 * Thread safety is documented per object below; nothing here uses globals.
 */
#ifndef PDMA_INGEST_INGEST_H
#define PDMA_INGEST_INGEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "deframe/deframe.h"

struct pdma_domain;
struct pdma_mr;
struct pdma_sim;

/* ---- Ring: single producer, single consumer, fixed-size slots ----------
 * Ownership is explicit: slots [tail, head) belong to the consumer, all
 * others to the producer. The producer fills slots, then publishes them with
 * a release store of head; the consumer reads head with acquire, processes,
 * and hands slots back with a release store of tail. So no slot is read before
 * it is complete and none is overwritten before it is consumed. When the ring
 * is full the producer drops the datagram into a scratch slot and counts an
 * overrun: never silent, never blocking the socket. */
struct pdma_ring {
	uint8_t *base;        /* nslots * slot_size bytes, page aligned */
	size_t bytes;
	uint32_t nslots;      /* power of two */
	uint32_t slot_size;   /* bytes, multiple of 64, includes PDMA_SLOT_HDR */
	_Alignas(64) atomic_uint_fast64_t head; /* producer: next slot to fill */
	_Alignas(64) atomic_uint_fast64_t tail; /* consumer: next slot to read */
	_Alignas(64) atomic_uint_fast64_t overruns;
	uint8_t *scratch;     /* overrun target (one slot) */
	struct pdma_mr *mr;   /* registration of base (NULL when unregistered) */
	int mlocked;
	int external;         /* base not owned (sim GPU memory) */
};

/* slot_size is rounded up to 64 bytes, nslots to a power of two. */
int pdma_ring_init(struct pdma_ring *r, uint32_t nslots, uint32_t slot_size);
/* A ring over caller memory (e.g. simulated GPU memory); not freed by fini. */
int pdma_ring_init_external(struct pdma_ring *r, void *mem, size_t bytes, uint32_t slot_size);
void pdma_ring_fini(struct pdma_ring *r);
/* Registers the ring memory with the domain (pinned, remote-writable) so a
 * device can DMA into it; iface is a PDMA_HMEM_* value (host or sim GPU
 * memory). The one place ring registration happens; the MR is closed by
 * pdma_ring_fini. */
int pdma_ring_register(struct pdma_ring *r, struct pdma_domain *dom, int iface);
static inline uint8_t *pdma_ring_slot(const struct pdma_ring *r, uint64_t i)
{
	return r->base + (size_t)(i & (r->nslots - 1)) * r->slot_size;
}

/* ---- Accounting (exact, per stream) --------------------------------------- */
#define PDMA_ACCT_WINDOW 16384u /* packets remembered behind the newest */

struct pdma_stream_stats {
	uint32_t stream_id;
	uint64_t received;    /* distinct data packets */
	uint64_t lost;        /* never seen between the lowest and highest index */
	uint64_t duplicated;
	uint64_t reordered;   /* arrived after a higher-index packet of its stream */
	uint64_t late;        /* older than the window: cannot be classified */
	uint64_t malformed;   /* attributed by stream ID */
	uint64_t context;     /* context packets */
	uint64_t count_errors;/* 4-bit count inconsistent with the sample count */
	uint64_t lost_count4; /* what the 4-bit count alone would call lost */
	uint64_t bytes;       /* payload bytes of distinct packets */
	uint64_t first_pkt, last_pkt;
};

struct pdma_acct_stream {
	struct pdma_stream_stats s;
	bool known;           /* a valid packet (data or context) was seen */
	bool have;            /* a data packet was seen */
	uint8_t c_off;        /* packet count minus index, mod 16 */
	uint8_t c_high;       /* count of the highest packet */
	uint64_t low, high;
	uint64_t *bits;       /* PDMA_ACCT_WINDOW bits */
};

struct pdma_acct {
	uint32_t max_streams;
	struct pdma_acct_stream *st; /* indexed like the deframer's stream table */
	uint64_t malformed_unattributed;
	uint64_t malformed_by_code[PDMA_DFR_E__MAX];
	uint64_t packets;     /* all datagrams seen */
};

int pdma_acct_init(struct pdma_acct *a, uint32_t max_streams);
void pdma_acct_fini(struct pdma_acct *a);
/* Account one descriptor (arrival order). payload_len for byte totals. */
void pdma_acct_add(struct pdma_acct *a, const struct pdma_dfr_desc *d, uint32_t payload_len);
/* Final per-stream numbers (lost is computed here). idx < max_streams. */
bool pdma_acct_stream(const struct pdma_acct *a, uint32_t idx, struct pdma_stream_stats *out);

/* ---- CPU deframer --------------------------------------------------------
 * Single-threaded: one deframer is driven by one thread at a time. */
struct pdma_dfr {
	struct pdma_dfr_config cfg;
	struct pdma_dfr_tables t;
	struct pdma_acct acct;
	uint64_t placed;      /* packets written to output */
};

int pdma_dfr_init(struct pdma_dfr *d, const struct pdma_dfr_config *cfg);
void pdma_dfr_fini(struct pdma_dfr *d);
void pdma_dfr_config_default(struct pdma_dfr_config *c);
/* Name of a deframer error (-PDMA_DFR_E_*) or parser error. */
const char *pdma_dfr_strerror(int err);
/* Deframe one slot (no accounting); fills *desc. Returns payload length
 * placed or considered (>= 0) for data, 0 otherwise. */
uint32_t pdma_dfr_cpu_slot(const struct pdma_dfr_config *c, struct pdma_dfr_tables *t,
			   const uint8_t *slot, uint32_t slot_size, struct pdma_dfr_desc *desc);
/* Deframe and account n slots starting at ring index first. */
void pdma_dfr_process(struct pdma_dfr *d, const struct pdma_ring *r, uint64_t first, uint32_t n);
/* Output of stream index idx: data pointer and tags. */
static inline uint8_t *pdma_dfr_out(const struct pdma_dfr *d, uint32_t idx)
{
	return d->t.out + (size_t)idx * d->cfg.out_pkts * d->cfg.max_payload;
}

/* ---- Generator ------------------------------------------------------------ */
struct pdma_gen_config {
	uint32_t streams;          /* number of streams */
	uint32_t stream_id_base;   /* stream IDs base, base + 1, ... */
	uint32_t packet_size;      /* VRT packet bytes (multiple of 4) */
	uint64_t packets;          /* data packets per stream */
	uint64_t sample_rate;      /* samples per second (timestamps) */
	uint32_t ts_start;         /* UTC seconds of sample 0 */
	bool trailer;              /* append a trailer word */
	bool context;              /* one context packet (sample rate) per stream first */
	uint32_t loss_pm, dup_pm, reorder_pm; /* per-mille event probabilities */
	uint32_t loss_burst;       /* packets dropped per loss event (>= 1) */
	uint64_t seed;
	uint32_t send_threads;     /* pdma_loopback_*: sender threads (0 = 1) */
};

struct pdma_gen_inject {
	uint64_t sent;        /* datagrams (data, incl. duplicates) */
	uint64_t lost, duplicated, reordered;
	uint64_t context;
};

struct pdma_gen;
void pdma_gen_config_default(struct pdma_gen_config *c);
int pdma_gen_open(const struct pdma_gen_config *c, struct pdma_gen **g);
void pdma_gen_close(struct pdma_gen *g);
/* Next datagram in send order into buf: returns its length, 0 at the end, or
 * a negative errno; *stream gets the stream index. The injections are decided
 * here, deterministically from the seed, and counted per stream. Never drops
 * the first or last packet of a stream (so loss stays detectable), nor
 * reorders or duplicates them. */
int pdma_gen_next(struct pdma_gen *g, uint8_t *buf, size_t cap, uint32_t *stream);
const struct pdma_gen_inject *pdma_gen_injected(const struct pdma_gen *g, uint32_t stream);
uint32_t pdma_gen_payload_len(const struct pdma_gen_config *c);
/* The sample word (big-endian on the wire) at absolute sample s of stream id. */
static inline uint32_t pdma_gen_sample(uint32_t stream_id, uint64_t s)
{
	uint32_t i = (uint32_t)(s * 2654435761u) ^ (stream_id * 40503u);
	return (i & 0xffff0000u) | ((uint32_t)(s + stream_id) & 0xffffu);
}

/* Sending over UDP (one socket per stream, so receivers can spread flows).
 * Per-stream order is kept; the interleaving of streams differs from
 * pdma_gen_next's (longer turns per stream, and T threads run concurrently). */
struct pdma_gen_send_opts {
	const char *host;     /* IPv4 address, default 127.0.0.1 */
	uint16_t port;        /* default 4991 */
	double rate_pps;      /* total datagrams per second, 0 = unpaced */
	FILE *pcap;           /* optional: also write an Ethernet/IPv4/UDP pcap */
	atomic_bool *stop;    /* optional */
	uint32_t threads;     /* sender threads (0 = 1, at most one per stream; 1 with
			       * pcap): thread t owns streams t, t + T, ... and their
			       * sockets and sends its share of rate_pps. What each
			       * stream sends and injects does not depend on T. */
};
int pdma_gen_send(struct pdma_gen *g, const struct pdma_gen_send_opts *o);
/* pcap only (no network). */
int pdma_gen_write_pcap(struct pdma_gen *g, FILE *f, const char *host, uint16_t port);

/* ---- Receive session -------------------------------------------------------
 * N receive threads (SO_REUSEPORT sockets, recvmmsg batches) each fill their
 * own ring; one deframer thread consumes all rings in order of arrival per
 * ring (a flow always hashes to the same socket, so per-stream order is kept).
 * Start/stop/stats from one controlling thread. */
/* cpu: CPU deframer. host-staged: the ring (pinned, mapped) is copied to the
 * GPU in chunks and deframed there. zero-copy: the GPU deframer reads the
 * mapped ring directly. direct: the ring lives in (simulated) GPU memory and
 * the (simulated) DMA device writes packets into it by key; the CPU deframer
 * reads it, since sim GPU memory is host memory. The two GPU paths need a
 * CUDA device and the module (pdma_ingest_open: -ENODEV / -ENOENT). */
enum pdma_rx_path { PDMA_RX_CPU = 0, PDMA_RX_HOST_STAGED, PDMA_RX_ZERO_COPY, PDMA_RX_DIRECT };
/* How a receive thread reads its socket: recvmmsg batches (default), or
 * io_uring (multishot recvmsg into the ring's slots as provided buffers;
 * not for the direct path, whose datagrams go through the device). */
enum pdma_rx_io { PDMA_RX_IO_RECVMMSG = 0, PDMA_RX_IO_URING };

struct pdma_ingest_config {
	uint16_t port;            /* 0: ephemeral (see pdma_ingest_port) */
	const char *bind_addr;    /* default 127.0.0.1 */
	uint32_t threads;         /* receive threads */
	uint32_t ring_slots;      /* per receive thread */
	uint32_t slot_size;       /* bytes per slot (datagram + 16) */
	uint32_t batch;           /* recvmmsg batch */
	int rcvbuf;               /* SO_RCVBUF bytes */
	enum pdma_rx_path path;
	enum pdma_rx_io rx_io;
	struct pdma_dfr_config dfr;
	struct pdma_domain *domain; /* optional: register rings here (required: direct) */
	struct pdma_sim *sim;       /* direct path: the simulated GPU holding the rings */
	size_t gpu_chunk;           /* host-staged: bytes per copy (0: 4 MiB, >= 90% of the H100's copy-engine peak) */
	/* GPU paths: how each batch is launched (ingest/gpu.h): one CUDA graph
	 * replay per batch (the default for zero-copy) or one stream call per
	 * operation (the default for host-staged, where it measured faster). */
	enum pdma_ingest_launch { PDMA_INGEST_LAUNCH_DEFAULT = 0, PDMA_INGEST_LAUNCH_STREAM,
				     PDMA_INGEST_LAUNCH_GRAPH } gpu_launch;
};

struct pdma_ingest_totals {
	uint64_t datagrams, bytes;
	uint64_t ring_overruns;   /* dropped because a ring was full */
	uint64_t socket_drops;    /* kernel drops (SO_RXQ_OVFL) */
	uint64_t truncated;       /* datagrams larger than a slot */
	double ring_fill;         /* worst ring fill now, 0..1 */
	double rx_cpu_s;          /* receive threads' CPU time, summed (after stop; 0 before) */
};

/* One receive thread's counters (read by any thread). */
struct pdma_rx_stats {
	atomic_uint_fast64_t datagrams, bytes, truncated;
	atomic_uint_fast64_t socket_drops; /* the kernel's count for the socket so far */
};

/* io_uring receive (rx_uring.c) into ring r from socket fd, from the ring's
 * head on: open fails with -EOPNOTSUPP where io_uring is absent or disabled
 * or lacks provided-buffer rings (before Linux 5.19), as does
 * pdma_ingest_open with rx_io io_uring.
 * run() receives until *stop is set and the socket has been quiet for 20 ms
 * (what it holds is drained first); 0 or a negative errno. */
struct pdma_rx_uring;
int pdma_rx_uring_open(struct pdma_rx_uring **u, int fd, struct pdma_ring *r);
int pdma_rx_uring_run(struct pdma_rx_uring *u, const atomic_bool *stop, struct pdma_rx_stats *st);
void pdma_rx_uring_close(struct pdma_rx_uring *u);

struct pdma_ingest;
void pdma_ingest_config_default(struct pdma_ingest_config *c);
int pdma_ingest_open(const struct pdma_ingest_config *c, struct pdma_ingest **ing);
uint16_t pdma_ingest_port(const struct pdma_ingest *ing);
int pdma_ingest_start(struct pdma_ingest *ing);
/* Drains what the sockets still hold, then stops all threads. */
int pdma_ingest_stop(struct pdma_ingest *ing);
void pdma_ingest_close(struct pdma_ingest *ing);
/* Live progress lines (rates, loss, ring fill) every second, from the
 * deframer thread; NULL (default) for none. Set before start. */
void pdma_ingest_set_progress(struct pdma_ingest *ing, FILE *f);
void pdma_ingest_totals(struct pdma_ingest *ing, struct pdma_ingest_totals *t);
/* The deframer (valid to read after stop). */
const struct pdma_dfr *pdma_ingest_dfr(const struct pdma_ingest *ing);
/* JSON summary (jansson object, caller json_decref()s): totals + streams. */
struct json_t *pdma_ingest_json(struct pdma_ingest *ing, double seconds);

#endif /* PDMA_INGEST_INGEST_H */

/* ---- Loopback run: gen -> ingest in one process (demo, tests, bench) ---- */
struct pdma_loopback_stream {
	struct pdma_gen_inject injected;
	struct pdma_stream_stats detected;
	uint64_t content_errors;  /* output words that differ from what gen sent */
	uint64_t checked_packets; /* output positions verified */
	bool match;               /* detected == injected (lost, dup, reordered) */
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
};
/* Runs gen (in a thread) into a fresh ingest session on an ephemeral port.
 * When the kernel dropped datagrams (socket_drops, ring overruns) the run is
 * repeated at half the rate, up to 4 attempts, since such loss is not the
 * generator's injection. rate_pps 0: unpaced. */
int pdma_loopback_run(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
		      double rate_pps, struct pdma_loopback_result *res);
/* One attempt, no retry (benchmarks: loss is the measurement). */
int pdma_loopback_once(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
		       double rate_pps, struct pdma_loopback_result *res);
