// SPDX-License-Identifier: MIT
/* The receive session: its setup (one socket, ring and receive path per
 * receive thread), the threads (receive threads running a receive path of
 * rx/, one deframer thread consuming every ring with the CPU deframer or GPU
 * batching of deframe/), and the accounting of the whole: totals, progress
 * lines and the JSON summary. The nic path has no socket and no ring: its one
 * receive thread takes the NIC's completions (rx/nic.h) and deframes each
 * batch of frames itself, in place on the GPU or from a copy on the CPU. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "blocks/blocks.h"
#include "deframe/gpu_batch.h"
#include "ingest.h"
#include "peerdma/mr.h"
#include "rx/rx.h"

struct rx_thread {
	struct pdma_ingest *ing;
	pthread_t th;
	int fd;
	struct pdma_ring ring;
	struct pdma_rx_sim_dma *dma;  /* direct path: the ring in simulated GPU memory */
	struct pdma_rx_uring *uring;  /* rx_io io_uring */
	struct pdma_rx_xsk *xsk;      /* rx_io xdp: its XDP socket, on receive queue i */
	struct pdma_rx_nic *nic;      /* nic path */
	bool gpu_registered;
	double last_batch;            /* GPU paths: when the last batch ran */
	struct pdma_rx_stats st;
	double cpu_s;                 /* the thread's CPU time (user + system), at its end */
	double sys_s;                 /* ... of which system time */
	atomic_bool ended;            /* cpu_s and sys_s written (release) */
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
	atomic_bool started; /* pdma_ingest_ended() reads it from any thread */
	FILE *progress;
	double t_start;
	struct pdma_gpu_batch *gpu; /* GPU paths (host-staged, zero-copy, nic on the GPU) */
	struct pdma_rx_xdp *xdp;    /* rx_io xdp: the XDP program on the device */
	struct pdma_frm_cfg frm;    /* nic path: what the frames must carry */
	bool dfr_thread;            /* the deframer thread runs (not on the nic path) */
	double last_progress;       /* nic path: when the receive thread printed */
	double last_work;           /* idle flush: when the deframing thread last had work */
	bool flushed;               /* ... and its open blocks were published since */
	uint64_t last_pk, last_by;
	struct pdma_blocks *blocks; /* subscribers' blocks (pdma_ingest_enable_blocks) */
	double flush_idle;          /* seconds without datagrams before open blocks go out */
	struct pdma_domain *own_dom; /* closed with the session (pdma_ingest_own) */
	struct pdma_eq *own_eq;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

