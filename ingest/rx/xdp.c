// SPDX-License-Identifier: MIT
/*
 * AF_XDP receive (`peerdma ingest --rx xdp`): the session's datagrams leave
 * the kernel before an skb is built (native XDP) or right after (generic
 * XDP), so the receive thread pays no per-datagram system call, socket
 * queueing or skb free: the per-skb cost that bounds recvmmsg, io_uring and
 * an uncoalesced GRO socket at about 1.1 Mpps a core
 * (bench/results/socket-path.md).
 *
 * Where a datagram lives and dies:
 *  1. pdma_rx_xdp_open loads xdp_redirect.bpf.c (compiled in, with the
 *     session's port and address set in its read-only data) and attaches it
 *     to the device with a BPF link, which dies with the process: a crash
 *     leaves no program behind;
 *  2. pdma_rx_xsk_open, per receive thread: a UMEM (NFRAMES frames of CHUNK
 *     bytes, host memory the kernel pins), its fill ring loaded with every
 *     frame, an XDP socket bound to receive queue q, entered in the
 *     program's XSKMAP at q;
 *  3. the program redirects a matching frame to the socket of its queue; the
 *     kernel (copy mode) or the driver (zero-copy) writes it into a frame
 *     from the fill ring and posts (address, length) on the RX ring;
 *  4. pdma_rx_xsk_run takes a batch off the RX ring, checks each frame's
 *     Ethernet/IPv4/UDP headers with the deframers' own parser
 *     (deframe/frame.h), copies the datagram into a ring slot in the format
 *     every receive path writes, gives the frames straight back to the fill
 *     ring and publishes the slots;
 *  5. what the program passed on (fragments, frames longer than a UMEM
 *     frame, queues without a socket of ours) reaches the session's UDP
 *     socket, which the same thread drains with recvmmsg whenever the RX
 *     ring has run dry: nothing is lost by taking the XDP route, but the two
 *     ways are not ordered with each other (a stream whose datagrams take
 *     both sees them reordered, and the accounting says so).
 *
 * Accounting, per datagram as on every path: datagrams, bytes, truncated
 * (longer than a slot), ring overruns (a full ring: the frame is returned
 * unread); socket_drops adds the XDP socket's drops (no free frame, RX ring
 * full: XDP_STATISTICS) to the UDP socket's; frames that reached us but
 * carry no datagram (a bad checksum or length) count in xdp_invalid,
 * datagrams taken from the UDP socket in xdp_stack.
 *
 * Checksums: the IPv4 header's is always checked. XDP tells nothing of the
 * UDP checksum's state, and on a loopback or veth device a local sender's
 * stack leaves it to an offload that never runs (CHECKSUM_PARTIAL): there,
 * as the kernel's own receive path does, it is not checked; on any other
 * device it is, when nonzero.
 *
 * Why a copy into the slot rather than slots as UMEM frames: the deframers
 * read one slot format (deframe/deframe.h) on every path, GPU ones included,
 * and a copy from a frame the kernel just wrote (in cache) costs ~0.1 us of
 * the thread's time at 1500 bytes. Zero-copy into GPU memory is not AF_XDP's
 * to give: a UMEM is host memory the kernel pins with pin_user_pages; that
 * is what --path nic (a driver of our own, drivers/e1000/) is for.
 *
 * Thread safety: one thread runs a socket; open and close from the
 * controlling thread while none runs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "deframe/deframe.h"
#include "deframe/frame.h"
#include "rx/rx.h"

#ifdef PDMA_HAVE_XDP
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/xsk.h>

#include "rx/xdp_prog.h"

/* xdp_redirect.bpf.o, compiled in (the build's xdp_prog_obj.c). */
extern const unsigned char pdma_xdp_prog_obj[];
extern const size_t pdma_xdp_prog_obj_len;

/*
 * UMEM frames per socket, and the RX ring's entries. The RX ring is the
 * socket's buffer: 4096 frames hold 1.6 ms at 2.5 Mpps for a receive thread
 * that was preempted (the UDP path's 32 MiB receive buffer holds about
 * 14,000 skbs of 1500-byte datagrams). Every frame not on the RX ring or in
 * the thread's hands is on the fill ring, so the kernel never waits for one:
 * the fill ring holds them all.
 */
#define NFRAMES 8192u
#define RX_RING 4096u
#define COMP_RING 64u /* completions of transmits: none are made */

