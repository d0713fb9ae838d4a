/* SPDX-License-Identifier: MIT */
/* Inside the generator, shared by its files: the walk over a subset of the
 * streams (gen.c), which each sender thread (send.c) runs over its own
 * streams, and the pcap records (pcap.c) that a single sender also writes. */
#ifndef PDMA_INGEST_GEN_GEN_INT_H
#define PDMA_INGEST_GEN_GEN_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gen/gen.h"

struct mmsghdr;

/* Datagrams per sendmmsg call (and per stream turn while sending: one call
 * carries one stream's datagrams, since each stream has its own socket). */
#define SEND_BATCH 64u

/* Round-robin over the streams first, first + step, ... (a sender thread
 * owns one such disjoint subset; pdma_gen_next walks all of them). Every
 * stream's state (injection RNG, queue, counts) is its own, so what a stream
 * sends and injects does not depend on how the streams are split. */
struct pdma_gen_iter {
	uint32_t first, step;
	uint32_t cur;        /* round-robin position (a stream index) */
	uint32_t live;       /* streams of this subset with packets left */
	uint32_t burst;      /* datagrams per stream per turn */
	const atomic_bool *stop; /* optional: once set, the walk finishes
				  * (pdma_gen_iter_finish); NULL after */
};

void pdma_gen_iter_init(const struct pdma_gen *g, struct pdma_gen_iter *it, uint32_t first,
			uint32_t step, uint32_t burst);
/* pdma_gen_next's walk finishes once *stop is set (NULL: never). */
void pdma_gen_stop_on(struct pdma_gen *g, const atomic_bool *stop);
/* pdma_gen_next over the subset: the next datagram's length, 0 at the end of
 * the subset, or a negative errno. */
int pdma_gen_iter_next(struct pdma_gen *g, struct pdma_gen_iter *it, uint8_t *buf, size_t cap,
		       uint32_t *stream);
/* Stop deciding packets for the subset's streams: each still sends what its
 * queue holds (a duplicate's second copy, the held packet of a swap), then
 * ends; the next calls return those, then 0. */
void pdma_gen_iter_finish(struct pdma_gen *g, struct pdma_gen_iter *it);
const struct pdma_gen_config *pdma_gen_get_config(const struct pdma_gen *g);

/* send.c: sendmmsg all nb messages on fd (retrying what the kernel
 * refuses for a while; a datagram nobody receives is gone, as on a
 * network); 0 or -errno. The monotonic clock in seconds, and a sleep until
 * `sent` datagrams are due at `rate` per second from t0 (0: unpaced). */
int pdma_gen_flush(int fd, struct mmsghdr *msg, uint32_t nb);
double pdma_gen_now(void);
void pdma_gen_pace(double t0, uint64_t sent, double rate);

/* pcap.c: the file header, and one Ethernet/IPv4/UDP record of a datagram
 * (addresses in network order) at t_us microseconds. */
void pdma_gen_pcap_header(FILE *f);
/* One record of a whole frame: hlen header bytes, then len bytes of pkt. */
int pdma_gen_pcap_frame(FILE *f, const uint8_t *hdr, uint32_t hlen, const uint8_t *pkt, uint32_t len,
			uint64_t t_us);
int pdma_gen_pcap_record(FILE *f, const uint8_t *pkt, uint32_t len, uint32_t src, uint32_t dst,
			 uint16_t sport, uint16_t dport, uint64_t t_us);

/* eth_send.c: gen --eth's senders share one loop. Frames per batch; the
 * slot (a frame's room in a batch buffer) for the largest frame, a multiple
 * of align (a power of two). */
#define PDMA_GEN_ETH_BATCH 64u
struct pdma_gen_eth;
uint32_t pdma_gen_eth_slot(const struct pdma_gen *g, uint32_t align);
/* A batch's sink: n frames, frame i at buf + i * slot, len[i] bytes. */
typedef int (*pdma_gen_eth_flush_fn)(void *arg, uint8_t *buf, uint32_t slot, const uint32_t *len,
				     uint32_t n);
/* Every frame of e in order into buf's PDMA_GEN_ETH_BATCH slots, padded with
 * zeros to min_len, recorded in o->pcap, flushed a batch at a time (flush
 * NULL: nothing sent), paced by o->rate_pps, until the end or *o->stop. */
int pdma_gen_eth_batches(struct pdma_gen *g, const struct pdma_gen_send_opts *o, struct pdma_gen_eth *e,
			 uint8_t *buf, uint32_t slot, uint32_t min_len, pdma_gen_eth_flush_fn flush,
			 void *arg);

#endif /* PDMA_INGEST_GEN_GEN_INT_H */