const char *pdma_rx_io_name(enum pdma_rx_io io)
{
	return io == PDMA_RX_IO_URING ? "io_uring" : io == PDMA_RX_IO_GRO ? "gro" :
	       io == PDMA_RX_IO_XDP ? "xdp" : "recvmmsg";
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

enum pdma_ring_layout pdma_ingest_ring_layout(enum pdma_slot_choice choice, uint32_t slot_size,
					      enum pdma_rx_io io)
{
	if (choice == PDMA_SLOTS_TINY)
		return PDMA_RING_TINY;
	if (choice == PDMA_SLOTS_PACKED)
		return PDMA_RING_PACKED;
	if (choice != PDMA_SLOTS_AUTO || io == PDMA_RX_IO_URING || slot_size > PDMA_SLOTS_PACKED_AUTO)
		return PDMA_RING_FULL;
	return slot_size <= PDMA_SLOT_TINY_MAX ? PDMA_RING_TINY : PDMA_RING_PACKED;
}

/* A layout's datagram offset in a slot. */
static uint32_t slot_off(enum pdma_ring_layout l)
{
	return l == PDMA_RING_TINY ? PDMA_SLOT_HDR_TINY : l == PDMA_RING_PACKED ? PDMA_SLOT_HDR_PACKED : PDMA_SLOT_HDR;
}

static const char *layout_name(enum pdma_ring_layout l)
{
	return l == PDMA_RING_TINY ? "tiny" : l == PDMA_RING_PACKED ? "packed" : "full";
}

/* The rings' layout: what c asks for, auto resolved. */
static enum pdma_ring_layout ring_layout(const struct pdma_ingest_config *c)
{
	return pdma_ingest_ring_layout(c->slot_layout, c->slot_size, c->rx_io);
}

/* The nic path's deframer and receiver: the GPU deframer reads the frames in
 * place when it can (auto: when its module loads), else the CPU deframer
 * reads a staged copy. */
static int nic_open(struct pdma_ingest *ing, char *msg, size_t msglen)
{
	const struct pdma_ingest_config *c = &ing->c;
	struct pdma_rx_nic_config nc = c->nic;
	int ret = -ENODEV;

	ing->frm = (struct pdma_frm_cfg){ .max_len = PDMA_FRM_MAX_LEN, .port = c->port };
	if (c->nic_deframer != PDMA_NIC_DFR_CPU) {
		/* frames per batch: the NIC's poll batch */
		ret = pdma_gpu_batch_open(&ing->gpu, &c->dfr, c->nic.cuda_device, false, c->gpu_launch, 0,
					  PDMA_RX_NIC_BATCH);
		if (ret && c->nic_deframer == PDMA_NIC_DFR_GPU) {
			snprintf(msg, msglen, "the GPU deframer: %s", ret == -ENOENT ?
				 "its module (libpeerdma_vrt_cuda.so) was not built or not found" :
				 ret == -ENODEV ? "no CUDA device" : strerror(-ret));
			return ret;
		}
	}
	nc.stage = ret != 0; /* the CPU deframer */
	return pdma_rx_nic_open(&ing->rx[0].nic, &nc, c->domain, c->eq, msg, msglen);
}

/* A slot holds its header and at least the 64 bytes the fast path reads;
 * tiny slots are at most 80 bytes; io_uring's completion header needs the
 * full layout's room before the datagram. */
int pdma_ingest_check_slots(const struct pdma_ingest_config *c, char *msg, size_t msglen)
{
	if (c->slot_layout > PDMA_SLOTS_TINY) {
		snprintf(msg, msglen, "slot layout %u: no such layout", (unsigned int)c->slot_layout);
		return -EINVAL;
	}
	const enum pdma_ring_layout l = ring_layout(c);
	const uint32_t min = 64 + slot_off(l);
	if (c->rx_io == PDMA_RX_IO_URING && l != PDMA_RING_FULL)
		snprintf(msg, msglen, "%s slots: io_uring's completion header needs the full layout's room "
			 "before the datagram", layout_name(l));
	else if (l == PDMA_RING_TINY && c->slot_size > PDMA_SLOT_TINY_MAX)
		snprintf(msg, msglen, "slot size %u: tiny slots are at most %u bytes", c->slot_size,
			 PDMA_SLOT_TINY_MAX);
	else if (c->slot_size < min && c->slot_layout == PDMA_SLOTS_AUTO && l == PDMA_RING_PACKED)
		/* 81-83 bytes: over a tiny slot, under a packed one */
		snprintf(msg, msglen, "slot size %u fits no slot layout: tiny slots are at most %u bytes, "
			 "packed ones at least %u", c->slot_size, PDMA_SLOT_TINY_MAX, min);
	else if (c->slot_size < min)
		snprintf(msg, msglen, "slot size %u: %s slots are at least %u bytes (a %u-byte slot header, "
			 "then the 64 bytes the deframer's fast path reads)", c->slot_size, layout_name(l), min,
			 slot_off(l));
	else
		return 0;
	return -EINVAL;
}

int pdma_ingest_open_config(const struct pdma_ingest_config *c, struct pdma_ingest **out, char *msg,
			    size_t msglen)
{
	struct pdma_ingest *ing;
	char dummy[1];
	int ret;

	if (!msg) {
		msg = dummy;
		msglen = sizeof(dummy);
	}
	if (!c->threads || c->threads > 64 || !c->batch || c->batch > PDMA_RX_MAX_BATCH)
		return -EINVAL;
	ret = pdma_ingest_check_slots(c, msg, msglen);
	if (ret)
		return ret;
	if ((c->path == PDMA_RX_DIRECT && (!c->domain || !c->sim)) ||
	    (c->path == PDMA_RX_NIC && (!c->domain || c->threads != 1)))
		return -EINVAL;
	if (c->rx_io != PDMA_RX_IO_RECVMMSG &&
	    ((c->rx_io != PDMA_RX_IO_URING && c->rx_io != PDMA_RX_IO_GRO && c->rx_io != PDMA_RX_IO_XDP) ||
	     c->path == PDMA_RX_DIRECT || c->path == PDMA_RX_NIC))
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
	if (ret) {
		snprintf(msg, msglen, "the deframer's tables (%u streams x %u packets x %u bytes): %s",
			 c->dfr.max_streams, c->dfr.out_pkts, c->dfr.max_payload, strerror(-ret));
		goto err;
	}
	if (c->path == PDMA_RX_NIC) {
		ing->port = c->port; /* the port the frames carry (pdma_ingest_port) */
		ing->rx[0].ing = ing;
		ret = nic_open(ing, msg, msglen);
		if (ret)
			goto err;
		*out = ing;
		return 0;
	}
	ing->dfr_thread = true;
	if (c->path == PDMA_RX_HOST_STAGED || c->path == PDMA_RX_ZERO_COPY) {
		ret = pdma_gpu_batch_open(&ing->gpu, &c->dfr, c->cuda_device, c->path == PDMA_RX_HOST_STAGED,
					  c->gpu_launch, c->gpu_chunk, c->ring_slots);
		if (ret)
			goto err;
	}
	ing->port = c->port;
	for (uint32_t i = 0; i < ing->nrx; i++) {
		struct rx_thread *t = &ing->rx[i];
		t->ing = ing;
		ret = pdma_rx_socket_open(c->bind_addr, ing->port, c->rcvbuf, &t->fd);
		if (ret)
			goto err;
		if (ing->port == 0) /* ephemeral: the first socket picks, the others join it */
			ing->port = pdma_rx_socket_port(t->fd);
		/* The program once the port is known; the sockets keep the port
		 * ours and take what it passes on. */
		if (i == 0 && c->rx_io == PDMA_RX_IO_XDP) {
			ret = pdma_rx_xdp_open(&ing->xdp, c->xdp_dev, c->bind_addr, ing->port, c->slot_size,
					       msg, msglen);
			if (ret)
				goto err;
		}
		if (c->path == PDMA_RX_DIRECT) {
			ret = pdma_rx_sim_dma_open(&t->dma, c->sim, c->domain, c->ring_slots, c->slot_size,
						   ring_layout(c), c->batch, &t->ring);
		} else {
			ret = pdma_ring_init(&t->ring, c->ring_slots, c->slot_size, ring_layout(c));
			if (!ret && c->domain)
				ret = pdma_ring_register(&t->ring, c->domain, PDMA_HMEM_SYSTEM);
			if (!ret && ing->gpu) {
				ret = pdma_gpu_batch_register(ing->gpu, &t->ring);
				if (!ret)
					t->gpu_registered = true;
			}
		}
		if (!ret && c->rx_io == PDMA_RX_IO_URING)
			ret = pdma_rx_uring_open(&t->uring, t->fd, &t->ring);
		/* Here, not only in the receive thread: a kernel without
		 * UDP_GRO fails the open, as io_uring's absence does. */
		if (!ret && c->rx_io == PDMA_RX_IO_GRO)
			ret = pdma_rx_gro_enable(t->fd);
		if (!ret && c->rx_io == PDMA_RX_IO_XDP)
			ret = pdma_rx_xsk_open(&t->xsk, ing->xdp, i, msg, msglen);
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

static void progress_line(struct pdma_ingest *ing, double t, uint64_t *last_pk, uint64_t *last_by,
			  double *last_t);

/* After each pass of the thread that deframes (the socket paths' deframer
 * thread, the nic path's receive thread), which had work or found none:
 * once nothing has arrived for flush_idle, what has come goes to the
 * consumers, once per quiet spell. */
static void idle_tick(struct pdma_ingest *ing, bool worked)
{
	if (worked) {
		ing->last_work = now_s();
		ing->flushed = false;
	} else if (ing->blocks && ing->flush_idle > 0 && !ing->flushed &&
		   now_s() - ing->last_work >= ing->flush_idle) {
		pdma_blocks_publish_open(ing->blocks);
		ing->flushed = true;
	}
}

/* The nic path's consumer: one batch of frames, in arrival order; n 0: a
 * quiet poll (idle tick). */
static int nic_frames(void *arg, uint64_t dev_base, const uint8_t *host_base,
		      const struct pdma_frame *f, uint32_t n)
{
	struct pdma_ingest *ing = arg;
	int ret = 0;

	idle_tick(ing, n > 0);
	if (!n)
		return 0;
	if (ing->gpu)
		ret = pdma_gpu_batch_frames(ing->gpu, &ing->frm, (const void *)(uintptr_t)dev_base, f, n,
					    &ing->dfr.acct, &ing->dfr.frames);
	else
		pdma_dfr_process_frames(&ing->dfr, &ing->frm, host_base, f, n);
	if (ing->blocks)
		pdma_blocks_publish(ing->blocks);
	if (ing->progress) {
		double t = now_s();
		if (t - ing->last_progress >= 1.0)
			progress_line(ing, t, &ing->last_pk, &ing->last_by, &ing->last_progress);
	}
	return ret;
}

/* A receive thread: its receive path fills its ring until stop. */
static void *rx_main(void *arg)
{
	struct rx_thread *t = arg;
	struct pdma_ingest *ing = t->ing;

	if (t->nic)
		t->err = pdma_rx_nic_run(t->nic, &ing->stop, nic_frames, ing, &t->st);
	else if (t->uring)
		t->err = pdma_rx_uring_run(t->uring, &ing->stop, &t->st);
	else if (t->xsk)
		t->err = pdma_rx_xsk_run(t->xsk, t->fd, &t->ring, ing->c.batch, &ing->stop, &t->st);
	else if (ing->c.rx_io == PDMA_RX_IO_GRO)
		t->err = pdma_rx_gro_run(t->fd, &t->ring, ing->c.batch, &ing->stop, &t->st);
	else
		t->err = pdma_rx_recvmmsg_run(t->fd, &t->ring, ing->c.batch, t->dma, &ing->stop, &t->st);
	/* Receive cost: the socket's kernel work runs in this thread
	 * (recvmmsg, and io_uring's poll-driven multishot recvmsg); what runs
	 * in softirq (the network stack up to the socket queue) does not. */
	struct timespec cpu;
	struct rusage ru;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
		t->cpu_s = (double)cpu.tv_sec + cpu.tv_nsec * 1e-9;
	if (getrusage(RUSAGE_THREAD, &ru) == 0)
		t->sys_s = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
	atomic_store_explicit(&t->ended, true, memory_order_release);
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

/*
 * The deframer's idle sleep: 50 us while something may fall due (slots a
 * GPU batch holds back, open blocks not yet flushed) and for the first
 * DFR_QUIET_S of quiet; after that it doubles, up to the time the smallest
 * receive ring takes to fill at 8 Mpps (125 ns a slot), at most 1 ms. Why:
 * an idle session made 13,000 wake-ups a second at 50 us, and one quiet
 * that long can let its next packets wait in the ring (the default 8192
 * slots: 1 ms).
 */
#define DFR_SLEEP_NS 50000L
#define DFR_SLEEP_MAX_NS 1000000L
#define DFR_SLOT_NS 125L
#define DFR_QUIET_S 0.002

static long dfr_sleep_max(const struct pdma_ingest *ing)
{
	long max = DFR_SLEEP_MAX_NS;

	for (uint32_t i = 0; i < ing->nrx; i++)
		if ((long)ing->rx[i].ring.nslots * DFR_SLOT_NS < max)
			max = (long)ing->rx[i].ring.nslots * DFR_SLOT_NS;
	return max < DFR_SLEEP_NS ? DFR_SLEEP_NS : max;
}

static long dfr_idle_sleep(const struct pdma_ingest *ing, bool due, long prev_ns, long max_ns)
{
	if (due || now_s() - ing->last_work < DFR_QUIET_S)
		return DFR_SLEEP_NS;
	return prev_ns * 2 > max_ns ? max_ns : prev_ns * 2;
}

static void *dfr_main(void *arg)
{
	struct pdma_ingest *ing = arg;
	double last_t = now_s();
	uint64_t last_pk = 0, last_by = 0;
	long sleep_ns = DFR_SLEEP_NS, sleep_max = dfr_sleep_max(ing);

	/* The idle poll below sleeps 50 us; with the default 50 us timer
	 * slack each sleep lasted about twice that, and a block's delivery
	 * waited for it (bench_ingest (f)). This thread's own slack only. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	for (;;) {
		bool idle = true, held = false;
		int live = atomic_load(&ing->rx_live);
		for (uint32_t i = 0; i < ing->nrx; i++) {
			struct pdma_ring *r = &ing->rx[i].ring;
			uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
			uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
			if (head == tail)
				continue;
			uint32_t n;
			if (ing->gpu) {
				n = pdma_gpu_batch_consume(ing->gpu, r, tail, head, live == 0, now_s(),
							   &ing->rx[i].last_batch, &ing->dfr.acct);
				if (!n) {
					held = true; /* a batch waits for more, or its time */
					continue;
				}
			} else {
				n = head - tail > 256 ? 256 : (uint32_t)(head - tail);
				pdma_dfr_process(&ing->dfr, r, tail, n);
			}
			/* Hand the slots back only after they are fully consumed. */
			atomic_store_explicit(&r->tail, tail + n, memory_order_release);
			idle = false;
			if (ing->blocks)
				pdma_blocks_publish(ing->blocks);
		}
		if (ing->progress) {
			double t = now_s();
			if (t - last_t >= 1.0)
				progress_line(ing, t, &last_pk, &last_by, &last_t);
		}
		idle_tick(ing, !idle);
		if (idle) {
			if (live == 0)
				break; /* rx_live read before the scan: nothing can follow */
			sleep_ns = dfr_idle_sleep(ing, held || (ing->blocks && ing->flush_idle > 0 &&
								!ing->flushed),
						  sleep_ns, sleep_max);
			struct timespec ts = { 0, sleep_ns };
			nanosleep(&ts, NULL);
		}
	}
	if (ing->progress)
		fputc('\n', ing->progress);
	atomic_store(&ing->dfr_done, true);
	return NULL;
}

