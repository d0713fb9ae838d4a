// SPDX-License-Identifier: MIT
/* The receive session: SO_REUSEPORT sockets, one receive thread and one ring
 * each (recvmmsg straight into ring slots, or io_uring: rx_uring.c), and one
 * deframer thread that consumes every ring and accounts per stream. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gpu.h"
#include "ingest.h"
#include "peerdma/mr.h"
#include "mem/sim.h"

#define RX_MAX_BATCH 256

struct rx_thread {
	struct pdma_ingest *ing;
	pthread_t th;
	int fd;
	struct pdma_ring ring;
	void *sim_mem;             /* direct path: ring in simulated GPU memory */
	uint8_t *bounce;           /* direct path: the NIC's own buffer */
	bool gpu_registered;
	double last_batch;         /* GPU paths: when the last batch ran */
	struct pdma_rx_stats st;
	struct pdma_rx_uring *uring; /* rx_io io_uring */
	double cpu_s;                /* the thread's CPU time (user + system), at its end */
	int err;
};

struct pdma_ingest {
	struct pdma_ingest_config c;
	uint16_t port;
	uint32_t nrx;
	struct rx_thread *rx;
	pthread_t dfr_th;
	struct pdma_dfr dfr;
	atomic_bool stop;
	atomic_int rx_live;
	atomic_bool dfr_done;
	bool started;
	FILE *progress;
	double t_start;
	/* GPU paths (host-staged, zero-copy): the module, a deframer on the
	 * device and the descriptors of one batch. */
	struct pdma_gpu_ops gops;
	void *gdl;
	struct pdma_gpu_dfr *gdfr;
	struct pdma_dfr_desc *gdesc;
	size_t chunk;           /* bytes per host-staged copy */
	int gpu_err;            /* first GPU failure (deframer thread) */
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

void pdma_ingest_config_default(struct pdma_ingest_config *c)
{
	memset(c, 0, sizeof(*c));
	c->port = 4991;
	c->bind_addr = "127.0.0.1";
	c->threads = 1;
	c->ring_slots = 8192;
	c->slot_size = 9216;
	c->batch = 64;
	c->rcvbuf = 32 << 20;
	c->path = PDMA_RX_CPU;
	pdma_dfr_config_default(&c->dfr);
}

static int open_socket(const struct pdma_ingest_config *c, uint16_t port, int *fdp)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, fd;

