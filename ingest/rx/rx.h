/* SPDX-License-Identifier: MIT */
/*
 * The receive paths: how datagrams get from a UDP socket into the slots of a
 * receive ring (rx/ring.h). Every path fills slots in the deframer's input
 * format (pdma_slot_finish, deframe/deframe.h) and publishes them in arrival
 * order, so the consumer cannot tell the paths apart:
 *   socket.c    the bound UDP socket all paths read (SO_REUSEPORT, drop counter)
 *   recvmmsg.c  recvmmsg batches straight into ring slots (the default)
 *   io_uring.c  one multishot recvmsg into the ring's free slots
 *   gro.c       recvmmsg of UDP GRO buffers, each split into one slot per
 *               datagram
 *   xdp.c       AF_XDP: an XDP program hands the session's frames to an XDP
 *               socket, whose datagrams are copied into slots; no skb, no
 *               receive system call per datagram
 *   sim_dma.c   the "direct" path's last hop: the ring lives in simulated GPU
 *               memory and a simulated DMA device writes each slot by key
 * Thread safety: one receive thread per socket and ring.
 */
#ifndef PDMA_INGEST_RX_RX_H
#define PDMA_INGEST_RX_RX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "rx/ring.h"

struct pdma_domain;
struct pdma_sim;

/* One receive thread's counters (written by it, read by any thread). */
struct pdma_rx_stats {
	atomic_uint_fast64_t datagrams, bytes, truncated;
	atomic_uint_fast64_t socket_drops; /* the kernel's count for the socket so far */
	atomic_uint_fast64_t buffers;      /* gro.c: receive buffers (coalesced or not) */
	atomic_uint_fast64_t xdp_invalid;  /* xdp.c: frames redirected to us that carry no
					    * datagram of ours (checksum, lengths) */
	atomic_uint_fast64_t xdp_stack;    /* xdp.c: datagrams that came through the UDP
					    * socket instead (not redirected) */
};

/*
 * The stop rule every receive loop follows. After a stop request the loop
 * goes on receiving what has already arrived, until its source has been quiet
 * for one receive timeout (20 ms), so a session that ends after its traffic
 * counts every datagram, received or dropped. It does so for
 * PDMA_RX_DRAIN_NS at most. A source that never pauses, a live radio, must
 * not hold the stop up: before this bound, `peerdma ingest --duration` or
 * Ctrl-C never ended a session whose traffic went on. What arrives after the
 * bound stays in the socket and goes with it.
 * quiet: the last receive found nothing. *since: 0 before the first call;
 * the loop's own. Cost while no stop is requested: one load (a plain
 * load on x86).
 */
#define PDMA_RX_DRAIN_NS 500000000ull
static inline bool pdma_rx_stop_now(const atomic_bool *stop, bool quiet, uint64_t *since)
{
	struct timespec ts;
	uint64_t now;

	/* acquire: what the stopping thread wrote before the stop is seen */
	if (!atomic_load_explicit(stop, memory_order_acquire))
		return false;
	if (quiet)
		return true;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (!*since)
		*since = now;
	return now - *since >= PDMA_RX_DRAIN_NS;
}

/* ---- socket.c ---- */
/* A UDP socket bound to bind_addr (NULL: 127.0.0.1) and port (0: ephemeral),
 * shareable with SO_REUSEPORT, reporting kernel drops, with an rcvbuf-byte
 * receive buffer and a 20 ms receive timeout (so a stop request is seen). */
int pdma_rx_socket_open(const char *bind_addr, uint16_t port, int rcvbuf, int *fd);
/* The port the socket is bound to (0 if it cannot be read). */
uint16_t pdma_rx_socket_port(int fd);
/* The kernel's drop count for the socket now (SO_MEMINFO) into
 * st->socket_drops. A datagram's SO_RXQ_OVFL says what had been dropped
 * when it was queued: drops after the last queued datagram show only here. */
void pdma_rx_socket_drops(int fd, struct pdma_rx_stats *st);

/* ---- recvmmsg.c ---- */
#define PDMA_RX_MAX_BATCH 256
struct pdma_rx_sim_dma;
/* Receives batches of up to batch (<= PDMA_RX_MAX_BATCH) datagrams into ring r
 * until *stop is set and the socket's receive timeout passes (at most
 * PDMA_RX_DRAIN_NS after the stop: pdma_rx_stop_now). With dma, the
 * datagrams land in the device's buffer and the device writes them into r
 * (the direct path). 0 or a negative errno. */
int pdma_rx_recvmmsg_run(int fd, struct pdma_ring *r, uint32_t batch, struct pdma_rx_sim_dma *dma,
			 const atomic_bool *stop, struct pdma_rx_stats *st);
/* One batch of the above (flags: 0, waiting up to the socket's receive
 * timeout, or MSG_DONTWAIT), *seq the slots' next rx_seq: the datagrams
 * received and published (a full ring: 1, dropped and counted), 0 when none
 * came, or a negative errno. */
int pdma_rx_recvmmsg_batch(int fd, struct pdma_ring *r, uint32_t batch, struct pdma_rx_sim_dma *dma,
			   int flags, uint32_t *seq, struct pdma_rx_stats *st);

/* ---- gro.c ----
 * UDP GRO receive (UDP_GRO): coalesced buffers, each split into one ring
 * slot per datagram (recvmmsg batches through bounce buffers, or, once the
 * datagram size is known, recvmsg straight into the slots). Same stop rule
 * and counters as
 * pdma_rx_recvmmsg_run; a full ring counts one overrun per datagram it
 * drops. -EOPNOTSUPP where the kernel lacks UDP_GRO (before Linux 5.0). */