/* A start that failed: the receive threads that did start (the first n) end
 * and are joined, and the session is as it was, so that start can be tried
 * again (what they received stays in their rings for it). */
static int start_undo(struct pdma_ingest *ing, uint32_t n, int err)
{
	atomic_store(&ing->stop, true);
	for (uint32_t j = 0; j < n; j++)
		pthread_join(ing->rx[j].th, NULL);
	atomic_store(&ing->stop, false);
	atomic_store(&ing->rx_live, 0);
	if (ing->blocks)
		pdma_blocks_start(ing->blocks, false);
	return -err;
}

int pdma_ingest_start(struct pdma_ingest *ing)
{
	if (atomic_load(&ing->started))
		return -EALREADY;
	ing->t_start = now_s();
	ing->last_work = ing->t_start;
	ing->flushed = true; /* nothing to publish before the first work */
	atomic_store(&ing->rx_live, (int)ing->nrx);
	for (uint32_t i = 0; i < ing->nrx; i++) {
		atomic_store(&ing->rx[i].ended, false);
		int e = pthread_create(&ing->rx[i].th, NULL, rx_main, &ing->rx[i]);
		if (e) {
			/* The others never started: they count as ended. */
			atomic_store(&ing->rx_live, (int)i);
			return start_undo(ing, i, e);
		}
	}
	ing->last_progress = ing->t_start;
	if (ing->blocks)
		pdma_blocks_start(ing->blocks, true);
	int e = ing->dfr_thread ? pthread_create(&ing->dfr_th, NULL, dfr_main, ing) : 0;
	if (e)
		return start_undo(ing, ing->nrx, e);
	atomic_store(&ing->started, true);
	return 0;
}