	if (inet_pton(AF_INET, c->bind_addr ? c->bind_addr : "127.0.0.1", &a.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	/* Kernel drop counter in every recvmsg: socket-level loss is counted,
	 * never silent. */
	setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
	/* As root, FORCE lifts the rmem_max cap; otherwise take what we get. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &c->rcvbuf, sizeof(c->rcvbuf)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &c->rcvbuf, sizeof(c->rcvbuf));
	/* A short timeout so receive threads notice a stop request. */
	struct timeval tv = { 0, 20000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	*fdp = fd;
	return 0;
}

int pdma_ingest_open(const struct pdma_ingest_config *c, struct pdma_ingest **out)
{
	struct pdma_ingest *ing;
	int ret;

	if (!c->threads || c->threads > 64 || !c->batch || c->batch > RX_MAX_BATCH ||
	    c->slot_size < 64 + PDMA_SLOT_HDR)
		return -EINVAL;
	if (c->path == PDMA_RX_DIRECT && (!c->domain || !c->sim))
		return -EINVAL;
	if (c->rx_io != PDMA_RX_IO_RECVMMSG && (c->rx_io != PDMA_RX_IO_URING || c->path == PDMA_RX_DIRECT))
		return -EINVAL;
	ing = calloc(1, sizeof(*ing));
	if (!ing)
		return -ENOMEM;
	ing->c = *c;
	ing->nrx = c->threads;
	ing->rx = calloc(c->threads, sizeof(*ing->rx));
	if (!ing->rx) {
		free(ing);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ing->nrx; i++)
		ing->rx[i].fd = -1;
	ret = pdma_dfr_init(&ing->dfr, &c->dfr);
	if (ret)
		goto err;
	if (c->path == PDMA_RX_HOST_STAGED || c->path == PDMA_RX_ZERO_COPY) {
		/* -ENODEV without a GPU, -ENOENT when the module was not built. */
		ret = pdma_gpu_load(&ing->gops, &ing->gdl);
		if (ret)
			goto err;
		ret = ing->gops.open(&c->dfr, 0, &ing->gdfr);
		if (ret)
			goto err;
		/* Default: the module's (graph launch unless PEERDMA_GPU_LAUNCH
		 * says otherwise) for zero-copy, stream launch for host-staged:
		 * there graph replay measured slower (bench_ingest (e), H100,
		 * small batches 0.8-1.06x: its host-to-device memcpy nodes),
		 * while zero-copy gained (1.0-1.2x; bench/ingest/NOTES.md). */
		enum pdma_ingest_launch l = c->gpu_launch;
		const char *env = getenv("PEERDMA_GPU_LAUNCH");
		if (l == PDMA_INGEST_LAUNCH_DEFAULT && c->path == PDMA_RX_HOST_STAGED && !(env && *env))
			l = PDMA_INGEST_LAUNCH_STREAM;
		if (l != PDMA_INGEST_LAUNCH_DEFAULT) {
			ret = ing->gops.set_launch(ing->gdfr, l == PDMA_INGEST_LAUNCH_GRAPH ? PDMA_GPU_LAUNCH_GRAPH
											    : PDMA_GPU_LAUNCH_STREAM);
			if (ret)
				goto err;
		}
		ing->chunk = c->gpu_chunk ? c->gpu_chunk : (4u << 20);
		ing->gdesc = calloc(c->ring_slots * 2u, sizeof(*ing->gdesc));
		if (!ing->gdesc) {
			ret = -ENOMEM;
			goto err;
		}
	}
	ing->port = c->port;
	for (uint32_t i = 0; i < ing->nrx; i++) {
		struct rx_thread *t = &ing->rx[i];
		t->ing = ing;
		ret = open_socket(c, ing->port, &t->fd);
		if (ret)
			goto err;
		if (ing->port == 0) {
			/* Ephemeral: the first socket picks, the others join it. */
			struct sockaddr_in a;
			socklen_t al = sizeof(a);
			getsockname(t->fd, (struct sockaddr *)&a, &al);
			ing->port = ntohs(a.sin_port);
		}
		if (c->path == PDMA_RX_DIRECT) {
			size_t bytes = (size_t)c->ring_slots * ((c->slot_size + 63u) & ~63u);
			ret = pdma_sim_alloc(c->sim, bytes, &t->sim_mem);
			if (ret)
				goto err;
			ret = pdma_ring_init_external(&t->ring, t->sim_mem, bytes, c->slot_size);
			if (!ret)
				ret = pdma_ring_register(&t->ring, c->domain, PDMA_HMEM_SIM);
			t->bounce = malloc((size_t)c->batch * t->ring.slot_size);
			if (!ret && !t->bounce)
				ret = -ENOMEM;
		} else {
			ret = pdma_ring_init(&t->ring, c->ring_slots, c->slot_size);
			if (!ret && c->domain)
				ret = pdma_ring_register(&t->ring, c->domain, PDMA_HMEM_SYSTEM);
			/* The GPU reads the ring (zero-copy) or its copy engine does
			 * (host-staged): pinned and mapped for the device too. */
			if (!ret && ing->gdfr) {
				ret = ing->gops.host_register(ing->gdfr, t->ring.base, t->ring.bytes);
				if (!ret)
					t->gpu_registered = true;
			}
		}
		if (!ret && c->rx_io == PDMA_RX_IO_URING)
			ret = pdma_rx_uring_open(&t->uring, t->fd, &t->ring);
		if (ret)
			goto err;
	}
	*out = ing;
	return 0;
err:
	pdma_ingest_close(ing);
	return ret;
}

uint16_t pdma_ingest_port(const struct pdma_ingest *ing)
{
	return ing->port;
}

void pdma_ingest_set_progress(struct pdma_ingest *ing, FILE *f)
{
	ing->progress = f;
}

static uint32_t cmsg_ovfl(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
			uint32_t v;
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			return v;
		}
	return 0;
}

static void *rx_main(void *arg)
{
	struct rx_thread *t = arg;
	struct pdma_ingest *ing = t->ing;
	struct pdma_ring *r = &t->ring;
	bool direct = ing->c.path == PDMA_RX_DIRECT;
	uint64_t key = direct ? pdma_mr_key(r->mr) : 0;
	uint32_t batch = ing->c.batch;
	struct mmsghdr msg[RX_MAX_BATCH];
	struct iovec iov[RX_MAX_BATCH];
	char ctl[RX_MAX_BATCH][CMSG_SPACE(sizeof(uint32_t))];
	uint64_t seq = 0;

	if (t->uring) {
		t->err = pdma_rx_uring_run(t->uring, &ing->stop, &t->st);
		goto out;
	}
	for (;;) {
		uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
		uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
		uint32_t space = r->nslots - (uint32_t)(head - tail);
		uint32_t n = space < batch ? space : batch;
		bool full = n == 0;

		if (full)
			n = 1; /* into scratch: the datagram is dropped and counted */
		for (uint32_t i = 0; i < n; i++) {
			uint8_t *slot = full ? r->scratch
				      : direct ? t->bounce + (size_t)i * r->slot_size
					       : pdma_ring_slot(r, head + i);
			iov[i].iov_base = slot + PDMA_SLOT_HDR;
			iov[i].iov_len = r->slot_size - PDMA_SLOT_HDR;
			memset(&msg[i].msg_hdr, 0, sizeof(msg[i].msg_hdr));
			msg[i].msg_hdr.msg_iov = &iov[i];
			msg[i].msg_hdr.msg_iovlen = 1;
			msg[i].msg_hdr.msg_control = ctl[i];
			msg[i].msg_hdr.msg_controllen = sizeof(ctl[i]);
		}
		int got = recvmmsg(t->fd, msg, n, MSG_WAITFORONE, NULL);
		if (got < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
				if (atomic_load(&ing->stop))
					break;
				continue;
			}
			t->err = -errno;
			break;
		}
		uint32_t drops = cmsg_ovfl(&msg[got - 1].msg_hdr);
		if (drops)
			atomic_store_explicit(&t->st.socket_drops, drops, memory_order_relaxed);
		if (full) {
			atomic_fetch_add_explicit(&r->overruns, 1, memory_order_relaxed);
			continue;
		}
		uint64_t bytes = 0;
		for (int i = 0; i < got; i++) {
			uint8_t *slot = (uint8_t *)iov[i].iov_base - PDMA_SLOT_HDR;
			struct pdma_slot_hdr *h = (struct pdma_slot_hdr *)slot;
			pdma_slot_finish(slot, msg[i].msg_len, msg[i].msg_hdr.msg_flags & MSG_TRUNC, (uint32_t)seq++);
			bytes += msg[i].msg_len;
			if (h->flags & PDMA_SLOT_TRUNC)
				atomic_fetch_add_explicit(&t->st.truncated, 1, memory_order_relaxed);
			if (direct) {
				/* The device writes the slot into GPU memory by key:
				 * what a NIC whose ring lives in GPU pages does. */
				uint8_t *dst = pdma_ring_slot(r, head + (uint64_t)i);
				/* msg_len never exceeds the iovec, so this fits the slot. */
				int e = pdma_sim_dma_write(ing->c.domain, key, (uint64_t)(uintptr_t)dst,
							   slot, PDMA_SLOT_HDR + (size_t)h->len);
				if (e) {
					t->err = e;
					goto out;
				}
			}
		}
		atomic_fetch_add_explicit(&t->st.datagrams, (uint64_t)got, memory_order_relaxed);
		atomic_fetch_add_explicit(&t->st.bytes, bytes, memory_order_relaxed);
		/* Publish: the slots' contents happen-before the consumer's acquire. */
		atomic_store_explicit(&r->head, head + (uint64_t)got, memory_order_release);
	}
out:
	{
		/* Receive cost: the socket's kernel work runs in this thread
		 * (recvmmsg, and io_uring's poll-driven multishot recvmsg). */
		struct timespec cpu;
		if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
			t->cpu_s = (double)cpu.tv_sec + cpu.tv_nsec * 1e-9;
	}
	atomic_fetch_sub(&ing->rx_live, 1);
	return NULL;
}

static void progress_line(struct pdma_ingest *ing, double t, uint64_t *last_pk, uint64_t *last_by,
			  double *last_t)
{
	struct pdma_ingest_totals tot;
	uint64_t lost = 0;
	pdma_ingest_totals(ing, &tot);
	for (uint32_t i = 0; i < ing->dfr.cfg.max_streams; i++) {
		struct pdma_stream_stats s;
		if (pdma_acct_stream(&ing->dfr.acct, i, &s))
			lost += s.lost;
	}
	double dt = t - *last_t;
	fprintf(ing->progress,
		"\r%8.1f s  %10.0f pkt/s  %7.3f Gb/s  lost %llu  overruns %llu  sock drops %llu  ring %3.0f%%   ",
		t - ing->t_start, (double)(tot.datagrams - *last_pk) / dt,
		(double)(tot.bytes - *last_by) * 8 / dt / 1e9, (unsigned long long)lost,
		(unsigned long long)tot.ring_overruns, (unsigned long long)tot.socket_drops,
		tot.ring_fill * 100);
	fflush(ing->progress);
	*last_pk = tot.datagrams;
	*last_by = tot.bytes;
	*last_t = t;
}

/* GPU paths: hand a contiguous run of slots to the GPU deframer once a
 * chunk's worth (4 MiB default) is waiting, or whatever is there after 1 ms or
 * at the end, then account its descriptors here in arrival order. */
static uint32_t gpu_consume(struct pdma_ingest *ing, struct rx_thread *t, uint64_t tail,
			    uint64_t head, bool flush)
{
	struct pdma_ring *r = &t->ring;
	uint64_t avail = head - tail;
	double now = now_s();
	if (!flush && avail * r->slot_size < ing->chunk && now - t->last_batch < 1e-3)
		return 0;
	uint32_t first = (uint32_t)(tail & (r->nslots - 1));
	uint32_t n = (uint32_t)(avail < r->nslots - first ? avail : r->nslots - first);
	const uint8_t *base = pdma_ring_slot(r, tail);
	int e = ing->c.path == PDMA_RX_HOST_STAGED
			? ing->gops.run_staged(ing->gdfr, base, r->slot_size, n, ing->chunk, ing->gdesc)
			: ing->gops.run(ing->gdfr, base, r->slot_size, n, ing->gdesc);
	if (e) {
		/* Count the batch as unattributed malformed rather than lose it
		 * silently; the error is sticky in the session. */
		for (uint32_t i = 0; i < n; i++) {
			ing->gdesc[i] = (struct pdma_dfr_desc){ .stream = PDMA_DFR_NO_STREAM,
								.status = -PDMA_DFR_E_EMPTY };
		}
		if (!ing->gpu_err)
			ing->gpu_err = e;
	}
	for (uint32_t i = 0; i < n; i++)
		pdma_acct_add(&ing->dfr.acct, &ing->gdesc[i], 0);
	t->last_batch = now;
	return n;
}

static void *dfr_main(void *arg)
{
	struct pdma_ingest *ing = arg;
	double last_t = now_s();
	uint64_t last_pk = 0, last_by = 0;

	for (;;) {
		bool idle = true;
		int live = atomic_load(&ing->rx_live);
		for (uint32_t i = 0; i < ing->nrx; i++) {
			struct pdma_ring *r = &ing->rx[i].ring;
			uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
			uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
			if (head == tail)
				continue;
			uint32_t n;
			if (ing->gdfr) {
				n = gpu_consume(ing, &ing->rx[i], tail, head, live == 0);
				if (!n)
					continue;
			} else {
				n = head - tail > 256 ? 256 : (uint32_t)(head - tail);
				pdma_dfr_process(&ing->dfr, r, tail, n);
			}
			/* Hand the slots back only after they are fully consumed. */
			atomic_store_explicit(&r->tail, tail + n, memory_order_release);
			idle = false;
		}
		if (ing->progress) {
			double t = now_s();
			if (t - last_t >= 1.0)
				progress_line(ing, t, &last_pk, &last_by, &last_t);
		}
		if (idle) {
			if (live == 0)
				break; /* rx_live read before the scan: nothing can follow */
			struct timespec ts = { 0, 50000 };
			nanosleep(&ts, NULL);
		}
	}
	if (ing->progress)
		fputc('\n', ing->progress);
	atomic_store(&ing->dfr_done, true);
	return NULL;
}

int pdma_ingest_start(struct pdma_ingest *ing)
{
	if (ing->started)
		return -EALREADY;
	ing->t_start = now_s();
	atomic_store(&ing->rx_live, (int)ing->nrx);
	for (uint32_t i = 0; i < ing->nrx; i++) {
		int e = pthread_create(&ing->rx[i].th, NULL, rx_main, &ing->rx[i]);
		if (e) {
			/* Threads already running stop; the others never started. */
			atomic_store(&ing->rx_live, (int)i);
			atomic_store(&ing->stop, true);
			for (uint32_t j = 0; j < i; j++)
				pthread_join(ing->rx[j].th, NULL);
			return -e;
		}
	}
	int e = pthread_create(&ing->dfr_th, NULL, dfr_main, ing);
	if (e) {
		atomic_store(&ing->stop, true);
		for (uint32_t j = 0; j < ing->nrx; j++)
			pthread_join(ing->rx[j].th, NULL);
		return -e;
	}
	ing->started = true;
	return 0;
}

int pdma_ingest_stop(struct pdma_ingest *ing)
{
	int err = 0;
	if (!ing->started)
		return -EINVAL;
	atomic_store(&ing->stop, true);
	for (uint32_t i = 0; i < ing->nrx; i++) {
		pthread_join(ing->rx[i].th, NULL);
		if (ing->rx[i].err && !err)
			err = ing->rx[i].err;
	}
	pthread_join(ing->dfr_th, NULL);
	ing->started = false;
	if (ing->gdfr) {
		/* The deframed output lives on the GPU: bring the tables back so
		 * callers read one layout whatever the path; fill in byte totals
		 * (descriptors carry no length) from the per-stream payload size. */
		int e = ing->gops.read_tables(ing->gdfr, &ing->dfr.t);
		if (e && !err)
			err = e;
		for (uint32_t i = 0; i < ing->dfr.cfg.max_streams; i++)
			ing->dfr.acct.st[i].s.bytes = ing->dfr.acct.st[i].s.received * ing->dfr.t.plen[i];
	}
	if (!err)
		err = ing->gpu_err; /* written by the deframer thread, joined above */
	return err;
}

void pdma_ingest_close(struct pdma_ingest *ing)
{
	if (!ing)
		return;
	if (ing->started)
		pdma_ingest_stop(ing);
	for (uint32_t i = 0; i < ing->nrx; i++) {
		struct rx_thread *t = &ing->rx[i];
		pdma_rx_uring_close(t->uring);
		if (t->fd >= 0)
			close(t->fd);
		if (t->gpu_registered)
			ing->gops.host_unregister(ing->gdfr, t->ring.base);
		pdma_ring_fini(&t->ring);
		if (t->sim_mem)
			pdma_sim_free(ing->c.sim, t->sim_mem);
		free(t->bounce);
	}
	if (ing->gdfr)
		ing->gops.close(ing->gdfr);
	pdma_gpu_unload(ing->gdl);
	free(ing->gdesc);
	pdma_dfr_fini(&ing->dfr);
	free(ing->rx);
	free(ing);
}

void pdma_ingest_totals(struct pdma_ingest *ing, struct pdma_ingest_totals *t)
{
	memset(t, 0, sizeof(*t));
	for (uint32_t i = 0; i < ing->nrx; i++) {
		struct rx_thread *x = &ing->rx[i];
		t->datagrams += atomic_load_explicit(&x->st.datagrams, memory_order_relaxed);
		t->bytes += atomic_load_explicit(&x->st.bytes, memory_order_relaxed);
		t->truncated += atomic_load_explicit(&x->st.truncated, memory_order_relaxed);
		t->socket_drops += atomic_load_explicit(&x->st.socket_drops, memory_order_relaxed);
		t->ring_overruns += atomic_load_explicit(&x->ring.overruns, memory_order_relaxed);
		t->rx_cpu_s += x->cpu_s;
		uint64_t h = atomic_load_explicit(&x->ring.head, memory_order_relaxed);
		uint64_t tl = atomic_load_explicit(&x->ring.tail, memory_order_relaxed);
		double fill = h > tl ? (double)(h - tl) / x->ring.nslots : 0;
		if (fill > t->ring_fill)
			t->ring_fill = fill;
	}
}

const struct pdma_dfr *pdma_ingest_dfr(const struct pdma_ingest *ing)
{
	return &ing->dfr;
}

static const char *path_name(enum pdma_rx_path p)
{
	switch (p) {
	case PDMA_RX_CPU: return "cpu";
	case PDMA_RX_HOST_STAGED: return "host-staged";
	case PDMA_RX_ZERO_COPY: return "zero-copy";
	case PDMA_RX_DIRECT: return "direct";
	}
	return "?";
}

json_t *pdma_ingest_json(struct pdma_ingest *ing, double seconds)
{
	struct pdma_ingest_totals t;
	json_t *o = json_object(), *streams = json_array(), *mal = json_object();

	pdma_ingest_totals(ing, &t);
	json_object_set_new(o, "path", json_string(path_name(ing->c.path)));
	if (ing->gdfr) {
		/* Effective after the run: a failed graph falls back to streams. */
		json_object_set_new(o, "gpu_launch",
				    json_string(ing->gops.get_launch(ing->gdfr) == PDMA_GPU_LAUNCH_GRAPH ? "graph"
												: "stream"));
		json_object_set_new(o, "gpu_kernel", json_string(ing->gops.kernel_name(ing->gdfr)));
	}
	json_object_set_new(o, "port", json_integer(ing->port));
	json_object_set_new(o, "threads", json_integer(ing->nrx));
	json_object_set_new(o, "rx_io", json_string(ing->c.rx_io == PDMA_RX_IO_URING ? "io_uring" : "recvmmsg"));
	json_object_set_new(o, "seconds", json_real(seconds));
	json_object_set_new(o, "datagrams", json_integer((json_int_t)t.datagrams));
	json_object_set_new(o, "bytes", json_integer((json_int_t)t.bytes));
	json_object_set_new(o, "packets_per_s", json_real(seconds > 0 ? t.datagrams / seconds : 0));
	json_object_set_new(o, "gbit_per_s", json_real(seconds > 0 ? t.bytes * 8 / seconds / 1e9 : 0));
	json_object_set_new(o, "ring_overruns", json_integer((json_int_t)t.ring_overruns));
	json_object_set_new(o, "socket_drops", json_integer((json_int_t)t.socket_drops));
	json_object_set_new(o, "truncated", json_integer((json_int_t)t.truncated));
	json_object_set_new(o, "rx_cpu_seconds", json_real(t.rx_cpu_s));
	json_object_set_new(o, "rings_registered", json_boolean(ing->rx[0].ring.mr != NULL));
	json_object_set_new(o, "malformed_unattributed",
			    json_integer((json_int_t)ing->dfr.acct.malformed_unattributed));
	for (int c = 1; c < PDMA_DFR_E__MAX; c++)
		if (ing->dfr.acct.malformed_by_code[c])
			json_object_set_new(mal, c < PDMA_VRT_E__MAX ? pdma_vrt_strerror(-c) : pdma_dfr_strerror(-c),
					    json_integer((json_int_t)ing->dfr.acct.malformed_by_code[c]));
	json_object_set_new(o, "malformed_by_reason", mal);
	for (uint32_t i = 0; i < ing->dfr.cfg.max_streams; i++) {
		struct pdma_stream_stats s;
		if (!pdma_acct_stream(&ing->dfr.acct, i, &s))
			continue;
		json_t *j = json_object();
		json_object_set_new(j, "stream_id", json_integer(s.stream_id));
		json_object_set_new(j, "received", json_integer((json_int_t)s.received));
		json_object_set_new(j, "lost", json_integer((json_int_t)s.lost));
		json_object_set_new(j, "duplicated", json_integer((json_int_t)s.duplicated));
		json_object_set_new(j, "reordered", json_integer((json_int_t)s.reordered));
		json_object_set_new(j, "late", json_integer((json_int_t)s.late));
		json_object_set_new(j, "malformed", json_integer((json_int_t)s.malformed));
		json_object_set_new(j, "context", json_integer((json_int_t)s.context));
		json_object_set_new(j, "count_errors", json_integer((json_int_t)s.count_errors));
		json_object_set_new(j, "lost_by_4bit_count", json_integer((json_int_t)s.lost_count4));
		json_object_set_new(j, "payload_bytes", json_integer((json_int_t)s.bytes));
		json_array_append_new(streams, j);
	}
	json_object_set_new(o, "streams", streams);
	return o;
}