struct pdma_rx_xdp {
	struct bpf_object *obj;
	struct bpf_link *link;
	int map_fd; /* the XSKMAP's (the object owns it) */
	char dev[IF_NAMESIZE];
	uint32_t chunk;
	uint16_t port; /* host order */
	bool csum_trusted;
	bool zerocopy;
	const char *mode;
};

struct pdma_rx_xsk {
	struct pdma_rx_xdp *x;
	void *area;
	size_t area_bytes;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xsk_ring_prod fq;
	struct xsk_ring_cons cq;
	struct xsk_ring_cons rx;
};

/* The device that holds IPv4 address addr. */
static int dev_of_addr(const char *addr, char *dev, char *msg, size_t msglen)
{
	struct in_addr a;
	struct ifaddrs *ifs, *i;
	int ret = -ENODEV;

	if (inet_pton(AF_INET, addr, &a) != 1) {
		snprintf(msg, msglen, "--rx xdp: '%s' is not an IPv4 address", addr);
		return -EINVAL;
	}
	if (a.s_addr == htonl(INADDR_ANY)) {
		snprintf(msg, msglen, "--rx xdp: bound to every address (%s): name the device (--xdp-dev)", addr);
		return -EINVAL;
	}
	if (getifaddrs(&ifs) < 0)
		return -errno;
	for (i = ifs; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == a.s_addr) {
			snprintf(dev, IF_NAMESIZE, "%s", i->ifa_name);
			ret = 0;
			break;
		}
	freeifaddrs(ifs);
	if (ret)
		snprintf(msg, msglen, "--rx xdp: no device holds %s (--xdp-dev names one)", addr);
	return ret;
}

/* Loopback, or a veth (its driver's name): a local sender's UDP checksum is
 * left to an offload that never runs. */
static bool csum_left_partial(const char *dev)
{
	struct ethtool_drvinfo di = { .cmd = ETHTOOL_GDRVINFO };
	struct ifreq ifr;
	bool local = false;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return false;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", dev);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_LOOPBACK))
		local = true;
	ifr.ifr_data = (void *)&di;
	if (!local && ioctl(fd, SIOCETHTOOL, &ifr) == 0 && !strcmp(di.driver, "veth"))
		local = true;
	close(fd);
	return local;
}