bool pdma_ingest_ended(struct pdma_ingest *ing)
{
	return atomic_load(&ing->started) && atomic_load(&ing->rx_live) == 0;
}

int pdma_ingest_stop(struct pdma_ingest *ing)
{
	int err = 0;
	if (!atomic_load(&ing->started))
		return -EINVAL;
	atomic_store(&ing->stop, true);
	/* A deframer waiting on a backpressure subscriber must not hold
	 * the stop up: from here, publication never waits. */
	if (ing->blocks)
		pdma_blocks_stop(ing->blocks);
	for (uint32_t i = 0; i < ing->nrx; i++) {
		pthread_join(ing->rx[i].th, NULL);
		if (ing->rx[i].err && !err)
			err = ing->rx[i].err;
	}
	if (ing->dfr_thread)
		pthread_join(ing->dfr_th, NULL);
	else if (ing->progress)
		fputc('\n', ing->progress);
	atomic_store(&ing->started, false);
	/* The deframer is done: the last blocks (to each stream's newest
	 * packet) go out, then the subscriptions end. */
	if (ing->blocks)
		pdma_blocks_flush(ing->blocks);
	if (ing->gpu) {
		/* The deframed output lives on the GPU: bring the tables back so
		 * callers read one layout whatever the path. */
		int e = pdma_gpu_batch_finish(ing->gpu, &ing->dfr);
		if (e && !err)
			err = e;
		if (!err)
			err = pdma_gpu_batch_error(ing->gpu); /* the deframer thread's, joined above */
	}
	return err;
}

