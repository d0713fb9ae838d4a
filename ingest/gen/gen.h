/* SPDX-License-Identifier: MIT */
/*
 * The VITA-49 generator: DIFI-style data packets with deterministic injected
 * loss, reordering and duplication, counted per stream so a receiver's
 * accounting can be checked against it exactly; sent over UDP or written as a
 * pcap. Independent of the receive side (only the packet format is shared,
 * include/peerdma/vrt.h).
 *
 * Thread safety: one generator is driven by one thread, except inside
 * pdma_gen_send, which runs its own sender threads.
 */
#ifndef PDMA_INGEST_GEN_GEN_H
#define PDMA_INGEST_GEN_GEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

/* The largest packet_size: the UDP payload over IPv4 (65535 - 20 IPv4 - 8 UDP
 * header bytes = 65507) in whole 32-bit words. The VRT size field allows
 * 65535 words, but such a datagram cannot be sent. */
#define PDMA_GEN_MAX_PACKET 65504u
/* The most data packets per stream: sample counts (packets x samples per
 * packet, < 2^14, plus ts_start x sample_rate) stay below 2^64. */
#define PDMA_GEN_MAX_PACKETS (1ull << 48)

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
/* End every stream early (a stop): pdma_gen_next returns what the streams'
 * events in progress still owe (a duplicate's second copy, the held packet of
 * a swap), then 0. A loss is decided together with the packet after it, so
 * every event counted is one a receiver sees, and its accounting of what was
 * sent still equals the counts exactly. */
void pdma_gen_finish(struct pdma_gen *g);
/* Did every stream decide all of its configured packets? False once a stop
 * (pdma_gen_finish, a sender's stop flag) has cut one short: a stop that
 * came after the last packet had been decided cut nothing. */
bool pdma_gen_complete(const struct pdma_gen *g);
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
	atomic_bool *stop;    /* optional: once set, the streams end as after
			       * pdma_gen_finish, each sender on its own streams */
	uint32_t threads;     /* sender threads (0 = 1, at most one per stream; 1 with
			       * pcap): thread t owns streams t, t + T, ... and their
			       * sockets and sends its share of rate_pps. What each
			       * stream sends and injects does not depend on T. */
	uint32_t batch;       /* datagrams per sendmmsg at most (0: 64); 1 sends them one
			       * at a time */
	bool gso;             /* UDP GSO (UDP_SEGMENT, Linux 4.18): a batch's datagrams
			       * go down the stack as buffers of up to 64 that the kernel
			       * segments late (or a GRO receiver takes whole); off: each
			       * datagram its own skb, as devices on a wire send them.
			       * The datagrams and their order do not change; each must
			       * fit the route's MTU (the kernel refuses the buffer,
			       * EINVAL, where it does not). */
	/* optional (benchmarks: bench_ingest's delivery latency): called by a
	 * sender thread just before a batch's first sendmmsg (after false)
	 * and just after its last (after true), with its datagrams and the
	 * CLOCK_MONOTONIC time (pdma_gen_now); from several threads at once
	 * when threads > 1 */
	void (*on_send)(void *arg, const struct iovec *iov, uint32_t n, double t, bool after);
	void *on_send_arg;
};
int pdma_gen_send(struct pdma_gen *g, const struct pdma_gen_send_opts *o);
/* Ethernet frames instead of datagrams (gen/eth.h: e's addresses and
 * malformed-frame schedule, its counts updated): each frame the payload of
 * one UDP datagram to host:port (QEMU's dgram netdev), one socket, in
 * pdma_gen_next's order, paced by rate_pps; pcap (optional) gets the frames
 * themselves; port 0: only the pcap, nothing sent. threads is ignored (one
 * sender). */
struct pdma_gen_eth;
int pdma_gen_send_eth(struct pdma_gen *g, const struct pdma_gen_send_opts *o, struct pdma_gen_eth *e);
/* The same frames transmitted by a NIC from GPU memory (gen/nic_send.c):
 * dev the NIC (drivers/e1000/), kernel_device peerdma.ko's (NULL:
 * /dev/peerdma), cuda_device the GPU that holds the frames; frames shorter
 * than 60 bytes are padded with zeros, as a MAC pads them (pcap: as sent).
 * host and port are not used. A negative errno with a line in msg. */
struct pdma_gen_nic {
	const char *dev;
	const char *kernel_device;
	int cuda_device;
};
int pdma_gen_send_nic(struct pdma_gen *g, const struct pdma_gen_send_opts *o, struct pdma_gen_eth *e,
		      const struct pdma_gen_nic *nc, char *msg, size_t msglen);
/* pcap only (no network); stop (optional) as in pdma_gen_send_opts. */
int pdma_gen_write_pcap(struct pdma_gen *g, FILE *f, const char *host, uint16_t port,
			const atomic_bool *stop);

#endif /* PDMA_INGEST_GEN_GEN_H */