int pdma_rx_gro_run(int fd, struct pdma_ring *r, uint32_t batch, const atomic_bool *stop,
		    struct pdma_rx_stats *st);
/* Sets UDP_GRO on the socket: 0, -EOPNOTSUPP or another negative errno. */
int pdma_rx_gro_enable(int fd);
/* What one split did, per datagram. */
struct pdma_rx_gro_counts {
	uint64_t datagrams, bytes, truncated; /* put into slots */
	uint64_t overruns;                    /* dropped: the ring was full */
};
/* Splits one received buffer (len bytes at buf; gso_size from its UDP_GRO
 * control message, 0 without one: a single datagram) into ring slots from
 * *head on, advancing *head (not published: the caller stores r->head) and
 * *seq (each slot's rx_seq). Datagrams that find the ring full are dropped
 * and counted in n->overruns; one longer than a slot holds keeps what fits
 * and is flagged truncated, as is the buffer's last datagram when trunc (the
 * message was cut: MSG_TRUNC). Adds to *n; returns the slots filled. */
uint32_t pdma_rx_gro_split(struct pdma_ring *r, uint64_t *head, const uint8_t *buf, uint32_t len,
			   uint32_t gso_size, bool trunc, uint32_t *seq, struct pdma_rx_gro_counts *n);

/* ---- io_uring.c ----
 * io_uring receive into ring r from socket fd, from the ring's head on: open
 * fails with -EOPNOTSUPP where io_uring is absent or disabled or lacks
 * provided-buffer rings (before Linux 5.19), as does pdma_ingest_open_config with
 * rx_io io_uring.
 * run() receives until *stop is set and the socket has been quiet for 20 ms
 * (what it holds is drained first, for PDMA_RX_DRAIN_NS at most:
 * pdma_rx_stop_now); 0 or a negative errno. */
struct pdma_rx_uring;
int pdma_rx_uring_open(struct pdma_rx_uring **u, int fd, struct pdma_ring *r);
int pdma_rx_uring_run(struct pdma_rx_uring *u, const atomic_bool *stop, struct pdma_rx_stats *st);
void pdma_rx_uring_close(struct pdma_rx_uring *u);

/* ---- sim_dma.c ----
 * Sets up the direct path for one receive thread: ring r (of about nslots
 * slots of slot_size bytes, in layout) in memory of the simulated GPU sim, registered
 * with dom, and the device's own buffer for batch datagrams. *d is set even
 * when a later step fails; close it after pdma_ring_fini(r), which closes the
 * ring's registration of that memory. */
int pdma_rx_sim_dma_open(struct pdma_rx_sim_dma **d, struct pdma_sim *sim, struct pdma_domain *dom,
			 uint32_t nslots, uint32_t slot_size, enum pdma_ring_layout layout, uint32_t batch,
			 struct pdma_ring *r);
/* The device's buffer for datagram i of a batch (one ring slot's size). */
uint8_t *pdma_rx_sim_dma_buf(struct pdma_rx_sim_dma *d, uint32_t i);
/* The device writes a finished slot (header and datagram) into ring slot idx
 * of r, by the ring's registration key. */
int pdma_rx_sim_dma_write(struct pdma_rx_sim_dma *d, const struct pdma_ring *r, uint64_t idx,
			  const uint8_t *slot);
void pdma_rx_sim_dma_close(struct pdma_rx_sim_dma *d);

/* ---- xdp.c ----
 * AF_XDP receive (xdp.c's opening comment has the whole story). One program per session on
 * one network device, then one XDP socket per receive thread on receive
 * queue 0, 1, ... Each needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW; open
 * says what is missing in msg. -EOPNOTSUPP where the build has no AF_XDP
 * support (libxdp, libbpf or clang's BPF target missing). */
struct pdma_rx_xdp;
struct pdma_rx_xsk;
struct pdma_rx_xdp_info {
	char dev[16];      /* the device the program is attached to */
	const char *mode;  /* "native" (the driver runs it) or "generic" (after the skb is built) */
	bool zerocopy;     /* the first socket's: the driver writes into UMEM itself */
	bool csum_trusted; /* UDP checksums not checked: a loopback or veth device, whose
			    * local senders leave them to an offload that never runs */
	uint32_t chunk;    /* UMEM frame bytes */
};
/* dev: NULL for the device that holds bind_addr (not the wildcard). */
int pdma_rx_xdp_open(struct pdma_rx_xdp **x, const char *dev, const char *bind_addr, uint16_t port,
		     uint32_t slot_size, char *msg, size_t msglen);
int pdma_rx_xsk_open(struct pdma_rx_xsk **s, struct pdma_rx_xdp *x, uint32_t queue, char *msg,
		     size_t msglen);
/* Frames from the XDP socket into slots of r, and datagrams the program did
 * not redirect from the UDP socket fd, until *stop is set and both have been
 * quiet for 20 ms (PDMA_RX_DRAIN_NS at most: pdma_rx_stop_now). 0 or a
 * negative errno. */
int pdma_rx_xsk_run(struct pdma_rx_xsk *s, int fd, struct pdma_ring *r, uint32_t batch,
		    const atomic_bool *stop, struct pdma_rx_stats *st);
void pdma_rx_xdp_info(const struct pdma_rx_xdp *x, struct pdma_rx_xdp_info *i);
void pdma_rx_xsk_close(struct pdma_rx_xsk *s);
/* Detaches the program; after every socket on it is closed. */
void pdma_rx_xdp_close(struct pdma_rx_xdp *x);

#endif /* PDMA_INGEST_RX_RX_H */