static void gpu_fin(void *arg)
{
	pdma_gpu_batch_close(arg);
}

void pdma_ingest_close(struct pdma_ingest *ing)
{
	if (!ing)
		return;
	if (atomic_load(&ing->started))
		pdma_ingest_stop(ing);
	for (uint32_t i = 0; i < ing->nrx; i++) {
		struct rx_thread *t = &ing->rx[i];
		pdma_rx_uring_close(t->uring);
		pdma_rx_xsk_close(t->xsk);
		pdma_rx_nic_close(t->nic);
		if (t->fd >= 0)
			close(t->fd);
		if (t->gpu_registered)
			pdma_gpu_batch_unregister(ing->gpu, &t->ring);
		pdma_ring_fini(&t->ring);
		pdma_rx_sim_dma_close(t->dma); /* after the ring's registration of its memory */
	}
	pdma_rx_xdp_close(ing->xdp); /* after its sockets */
	/* The pools may outlive the session (blocks still held by DLPack
	 * views); GPU pools need the GPU deframer until then. */
	pdma_blocks_close(ing->blocks, gpu_fin, ing->gpu);
	pdma_dfr_fini(&ing->dfr);
	if (ing->own_eq)
		pdma_eq_close(ing->own_eq);
	if (ing->own_dom)
		pdma_domain_close(ing->own_dom);
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
		/* Written as the thread ends, which may be before the stop
		 * (a receive error) while this runs in another thread. */
		if (atomic_load_explicit(&x->ended, memory_order_acquire)) {
			t->rx_cpu_s += x->cpu_s;
			t->rx_sys_s += x->sys_s;
		}
		t->gro_buffers += atomic_load_explicit(&x->st.buffers, memory_order_relaxed);
		t->xdp_invalid += atomic_load_explicit(&x->st.xdp_invalid, memory_order_relaxed);
		t->xdp_stack += atomic_load_explicit(&x->st.xdp_stack, memory_order_relaxed);
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
	case PDMA_RX_NIC: return "nic";
	}
	return "?";
}

