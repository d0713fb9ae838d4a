/* SPDX-License-Identifier: MIT */
/* bench_ingest's parts and what they share (bench_ingest.c: main, rings). */
#ifndef PDMA_BENCH_INGEST_H
#define PDMA_BENCH_INGEST_H

#include <jansson.h>
#include <stdbool.h>

#include "deframe/deframe_cpu.h"
#include "gen/gen.h"
#include "gpu.h"
#include "gpu_bench.h"
#include "ingest.h"
#include "loopback/loopback.h"
#include "rx/ring.h"

struct ctx {
	bool quick;
	bool gpu;
	int iters;          /* --iters: timed passes per measurement (0: default) */
	uint32_t sizes[8];  /* --sizes: packet sizes for (a) and (x) (0-terminated; empty: default) */
	const char *xlist;  /* --x: items of (x) */
	const char *rxlist; /* --rx: receive I/O of (c) (default both) */
	uint32_t senders;   /* --senders: gen's sender threads in (g) (0: half the cores, 1..16) */
	enum pdma_slot_choice layout; /* --slot-layout: the rings of (a), (e), (x) (auto as ingest's) */
	struct pdma_gpu_ops ops;        /* the deframer (the benchmarks' module) */
	struct pdma_gpu_bench_ops bops; /* its measurements */
	void *dl;
	json_t *root;
};

double now_s(void);
/* The slot layout for packets of pkt bytes: --slot-layout, auto resolved as
 * ingest resolves it for a ring sized to them (ingest.h). */
enum pdma_ring_layout bench_layout(const struct ctx *x, uint32_t pkt);
/* Slot size for packets of pkt bytes (the datagram after the layout's
 * header; 64-byte slots full, 16-byte packed). */
uint32_t slot_for(uint32_t pkt, enum pdma_ring_layout layout);
/* n packets of pkt bytes from 4 streams into a host ring (no injection). */
int make_ring(struct pdma_ring *r, uint32_t pkt, enum pdma_ring_layout layout, size_t target_bytes,
	      uint32_t *n_out);
/* The same in slots of slot bytes (at least slot_for's). */
int make_ring_slots(struct pdma_ring *r, uint32_t pkt, enum pdma_ring_layout layout, uint32_t slot,
		    size_t target_bytes, uint32_t *n_out);
/* A deframer configuration that holds a whole ring of n packets of pkt bytes. */
void dfr_cfg(struct pdma_dfr_config *c, uint32_t pkt, uint32_t n);
/* --iters, or 5 with --quick, else full. */
int iters(const struct ctx *x, int full);
/* The packet sizes of (a) / (x): --sizes or the defaults. */
size_t size_list(const struct ctx *x, const uint32_t *def, size_t ndef, uint32_t *out);
/* Is name one of the comma-separated items of list? */
bool in_list(const char *list, const char *name);

/* gpu_parts.c: the GPU deframer against its ceilings. */
void part_a(struct ctx *x);
void part_b(struct ctx *x);
void part_e(struct ctx *x);
void part_x(struct ctx *x);
/* loopback_parts.c: receive over 127.0.0.1. c_row: one row of (c) (also
 * (g)'s): the highest zero-loss rate of a receive configuration, sending as
 * lo says (NULL: 127.0.0.1, sendmmsg batches), its JSON record into arr
 * (extra: an object to add the row's keys to, taken; NULL: a new one); the
 * best zero-loss run's figures, per received datagram, in *f. */
/* What a run cost, per received datagram. */
struct rx_costs {
	double rx_cpu_ns, rx_sys_ns; /* the receive thread: CPU time (user + system), system */
	double softirq_ns, busy_ns;  /* all CPUs (/proc/stat): softirq, every busy state */
	double rx_util;              /* the receive threads' CPU time over the run's time */
	double per_buf;              /* gro: datagrams per receive buffer (the coalescing) */
};
struct row_fig {
	double pps;
	struct rx_costs c;           /* of the best zero-loss run */
	bool sender_limited, failed;
	/* what stopped the search: "sender" (no loss at the senders' most),
	 * "socket" (the lowest lossy run lost mostly socket drops: the receive
	 * thread fell behind), "ring" (mostly ring overruns: the deframer
	 * did), "failed", or "" */
	const char *limit;
};
void c_row(struct ctx *x, enum pdma_rx_path path, const char *pname, enum pdma_rx_io io, uint32_t threads,
	   uint32_t streams, uint32_t senders, const struct pdma_loopback_opts *lo, json_t *arr, json_t *extra,
	   struct row_fig *f);
void part_c(struct ctx *x, json_t **best1);
void part_d(struct ctx *x, json_t *ours1);
/* socket_parts.c: the socket path's receive I/O side by side (GRO, GSO, veth). */
void part_g(struct ctx *x);
/* consumer_parts.c: consumers of the public ingest API. */
void part_f(struct ctx *x);

#endif /* PDMA_BENCH_INGEST_H */