static int no_libbpf_output(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

/* The errno of a step that needs privileges, said in words. */
static void say(char *msg, size_t msglen, const char *what, const char *dev, int err)
{
	snprintf(msg, msglen, "--rx xdp: %s on %s: %s%s", what, dev, strerror(err),
		 err == EPERM || err == EACCES ? " (needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW: root)" :
		 err == EBUSY || err == EEXIST ? " (another XDP program is attached to the device)" :
		 err == ERANGE ? " (the MTU is larger than XDP on this driver allows: a veth's, about 3500)" : "");
}

int pdma_rx_xdp_open(struct pdma_rx_xdp **out, const char *dev, const char *bind_addr, uint16_t port,
		     uint32_t slot_size, char *msg, size_t msglen)
{
	struct pdma_rx_xdp *x;
	struct pdma_xdp_cfg cfg = { .port = htons(port) };
	struct bpf_program *prog;
	struct bpf_map *rodata, *map;
	LIBBPF_OPTS(bpf_xdp_query_opts, q);
	struct in_addr a;
	int ifindex, ret;

	*out = NULL;
	if (!port || slot_size <= PDMA_SLOT_HDR_TINY)
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->port = port;
	ret = dev ? 0 : dev_of_addr(bind_addr ? bind_addr : "127.0.0.1", x->dev, msg, msglen);
	if (ret)
		goto err;
	if (dev)
		snprintf(x->dev, sizeof(x->dev), "%s", dev);
	ifindex = (int)if_nametoindex(x->dev);
	if (!ifindex) {
		ret = -errno;
		snprintf(msg, msglen, "--rx xdp: no network device '%s'", x->dev);
		goto err;
	}
	x->csum_trusted = csum_left_partial(x->dev);
	/* A frame, headers and a slot's worth of datagram, must fit after the
	 * kernel's XDP headroom (256 bytes): 2048-byte frames where a slot
	 * holds at most 1746 bytes (a 1500-byte MTU's datagrams), 4096 where it
	 * holds more (any slot layout: the tiny one's room). Longer frames go
	 * to the stack (the program's max_len). */
	x->chunk = slot_size - PDMA_SLOT_HDR_TINY + PDMA_FRM_ETH + PDMA_FRM_VLAN + 28u + XDP_PACKET_HEADROOM <= 2048u
			   ? 2048u : 4096u;
	cfg.max_len = x->chunk - XDP_PACKET_HEADROOM;
	if (bind_addr && inet_pton(AF_INET, bind_addr, &a) == 1)
		cfg.daddr = a.s_addr;

	/* libbpf prints to stderr by default; its failures come back as
	 * errno values, said below in one line. (Its print function is the
	 * process's: another thread's libbpf output is silent meanwhile.) */
	libbpf_print_fn_t old = libbpf_set_print(no_libbpf_output);
	x->obj = bpf_object__open_mem(pdma_xdp_prog_obj, pdma_xdp_prog_obj_len, NULL);
	ret = x->obj ? 0 : -errno;
	rodata = x->obj ? bpf_object__find_map_by_name(x->obj, ".rodata") : NULL;
	map = x->obj ? bpf_object__find_map_by_name(x->obj, PDMA_XDP_MAP) : NULL;
	prog = x->obj ? bpf_object__find_program_by_name(x->obj, PDMA_XDP_PROG) : NULL;
	if (!ret && (!rodata || !map || !prog || bpf_map__value_size(rodata) != sizeof(cfg)))
		ret = -ENOEXEC; /* not the object this file was built with */
	if (!ret)
		ret = bpf_map__set_initial_value(rodata, &cfg, sizeof(cfg));
	if (!ret)
		ret = bpf_object__load(x->obj);
	if (ret) {
		libbpf_set_print(old);
		say(msg, msglen, "loading the XDP program", x->dev, -ret);
		goto err;
	}
	x->map_fd = bpf_map__fd(map);
	x->link = bpf_program__attach_xdp(prog, ifindex);
	ret = x->link ? 0 : -errno;
	libbpf_set_print(old);
	if (ret) {
		say(msg, msglen, "attaching the XDP program", x->dev, -ret);
		goto err;
	}
	x->mode = "generic";
	if (bpf_xdp_query(ifindex, 0, &q) == 0 && q.attach_mode == XDP_ATTACHED_DRV)
		x->mode = "native";
	*out = x;
	return 0;
err:
	pdma_rx_xdp_close(x);
	return ret;
}

void pdma_rx_xdp_info(const struct pdma_rx_xdp *x, struct pdma_rx_xdp_info *i)
{
	memset(i, 0, sizeof(*i));
	snprintf(i->dev, sizeof(i->dev), "%s", x->dev);
	i->mode = x->mode;
	i->zerocopy = x->zerocopy;
	i->csum_trusted = x->csum_trusted;
	i->chunk = x->chunk;
}

void pdma_rx_xdp_close(struct pdma_rx_xdp *x)
{
	if (!x)
		return;
	bpf_link__destroy(x->link);
	bpf_object__close(x->obj);
	free(x);
}

int pdma_rx_xsk_open(struct pdma_rx_xsk **out, struct pdma_rx_xdp *x, uint32_t queue, char *msg,
		     size_t msglen)
{
	const struct xsk_umem_config uc = { .fill_size = NFRAMES, .comp_size = COMP_RING,
					    .frame_size = x->chunk, .frame_headroom = 0 };
	const struct xsk_socket_config sc = { .rx_size = RX_RING,
					      .libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
					      .bind_flags = XDP_USE_NEED_WAKEUP };
	struct xdp_options opts;
	socklen_t ol = sizeof(opts);
	struct pdma_rx_xsk *s;
	uint32_t idx;
	int ret;

	*out = NULL;
	if (queue >= PDMA_XDP_MAX_QUEUES)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->x = x;
	s->area_bytes = (size_t)NFRAMES * x->chunk;
	s->area = mmap(NULL, s->area_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		       -1, 0);
	if (s->area == MAP_FAILED) {
		s->area = NULL;
		ret = -ENOMEM;
		snprintf(msg, msglen, "--rx xdp: UMEM of %zu bytes: %s", s->area_bytes, strerror(ENOMEM));
		goto err;
	}
	ret = xsk_umem__create(&s->umem, s->area, s->area_bytes, &s->fq, &s->cq, &uc);
	if (ret) {
		say(msg, msglen, "registering the UMEM", x->dev, -ret);
		goto err;
	}
	ret = xsk_socket__create(&s->xsk, x->dev, queue, s->umem, &s->rx, NULL, &sc);
	if (ret) {
		char what[48];
		snprintf(what, sizeof(what), "an XDP socket on receive queue %u", queue);
		say(msg, msglen, what, x->dev, -ret);
		if (ret == -EINVAL)
			snprintf(msg + strlen(msg), msglen - strlen(msg),
				 " (a queue past the device's receive queues? --threads at most their number)");
		goto err;
	}
	if (xsk_ring_prod__reserve(&s->fq, NFRAMES, &idx) != NFRAMES) {
		ret = -ENOSPC;
		goto err;
	}
	for (uint32_t i = 0; i < NFRAMES; i++)
		*xsk_ring_prod__fill_addr(&s->fq, idx + i) = (uint64_t)i * x->chunk;
	xsk_ring_prod__submit(&s->fq, NFRAMES);
	ret = xsk_socket__update_xskmap(s->xsk, x->map_fd);
	if (ret) {
		say(msg, msglen, "entering the XDP socket in the program's map", x->dev, -ret);
		goto err;
	}
	if (queue == 0 && getsockopt(xsk_socket__fd(s->xsk), SOL_XDP, XDP_OPTIONS, &opts, &ol) == 0)
		x->zerocopy = opts.flags & XDP_OPTIONS_ZEROCOPY;
	*out = s;
	return 0;
err:
	pdma_rx_xsk_close(s);
	return ret;
}

void pdma_rx_xsk_close(struct pdma_rx_xsk *s)
{
	if (!s)
		return;
	/* Closing the socket takes it out of the XSKMAP: the program passes
	 * its queue's frames to the stack from then on. */
	xsk_socket__delete(s->xsk);
	xsk_umem__delete(s->umem);
	if (s->area)
		munmap(s->area, s->area_bytes);
	free(s);
}

/* The XDP socket's drops so far: no free frame (rx_dropped), RX ring full. */
static uint64_t xsk_drops(struct pdma_rx_xsk *s)
{
	struct xdp_statistics xs;
	socklen_t l = sizeof(xs);

	if (getsockopt(xsk_socket__fd(s->xsk), SOL_XDP, XDP_STATISTICS, &xs, &l) < 0)
		return 0;
	return xs.rx_dropped + xs.rx_ring_full;
}

/*
 * One batch off the RX ring into slots from r's head on; the frames go back
 * to the fill ring. Returns the frames taken (0: none waited).
 */
static uint32_t xsk_batch(struct pdma_rx_xsk *s, struct pdma_ring *r, uint32_t batch, uint32_t *seq,
			  struct pdma_rx_stats *st)
{
	const struct pdma_frm_cfg fc = { .max_len = s->x->chunk, .port = s->x->port };
	const uint32_t flags = s->x->csum_trusted ? PDMA_NIC_CQE_L4CS : 0;
	const uint32_t cap = pdma_ring_room(r);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint32_t space = r->nslots - (uint32_t)(head - tail), filled = 0, idx, fidx = 0, n;
	uint64_t bytes = 0, trunc = 0, invalid = 0, overruns = 0;

	n = xsk_ring_cons__peek(&s->rx, batch, &idx);
	if (!n)
		return 0;
	/* The fill ring holds every frame, so it has room for these; should it
	 * not, they wait on the RX ring for the next call. */
	if (xsk_ring_prod__reserve(&s->fq, n, &fidx) != n) {
		xsk_ring_cons__cancel(&s->rx, n);
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct xdp_desc *d = xsk_ring_cons__rx_desc(&s->rx, idx + i);
		const uint8_t *f = xsk_umem__get_data(s->area, d->addr);
		uint32_t off, len;

		if (pdma_frm_parse(&fc, f, d->len, flags, &off, &len)) {
			invalid++;
		} else if (filled == space) {
			overruns++;
		} else {
			uint8_t *slot = pdma_ring_slot(r, head + filled++);
			uint32_t l = len < cap ? len : cap;

			memcpy(slot + r->dgram_off, f + off, l);
			pdma_slot_finish(slot, r->dgram_off, l, len > cap, (*seq)++);
			trunc += len > cap;
			bytes += l;
		}
		/* aligned mode: the frame's start, whatever its headroom */
		*xsk_ring_prod__fill_addr(&s->fq, fidx + i) = d->addr & ~(uint64_t)(s->x->chunk - 1);
	}
	xsk_ring_cons__release(&s->rx, n);
	xsk_ring_prod__submit(&s->fq, n);
	if (xsk_ring_prod__needs_wakeup(&s->fq))
		recvfrom(xsk_socket__fd(s->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
	if (filled) {
		atomic_fetch_add_explicit(&st->datagrams, filled, memory_order_relaxed);
		atomic_fetch_add_explicit(&st->bytes, bytes, memory_order_relaxed);
		/* Publish: the slots' contents happen-before the consumer's acquire. */
		atomic_store_explicit(&r->head, head + filled, memory_order_release);
	}
	if (trunc)
		atomic_fetch_add_explicit(&st->truncated, trunc, memory_order_relaxed);
	if (invalid)
		atomic_fetch_add_explicit(&st->xdp_invalid, invalid, memory_order_relaxed);
	if (overruns)
		atomic_fetch_add_explicit(&r->overruns, overruns, memory_order_relaxed);
	return n;
}

/* socket_drops: the XDP socket's and the UDP socket's, both since open. */
static void drops(struct pdma_rx_xsk *s, int fd, struct pdma_rx_stats *st)
{
	pdma_rx_socket_drops(fd, st);
	atomic_fetch_add_explicit(&st->socket_drops, xsk_drops(s), memory_order_relaxed);
}

int pdma_rx_xsk_run(struct pdma_rx_xsk *s, int fd, struct pdma_ring *r, uint32_t batch,
		    const atomic_bool *stop, struct pdma_rx_stats *st)
{
	struct pollfd p[2] = { { .fd = xsk_socket__fd(s->xsk), .events = POLLIN },
			       { .fd = fd, .events = POLLIN } };
	uint32_t seq = 0;
	uint64_t since = 0;

	if (!batch || batch > PDMA_RX_MAX_BATCH)
		return -EINVAL;
	for (;;) {
		if (xsk_batch(s, r, batch, &seq, st)) {
			if (pdma_rx_stop_now(stop, false, &since))
				break;
			continue;
		}
		/* The RX ring is empty: sleep until either socket has
		 * something, or 20 ms (the UDP paths' receive timeout) to look
		 * at stop. The UDP socket, which gets only what the program
		 * passed on, is read when poll says so: no system call of its
		 * own per empty ring. */
		int e = poll(p, 2, 20);
		if (e < 0 && errno != EINTR)
			return -errno;
		if (e > 0 && (p[1].revents & POLLIN)) {
			uint64_t d0 = atomic_load_explicit(&st->datagrams, memory_order_relaxed);
			int got = pdma_rx_recvmmsg_batch(fd, r, batch, NULL, MSG_DONTWAIT, &seq, st);
			if (got < 0)
				return got;
			atomic_fetch_add_explicit(&st->xdp_stack,
						  atomic_load_explicit(&st->datagrams, memory_order_relaxed) - d0,
						  memory_order_relaxed);
		}
		if (pdma_rx_stop_now(stop, e == 0, &since))
			break;
	}
	drops(s, fd, st);
	return 0;
}

#else /* !PDMA_HAVE_XDP */

int pdma_rx_xdp_open(struct pdma_rx_xdp **out, const char *dev, const char *bind_addr, uint16_t port,
		     uint32_t slot_size, char *msg, size_t msglen)
{
	*out = NULL;
	snprintf(msg, msglen, "--rx xdp: this build has no AF_XDP support (it needs libxdp-dev, "
		 "libbpf-dev and clang at build time)");
	return -EOPNOTSUPP;
}

int pdma_rx_xsk_open(struct pdma_rx_xsk **out, struct pdma_rx_xdp *x, uint32_t queue, char *msg,
		     size_t msglen)
{
	*out = NULL;
	return -EOPNOTSUPP;
}

int pdma_rx_xsk_run(struct pdma_rx_xsk *s, int fd, struct pdma_ring *r, uint32_t batch,
		    const atomic_bool *stop, struct pdma_rx_stats *st)
{
	return -EOPNOTSUPP;
}

void pdma_rx_xdp_info(const struct pdma_rx_xdp *x, struct pdma_rx_xdp_info *i)
{
	memset(i, 0, sizeof(*i));
}

void pdma_rx_xsk_close(struct pdma_rx_xsk *s)
{
}

void pdma_rx_xdp_close(struct pdma_rx_xdp *x)
{
}

#endif /* PDMA_HAVE_XDP */