/* rx_io xdp: where the program runs, and what did not come its way. */
static json_t *xdp_json(const struct pdma_rx_xdp *x, const struct pdma_ingest_totals *t)
{
	struct pdma_rx_xdp_info i;
	json_t *o = json_object();

	pdma_rx_xdp_info(x, &i);
	json_object_set_new(o, "device", json_string(i.dev));
	json_object_set_new(o, "mode", json_string(i.mode));
	json_object_set_new(o, "zerocopy", json_boolean(i.zerocopy));
	json_object_set_new(o, "udp_csum_checked", json_boolean(!i.csum_trusted));
	json_object_set_new(o, "umem_frame_bytes", json_integer(i.chunk));
	json_object_set_new(o, "invalid_frames", json_integer((json_int_t)t->xdp_invalid));
	json_object_set_new(o, "via_stack", json_integer((json_int_t)t->xdp_stack));
	return o;
}

/* The nic path's own report: where the frames landed, what the driver
 * counted, which frames the deframer skipped and why. */
static json_t *nic_json(struct pdma_ingest *ing)
{
	static const char *const kinds[] = { [1] = "host", [2] = "nv-p2p", [3] = "dma-buf" };
	json_t *o = json_object(), *drv = json_object();
	struct pdma_rx_nic_info ni;
	struct pdma_nic_stats ns;

	pdma_rx_nic_info(ing->rx[0].nic, &ni);
	json_object_set_new(o, "deframer", json_string(ing->gpu ? "gpu" : "cpu"));
	json_object_set_new(o, "region_dev_addr", json_integer((json_int_t)ni.dev_addr));
	json_object_set_new(o, "region_bytes", json_integer((json_int_t)ni.bytes));
	json_object_set_new(o, "bufs_offset", json_integer((json_int_t)ni.bufs_off));
	json_object_set_new(o, "buf_size", json_integer(ni.buf_size));
	json_object_set_new(o, "nbufs", json_integer(ni.nbufs));
	json_object_set_new(o, "pin", json_string(ni.pin_kind < 4 && kinds[ni.pin_kind] ?
						  kinds[ni.pin_kind] : "?"));
	json_object_set_new(o, "revoked", json_boolean(ni.revoked));
	json_object_set_new(o, "revoke_event", json_boolean(ni.revoke_event));
	json_object_set_new(o, "frames", pdma_frm_stats_json(&ing->dfr.frames));
	if (pdma_rx_nic_stats(ing->rx[0].nic, &ns) == 0) {
		json_object_set_new(drv, "rx_frames", json_integer((json_int_t)ns.rx_frames));
		json_object_set_new(drv, "rx_missed", json_integer((json_int_t)ns.rx_missed));
		json_object_set_new(drv, "rx_long", json_integer((json_int_t)ns.rx_long));
		json_object_set_new(drv, "rx_errors", json_integer((json_int_t)ns.rx_errors));
		json_object_set_new(drv, "doorbells", json_integer((json_int_t)ns.doorbells));
		json_object_set_new(drv, "irqs", json_integer((json_int_t)ns.irqs));
		json_object_set_new(drv, "quiesces", json_integer((json_int_t)ns.quiesces));
		json_object_set_new(drv, "driver_ns_per_frame",
				    json_real(ns.rx_frames ? (double)ns.reap_ns / ns.rx_frames : 0));
	}
	json_object_set_new(o, "driver", drv);
	return o;
}

json_t *pdma_ingest_json(struct pdma_ingest *ing, double seconds)
{
	struct pdma_ingest_totals t;
	json_t *o = json_object(), *mal = json_object();

	pdma_ingest_totals(ing, &t);
	json_object_set_new(o, "path", json_string(path_name(ing->c.path)));
	if (ing->gpu) {
		/* Effective after the run: a failed graph falls back to streams. */
		json_object_set_new(o, "gpu_launch", json_string(pdma_gpu_batch_launch_name(ing->gpu)));
		json_object_set_new(o, "gpu_kernel", json_string(pdma_gpu_batch_kernel(ing->gpu)));
	}
	json_object_set_new(o, "port", json_integer(ing->port));
	json_object_set_new(o, "threads", json_integer(ing->nrx));
	json_object_set_new(o, "rx_io", json_string(pdma_rx_io_name(ing->c.rx_io)));
	if (ing->c.path != PDMA_RX_NIC) {
		json_object_set_new(o, "slot_layout",
				    json_string(layout_name(ring_layout(&ing->c))));
		json_object_set_new(o, "slot_bytes", json_integer(ing->rx[0].ring.slot_size));
	}
	json_object_set_new(o, "seconds", json_real(seconds));
	json_object_set_new(o, "datagrams", json_integer((json_int_t)t.datagrams));
	json_object_set_new(o, "bytes", json_integer((json_int_t)t.bytes));
	json_object_set_new(o, "packets_per_s", json_real(seconds > 0 ? t.datagrams / seconds : 0));
	json_object_set_new(o, "gbit_per_s", json_real(seconds > 0 ? t.bytes * 8 / seconds / 1e9 : 0));
	json_object_set_new(o, "ring_overruns", json_integer((json_int_t)t.ring_overruns));
	json_object_set_new(o, "socket_drops", json_integer((json_int_t)t.socket_drops));
	json_object_set_new(o, "truncated", json_integer((json_int_t)t.truncated));
	json_object_set_new(o, "rx_cpu_seconds", json_real(t.rx_cpu_s));
	json_object_set_new(o, "rx_sys_seconds", json_real(t.rx_sys_s));
	if (ing->c.rx_io == PDMA_RX_IO_GRO)
		json_object_set_new(o, "gro_buffers", json_integer((json_int_t)t.gro_buffers));
	if (ing->xdp)
		json_object_set_new(o, "xdp", xdp_json(ing->xdp, &t));
	json_object_set_new(o, "rings_registered", json_boolean(ing->rx[0].ring.mr != NULL));
	json_object_set_new(o, "malformed_unattributed",
			    json_integer((json_int_t)ing->dfr.acct.malformed_unattributed));
	for (int c = 1; c < PDMA_DFR_E__MAX; c++)
		if (ing->dfr.acct.malformed_by_code[c])
			json_object_set_new(mal, c < PDMA_VRT_E__MAX ? pdma_vrt_strerror(-c) : pdma_dfr_strerror(-c),
					    json_integer((json_int_t)ing->dfr.acct.malformed_by_code[c]));
	json_object_set_new(o, "malformed_by_reason", mal);
	if (ing->rx[0].nic)
		json_object_set_new(o, "nic", nic_json(ing));
	json_object_set_new(o, "streams", pdma_acct_streams_json(&ing->dfr.acct));
	return o;
}

int pdma_ingest_enable_blocks(struct pdma_ingest *ing, uint32_t block_packets, uint32_t late_blocks,
			      uint32_t pool, uint32_t flush_idle_ms)
{
	int ret;

	if (atomic_load(&ing->started) || ing->blocks)
		return -EBUSY;
	if (ing->gpu) {
		/* the window is in device memory: pools there too */
		struct pdma_blk_mem mem;
		const uint8_t *win;

		if (ing->c.path == PDMA_RX_NIC)
			return -EOPNOTSUPP; /* frames in GPU memory: no host copy to learn lengths from */
		ret = pdma_blocks_gpu_mem(ing->gpu, &mem, &win);
		if (!ret)
			ret = pdma_blocks_open(&ing->blocks, &ing->dfr.cfg, block_packets, late_blocks,
					       pool, win, &mem);
	} else {
		ret = pdma_blocks_open(&ing->blocks, &ing->dfr.cfg, block_packets, late_blocks, pool,
				       ing->dfr.t.out, NULL);
	}
	if (ret)
		return ret;
	ing->flush_idle = flush_idle_ms * 1e-3;
	ing->dfr.acct.observe = pdma_blocks_observe;
	ing->dfr.acct.observe_arg = ing->blocks;
	return 0;
}

void pdma_ingest_own(struct pdma_ingest *ing, struct pdma_domain *dom, struct pdma_eq *eq)
{
	ing->own_dom = dom;
	ing->own_eq = eq;
}

int pdma_ingest_subscribe(struct pdma_ingest *ing, const struct pdma_sub_attr *a,
			  struct pdma_sub **sub)
{
	if (!ing)
		return -EINVAL;
	if (!ing->blocks)
		return -EOPNOTSUPP;
	return pdma_blocks_subscribe(ing->blocks, a, sub);
}

void pdma_ingest_stats(struct pdma_ingest *ing, struct pdma_ingest_stats *s)
{
	struct pdma_ingest_totals t;

	memset(s, 0, sizeof(*s));
	pdma_ingest_totals(ing, &t);
	s->datagrams = t.datagrams;
	s->bytes = t.bytes;
	s->ring_overruns = t.ring_overruns;
	s->socket_drops = t.socket_drops;
	if (ing->blocks)
		pdma_blocks_stats(ing->blocks, s);
}
