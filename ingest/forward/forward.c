// SPDX-License-Identifier: MIT
/* The forwarder (include/peerdma/forward.h; protocol and policies:
 * DESIGN.md beside this file). One thread owns the UCP worker: it takes the
 * session's blocks from its subscription and sends each to the consumers
 * that asked for its stream, zero-copy from the block's buffer (the pool is
 * ucp_mem_map'ed once) or through a staging buffer. It never waits for one
 * consumer: a consumer without credit, or gone, has the block counted as
 * dropped for it, and the block goes back to the pool as soon as the sends
 * that took it complete. */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "blocks/blocks.h"
#include "forward/forward_int.h"
#include "forward/stage.h"
#include "forward/ucx.h"
#include "forward/wire.h"

#define FWD_MAX_CONSUMERS 64
#define FWD_HELLO_MS 5000   /* a connection's HELLO must come within this */

enum cstate { C_EMPTY, C_CONNECTING, C_LIVE, C_GONE };

struct fwd_consumer {
	enum cstate state;
	ucp_ep_h ep;
	bool refusing;            /* WELCOME with an error sent: close after it */
	double since;             /* CONNECTING: when */
	double no_credit_since;   /* 0: has credit */
	bool granted;             /* a CREDIT came: it has started (the stall timer runs from then) */
	bool ended;               /* END sent: its disconnect is the goodbye, not a failure */
	uint32_t credits, inflight;
	/* blocks waiting for its credit, oldest first (each holds a reference):
	 * a consumer that stalls for a moment loses nothing until PDMA_FWD_QUEUE
	 * blocks wait, and the others never wait for it */
	struct fwd_qent {
		struct pdma_block *b;
		uint64_t no;      /* the forwarder's number for it (its staged copy) */
	} q[PDMA_FWD_QUEUE];
	uint32_t qhead, qlen;
	uint32_t nstreams, streams[PDMA_FWD_MAX_SUBS];
	struct pdma_fwd_consumer_stats st;
};

struct fwd_send {
	struct pdma_fwd *f;
	ucp_ep_h ep;              /* the consumer it went to (NULL: control) */
	struct pdma_block *b;     /* held until done (zero-copy) */
	struct pdma_stage_buf *sb;
	uint8_t hdr[];
};

struct pdma_fwd {
	struct pdma_fwd_attr a;
	struct pdma_sub *sub;
	struct pdma_blocks *bl;
	struct pdma_ucx u;
	ucp_listener_h listener;
	uint16_t port;
	int efd;                  /* UCX's (worker_arm) */
	int sub_efd;              /* the subscription's (pdma_sub_arm) */
	ucp_mem_h pool_memh;      /* NULL: the pool is not mapped (staged) */
	bool stage_gpu;           /* GPU blocks are staged (UCX has no CUDA) */
	struct pdma_fwd_stage stage;
	char desc[480];
	pthread_mutex_t lock;     /* the consumer table and stats (readers) */
	struct fwd_consumer c[FWD_MAX_CONSUMERS];
	uint32_t nc;              /* slots used so far (high mark) */
	ucp_ep_h closing[FWD_MAX_CONSUMERS * 2];
	uint32_t nclosing;
	uint64_t inflight;        /* all sends */
	struct pdma_fwd_stats st;
	pthread_t th;
	bool has_th;
	atomic_bool quit;
};

void pdma_fwd_attr_init(struct pdma_fwd_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->addr = "0.0.0.0";
	a->stall_ms = 5000;
	a->stage_buffers = 64;
	a->max_credits = 16;
}

static struct fwd_consumer *by_ep(struct pdma_fwd *f, ucp_ep_h ep)
{
	for (uint32_t i = 0; i < f->nc; i++)
		if (f->c[i].state != C_EMPTY && f->c[i].state != C_GONE && f->c[i].ep == ep)
			return &f->c[i];
	return NULL;
}

static void errmsg(struct fwd_consumer *c, const char *m)
{
	size_t n = strnlen(m, sizeof(c->st.last_error) - 1);

	memcpy(c->st.last_error, m, n);
	c->st.last_error[n] = 0;
}

/* Close an endpoint from the main loop (not from a UCX callback). */
static void close_later(struct pdma_fwd *f, ucp_ep_h ep)
{
	for (uint32_t i = 0; i < f->nclosing; i++)
		if (f->closing[i] == ep)
			return;
	if (f->nclosing < sizeof(f->closing) / sizeof(f->closing[0]))
		f->closing[f->nclosing++] = ep;
}

static void q_drop_all(struct fwd_consumer *c, bool gone, double now);

/* A consumer leaves (died, stalled, refused): its streams count as dropped
 * from now on; a HELLO under its name takes the slot again. */
static void consumer_gone(struct pdma_fwd *f, struct fwd_consumer *c, const char *why)
{
	q_drop_all(c, true, pdma_ucx_now());
	if (c->ep)
		close_later(f, c->ep);
	if (why)
		errmsg(c, why);
	c->st.live = false;
	c->state = c->st.connects ? C_GONE : C_EMPTY;
	c->credits = 0;
	c->no_credit_since = 0;
	/* the endpoint stays named until its sends complete (by_ep skips it) */
}

static void ep_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct pdma_fwd *f = arg;
	struct fwd_consumer *c;

	char name[sizeof(c->st.name)] = "";
	char m[80];

	snprintf(m, sizeof(m), "connection lost: %s", f->u.api->status_string(status));
	pthread_mutex_lock(&f->lock);
	c = by_ep(f, ep);
	if (c && c->ended) {
		consumer_gone(f, c, NULL);
	} else if (c) {
		if (c->state == C_LIVE)
			memcpy(name, c->st.name, sizeof(name));
		consumer_gone(f, c, m);
	} else {
		close_later(f, ep);
	}
	pthread_mutex_unlock(&f->lock);
	if (name[0])
		fprintf(stderr, "peerdma forward: consumer '%s': %s; its streams count as dropped until it "
				"returns\n", name, m);
}

static void conn_request(ucp_conn_request_h req, void *arg)
{
	struct pdma_fwd *f = arg;
	ucp_ep_params_t ep = { 0 };
	struct fwd_consumer *c = NULL;
	ucp_ep_h h;

	pthread_mutex_lock(&f->lock);
	for (uint32_t i = 0; i < FWD_MAX_CONSUMERS && !c; i++)
		if (f->c[i].state == C_EMPTY && !f->c[i].ep)
			c = &f->c[i];
	if (!c)
		f->st.refused++;
	pthread_mutex_unlock(&f->lock);
	/* UCX calls without f->lock: UCX holds its own lock around the
	 * callbacks that take it (ep_err) */
	if (!c) {
		f->u.api->listener_reject(f->listener, req);
		return;
	}
	ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.conn_request = req;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = ep_err;
	ep.err_handler.arg = f;
	if (f->u.api->ep_create(f->u.worker, &ep, &h) != UCS_OK) {
		pthread_mutex_lock(&f->lock);
		f->st.refused++;
		pthread_mutex_unlock(&f->lock);
		return;
	}
	/* only this thread fills slots: c is still free */
	pthread_mutex_lock(&f->lock);
	memset(&c->st, 0, sizeof(c->st));
	c->ep = h;
	c->state = C_CONNECTING;
	c->refusing = false;
	c->since = pdma_ucx_now();
	c->credits = c->inflight = 0;
	if ((uint32_t)(c - f->c) + 1 > f->nc)
		f->nc = (uint32_t)(c - f->c) + 1;
	pthread_mutex_unlock(&f->lock);
}

static void send_done(void *req, ucs_status_t status, void *user)
{
	struct fwd_send *s = user;
	struct pdma_fwd *f = s->f;

	(void)status; /* a failed send's consumer is handled by ep_err */
	if (s->ep) {
		pthread_mutex_lock(&f->lock);
		for (uint32_t i = 0; i < f->nc; i++)
			if (f->c[i].ep == s->ep && f->c[i].inflight) {
				f->c[i].inflight--;
				break;
			}
		pthread_mutex_unlock(&f->lock);
	}
	if (s->b)
		pdma_block_release(s->b);
	if (s->sb)
		pdma_fwd_stage_put(&f->stage, s->sb);
	f->inflight--;
	free(s);
	if (req)
		f->u.api->request_free(req);
}

/* One AM to ep; s (malloc'd, header in s->hdr) is freed when it completes. */
static int am_send(struct pdma_fwd *f, ucp_ep_h ep, unsigned id, struct fwd_send *s, size_t hlen,
		   const void *data, size_t len, ucp_mem_h memh, uint32_t flags)
{
	ucp_request_param_t p = { 0 };
	ucs_status_ptr_t r;

	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			 UCP_OP_ATTR_FIELD_FLAGS;
	p.flags = flags;
	p.cb.send = send_done;
	p.user_data = s;
	if (memh) {
		p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
		p.memh = memh;
	}
	f->inflight++;
	r = f->u.api->am_send_nbx(ep, id, s->hdr, hlen, data, len, &p);
	if (r == NULL) {
		send_done(NULL, UCS_OK, s);
		return 0;
	}
	if (UCS_PTR_IS_ERR(r)) {
		int e = pdma_ucx_errno(UCS_PTR_STATUS(r));
		send_done(NULL, UCS_PTR_STATUS(r), s);
		return e;
	}
	return 0;
}

static int send_welcome(struct pdma_fwd *f, ucp_ep_h ep, int status, const char *m)
{
	struct pdma_fwd_welcome w = { .version = PDMA_FWD_VERSION, .status = status };
	struct fwd_send *s = calloc(1, sizeof(*s) + PDMA_FWD_WELCOME_LEN);

	if (!s)
		return -ENOMEM;
	s->f = f;
	if (!status) {
		w.block_packets = f->bl->B;
		w.max_payload = f->bl->cfg.max_payload;
		w.sample_rate = f->bl->cfg.sample_rate;
	}
	snprintf(w.msg, sizeof(w.msg), "%s", m);
	return am_send(f, ep, PDMA_FWD_AM_WELCOME, s, pdma_fwd_welcome_put(s->hdr, &w), NULL, 0, NULL, 0);
}

static ucs_status_t on_hello(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *param)
{
	struct pdma_fwd *f = arg;
	struct pdma_fwd_hello h;
	struct fwd_consumer *c, *slot;
	char m[PDMA_FWD_MSG_LEN + 48];
	int e;

	(void)data;
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
		return UCS_OK; /* cannot tell whose: ignored (the connection's timer drops it) */
	pthread_mutex_lock(&f->lock);
	c = by_ep(f, param->reply_ep);
	if (!c || c->state != C_CONNECTING || c->refusing) {
		pthread_mutex_unlock(&f->lock);
		return UCS_OK;
	}
	e = len ? -EPROTO : pdma_fwd_hello_get(hdr, hlen, &h);
	slot = c;
	if (e == -EPROTONOSUPPORT) {
		snprintf(m, sizeof(m), "protocol version %u refused: this forwarder speaks %u",
			 h.version, PDMA_FWD_VERSION);
	} else if (e) {
		snprintf(m, sizeof(m), "malformed HELLO (%zu header bytes): refused", hlen);
	} else {
		for (uint32_t i = 0; i < f->nc; i++) {
			struct fwd_consumer *o = &f->c[i];

			if (o == c || strcmp(o->st.name, h.name))
				continue;
			if (o->state == C_LIVE || o->state == C_CONNECTING) {
				e = -EBUSY;
				snprintf(m, sizeof(m), "consumer name '%.32s' is in use", h.name);
			} else if (o->state == C_GONE) {
				slot = o; /* a restart: its slot and counters again */
			}
			break;
		}
	}
	if (e) {
		f->st.refused++;
		c->refusing = true;
		errmsg(c, m);
		pthread_mutex_unlock(&f->lock);
		fprintf(stderr, "peerdma forward: a consumer: %s\n", m);
		send_welcome(f, param->reply_ep, e, m);
		return UCS_OK;
	}
	if (slot != c) {
		slot->ep = c->ep;
		c->state = C_EMPTY;
		c->ep = NULL;
	}
	slot->state = C_LIVE;
	slot->st.live = true;
	slot->st.connects++;
	slot->st.stalled = false;
	slot->credits = h.credits < f->a.max_credits ? h.credits : f->a.max_credits;
	slot->inflight = 0;
	slot->no_credit_since = 0;
	slot->granted = false;
	slot->ended = false;
	snprintf(slot->st.name, sizeof(slot->st.name), "%s", h.name);
	slot->nstreams = h.nstreams;
	memcpy(slot->streams, h.streams, h.nstreams * sizeof(h.streams[0]));
	slot->st.nstreams = h.nstreams;
	for (uint32_t i = 0; i < h.nstreams && i < 8; i++)
		slot->st.streams[i] = h.streams[i];
	pthread_mutex_unlock(&f->lock);
	fprintf(stderr, "peerdma forward: consumer '%s' connected (%s%u stream ID(s))%s\n", h.name,
		h.nstreams ? "" : "every stream, ", h.nstreams, slot->st.connects > 1 ? ", again" : "");
	send_welcome(f, param->reply_ep, 0, "welcome");
	return UCS_OK;
}

static ucs_status_t on_credit(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			      const ucp_am_recv_param_t *param)
{
	struct pdma_fwd *f = arg;
	struct fwd_consumer *c;
	uint32_t n;

	(void)data;
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
		return UCS_OK;
	pthread_mutex_lock(&f->lock);
	c = by_ep(f, param->reply_ep);
	if (c && c->state == C_LIVE) {
		if (len || pdma_fwd_credit_get(hdr, hlen, &n)) {
			consumer_gone(f, c, "malformed CREDIT: dropped");
			f->st.refused++;
		} else {
			/* never more than the cap in flight, whatever it says */
			uint64_t t = (uint64_t)c->credits + n;
			c->credits = t > f->a.max_credits ? f->a.max_credits : (uint32_t)t;
			c->no_credit_since = 0;
			c->granted = true;
		}
	}
	pthread_mutex_unlock(&f->lock);
	return UCS_OK;
}

static bool wants(const struct fwd_consumer *c, uint32_t sid)
{
	if (!c->nstreams)
		return true;
	for (uint32_t i = 0; i < c->nstreams; i++)
		if (c->streams[i] == sid)
			return true;
	return false;
}

static void drop_for(struct fwd_consumer *c, const struct pdma_block *b, bool gone, double now)
{
	if (gone)
		c->st.gone_blocks++;
	else
		c->st.no_credit_blocks++;
	c->st.dropped_packets += b->npackets;
	/* before its first grant a consumer is still subscribing: its blocks
	 * are counted, but it is not stalled */
	if (!gone && c->granted && !c->no_credit_since)
		c->no_credit_since = now;
}

static struct fwd_qent q_pop(struct fwd_consumer *c)
{
	struct fwd_qent e = c->q[c->qhead];

	c->qhead = (c->qhead + 1) % PDMA_FWD_QUEUE;
	c->qlen--;
	return e;
}

/* The oldest block queued for c, dropped: counted as its own. Lock held
 * (f->lock before the blocks layer's: nothing takes them the other way). */
static void q_drop_oldest(struct fwd_consumer *c, bool gone, double now)
{
	struct pdma_block *b = q_pop(c).b;

	drop_for(c, b, gone, now);
	pdma_block_release(b);
}

/* Every block queued for c, dropped (it is gone, or out of time). */
static void q_drop_all(struct fwd_consumer *c, bool gone, double now)
{
	while (c->qlen)
		q_drop_oldest(c, gone, now);
}

/* One block from the session into the queue of every consumer that wants it;
 * a full queue drops its oldest (no credit for that long). */
static void route(struct pdma_fwd *f, struct pdma_block *b)
{
	const double now = pdma_ucx_now();
	uint64_t no;

	pthread_mutex_lock(&f->lock);
	no = ++f->st.blocks_in;
	for (uint32_t i = 0; i < f->nc; i++) {
		struct fwd_consumer *c = &f->c[i];

		if ((c->state != C_LIVE && c->state != C_GONE) || !wants(c, b->stream_id))
			continue;
		if (c->state == C_GONE) {
			drop_for(c, b, true, now);
			continue;
		}
		if (c->qlen == PDMA_FWD_QUEUE)
			q_drop_oldest(c, false, now);
		pdma_block_retain(b);
		c->q[(c->qhead + c->qlen++) % PDMA_FWD_QUEUE] = (struct fwd_qent){ b, no };
		/* the stall timer runs while blocks wait for credit (not before
		 * its first grant: it may still be subscribing) */
		if (!c->credits && c->granted && !c->no_credit_since)
			c->no_credit_since = now;
	}
	pthread_mutex_unlock(&f->lock);
	pdma_block_release(b);
}

/* Block e of c's queue to c (lock held; released around the send). A GPU
 * block is copied to a staging buffer once, for every consumer it goes to:
 * a consumer sent it later (it was out of credit) finds the copy still
 * there (stage.h). */
static void send_block(struct pdma_fwd *f, struct fwd_consumer *c, struct fwd_qent e)
{
	struct pdma_block *b = e.b;
	const size_t bytes = (size_t)b->npackets * b->samples_per_packet * b->bytes_per_sample;
	const bool stage = f->a.stage || (b->mem != PDMA_BLOCK_HOST && f->stage_gpu);
	const size_t hlen = pdma_fwd_block_hdr_len(b->npackets);
	const uint32_t flags = bytes <= f->a.eager_max ? UCP_AM_SEND_FLAG_EAGER : 0;
	const void *data = b->data;
	ucp_mem_h memh = f->pool_memh;
	struct pdma_stage_buf *sb = NULL;
	struct fwd_send *s;

	if (stage) {
		bool copied;

		sb = pdma_fwd_stage_get(&f->stage, b, e.no, &copied, &f->st.stage_wait_seconds,
					&f->st.stage_seconds);
		if (!sb) {
			f->st.stage_drops++;
			drop_for(c, b, false, pdma_ucx_now());
			return;
		}
		if (copied) {
			f->st.staged_blocks++;
			f->st.staged_bytes += bytes;
		}
		data = sb->p;
		memh = f->stage.memh;
	}
	s = malloc(sizeof(*s) + hlen);
	if (!s) {
		if (sb)
			pdma_fwd_stage_put(&f->stage, sb);
		drop_for(c, b, false, pdma_ucx_now());
		return;
	}
	s->f = f;
	s->ep = c->ep;
	s->b = NULL;
	s->sb = sb; /* staged: the reference pdma_fwd_stage_get gave */
	if (!stage) {
		pdma_block_retain(b);
		s->b = b;
	}
	pdma_fwd_block_put(s->hdr, b);
	c->credits--;
	c->inflight++;
	c->st.sent_blocks++;
	c->st.sent_bytes += bytes;
	f->st.sent_blocks++;
	f->st.sent_bytes += bytes;
	f->st.eager_blocks += !!flags;
	/* send_done takes the lock: send without it */
	pthread_mutex_unlock(&f->lock);
	am_send(f, s->ep, PDMA_FWD_AM_BLOCK, s, hlen, data, bytes, memh, flags);
	pthread_mutex_lock(&f->lock);
}

/* What the consumers have credit for, oldest first, one block per consumer
 * in turn. */
static void flush(struct pdma_fwd *f)
{
	bool more = true;

	pthread_mutex_lock(&f->lock);
	while (more) {
		more = false;
		for (uint32_t i = 0; i < f->nc; i++) {
			struct fwd_consumer *c = &f->c[i];
			struct fwd_qent e;

			if (c->state != C_LIVE || !c->credits || !c->qlen)
				continue;
			e = q_pop(c);
			send_block(f, c, e);
			pdma_block_release(e.b);
			more = true;
		}
	}
	pthread_mutex_unlock(&f->lock);
}

/* What the main loop does between blocks: closes, HELLO timeouts, stalls. */
static void housekeeping(struct pdma_fwd *f)
{
	const double now = pdma_ucx_now();
	ucp_ep_h eps[sizeof(f->closing) / sizeof(f->closing[0])];
	uint32_t n;

	pthread_mutex_lock(&f->lock);
	for (uint32_t i = 0; i < f->nc; i++) {
		struct fwd_consumer *c = &f->c[i];
		char m[80];

		if (c->state == C_CONNECTING && !c->refusing && now - c->since > FWD_HELLO_MS / 1000.0) {
			f->st.refused++;
			fprintf(stderr, "peerdma forward: a connection sent no HELLO in %d ms: dropped\n",
				FWD_HELLO_MS);
			consumer_gone(f, c, "no HELLO");
		} else if (c->state == C_CONNECTING && c->refusing && now - c->since > 1.0) {
			consumer_gone(f, c, NULL); /* its WELCOME had a second to go */
		} else if (c->state == C_LIVE && f->a.stall_ms && c->no_credit_since &&
			   (now - c->no_credit_since) * 1000 > f->a.stall_ms) {
			snprintf(m, sizeof(m), "no credit for %u ms: dropped", f->a.stall_ms);
			fprintf(stderr, "peerdma forward: consumer '%s': %s\n", c->st.name, m);
			c->st.stalled = true;
			consumer_gone(f, c, m);
		}
	}
	n = f->nclosing;
	memcpy(eps, f->closing, n * sizeof(eps[0]));
	f->nclosing = 0;
	pthread_mutex_unlock(&f->lock);
	for (uint32_t i = 0; i < n; i++) {
		/* force: a dead or stalled peer's sends are cancelled, their
		 * blocks released (send_done) */
		pdma_ucx_close_ep(&f->u, eps[i], 2000);
		pthread_mutex_lock(&f->lock);
		for (uint32_t k = 0; k < f->nc; k++)
			if (f->c[k].ep == eps[i]) {
				f->c[k].ep = NULL;
				f->c[k].inflight = 0;
			}
		pthread_mutex_unlock(&f->lock);
	}
}

/* Sleeps until UCX has an event, or (sub) the subscription a block or its
 * end, or ms pass. A block must wake the thread at once: the source
 * publishes between UCX's events, and a block left for the next one (or for
 * the timeout) stalls the pipeline. */
static void idle_wait(struct pdma_fwd *f, int ms, bool sub)
{
	struct pollfd pfd[2] = { { .fd = f->efd, .events = POLLIN },
				 { .fd = f->sub_efd, .events = POLLIN } };
	uint64_t n;

	if (f->u.api->worker_arm(f->u.worker) != UCS_OK ||
	    (sub && pdma_sub_arm(f->sub, f->sub_efd)))
		return;
	/* a wake-up is spent where it is seen: one left from an earlier arm
	 * only makes this poll return at once */
	if (poll(pfd, sub ? 2 : 1, ms) > 0 && sub && (pfd[1].revents & POLLIN))
		(void)!read(f->sub_efd, &n, sizeof(n));
}

/* After the session ended: END to every live consumer once its blocks are
 * out, then the endpoints closed (flushed). */
static void finish(struct pdma_fwd *f)
{
	double end = pdma_ucx_now() + 10;
	uint32_t left;

	do {
		pdma_ucx_progress(&f->u);
		flush(f);
		housekeeping(f);
		left = 0;
		pthread_mutex_lock(&f->lock);
		for (uint32_t i = 0; i < f->nc; i++) {
			struct fwd_consumer *c = &f->c[i];
			struct fwd_send *s;
			struct pdma_fwd_end e;

			if (c->state != C_LIVE || c->ended)
				continue;
			if (c->inflight || c->qlen) {
				left++;
				continue;
			}
			c->ended = true;
			e.dropped_blocks = c->st.no_credit_blocks + c->st.gone_blocks;
			e.dropped_packets = c->st.dropped_packets;
			s = calloc(1, sizeof(*s) + PDMA_FWD_END_LEN);
			if (!s)
				continue;
			s->f = f;
			pthread_mutex_unlock(&f->lock);
			am_send(f, c->ep, PDMA_FWD_AM_END, s, pdma_fwd_end_put(s->hdr, &e), NULL, 0, NULL, 0);
			pthread_mutex_lock(&f->lock);
		}
		pthread_mutex_unlock(&f->lock);
	} while ((left || f->inflight) && pdma_ucx_now() < end);
	/* Each consumer closes its end once END and every block before it are
	 * in (consume.c). Wait for that: a forced close here resets the
	 * connection, and what the consumer had not read yet (the last blocks,
	 * END) would be lost. The rest are closed after 5 s. */
	end = pdma_ucx_now() + 5;
	do {
		if (!pdma_ucx_progress(&f->u))
			idle_wait(f, 1, false);
		housekeeping(f);
		left = 0;
		pthread_mutex_lock(&f->lock);
		for (uint32_t i = 0; i < f->nc; i++)
			left += f->c[i].state == C_LIVE && f->c[i].ended;
		pthread_mutex_unlock(&f->lock);
	} while (left && pdma_ucx_now() < end);
	for (uint32_t i = 0; i < f->nc; i++) {
		if (f->c[i].state != C_LIVE || !f->c[i].ep)
			continue;
		/* what still waits for credit after the 10 s is dropped */
		pthread_mutex_lock(&f->lock);
		q_drop_all(&f->c[i], false, pdma_ucx_now());
		pthread_mutex_unlock(&f->lock);
		/* force: every send, END's too, has completed (or the 10 s are
		 * up); a flush would wait for a consumer that keeps its end
		 * open after END */
		pdma_ucx_close_ep(&f->u, f->c[i].ep, 2000);
		f->c[i].ep = NULL;
		f->c[i].state = C_GONE;
		f->c[i].st.live = false;
	}
	housekeeping(f);
	pdma_ucx_progress(&f->u);
}

static void *fwd_main(void *arg)
{
	struct pdma_fwd *f = arg;
	double hk_next = 0;

	while (!atomic_load(&f->quit)) {
		struct pdma_block *b;
		unsigned k = pdma_ucx_progress(&f->u);
		int e = pdma_sub_next(f->sub, &b, 0);

		if (!e) {
			route(f, b);
			flush(f);
			/* A forwarder that is behind never finds its
			 * subscription empty: the HELLO and stall timers and
			 * the endpoint closes still run, every 10 ms. */
			if (pdma_ucx_now() >= hk_next) {
				housekeeping(f);
				hk_next = pdma_ucx_now() + 0.01;
			}
			continue;
		}
		flush(f); /* credits that came back */
		if (e == -EPIPE)
			break;
		housekeeping(f);
		/* a block or a UCX event wakes it at once; the timeout is
		 * only housekeeping's tick (HELLO and stall timers) */
		if (!k)
			idle_wait(f, 10, true);
	}
	finish(f);
	return NULL;
}

/* The forwarder on a subscription of its own (backpressure): the session's
 * (pdma_fwd_open), or any blocks layer's (bench/forward: a source of
 * synthetic blocks). It takes the subscription over: pdma_fwd_close closes
 * it, and so does a failure here. */
int pdma_fwd_open_sub(struct pdma_sub *sub, const struct pdma_fwd_attr *a, struct pdma_fwd **out,
		      char *msg, size_t msglen)
{
	struct pdma_fwd *f;
	ucp_listener_params_t lp = { 0 };
	ucp_listener_attr_t la = { 0 };
	ucp_am_handler_param_t hp = { 0 };
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int ret;

	if (msg && msglen)
		msg[0] = 0;
	if (!sub || !a || a->size < sizeof(*a) || !out || !a->addr ||
	    inet_pton(AF_INET, a->addr, &sin.sin_addr) != 1 || (a->stage && !a->stage_buffers) ||
	    !a->max_credits) {
		if (msg)
			snprintf(msg, msglen, "bad forwarder attributes (address?)");
		pdma_sub_close(sub);
		return -EINVAL;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		pdma_sub_close(sub);
		return -ENOMEM;
	}
	f->a = *a;
	f->efd = -1;
	f->sub_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->sub_efd < 0) {
		ret = -errno;
		pdma_sub_close(sub);
		free(f);
		return ret;
	}
	pthread_mutex_init(&f->lock, NULL);
	f->sub = sub;
	f->bl = f->sub->bl;
	ret = pdma_ucx_open(&f->u, msg, msglen);
	if (ret)
		goto err;
	/* the session's pool, mapped once: blocks go from where peerdma put
	 * them. Host (and pinned host) memory always; device memory only
	 * where UCX has the CUDA memory type, else it is staged. */
	f->stage_gpu = f->bl->mem.kind == PDMA_BLOCK_CUDA && !f->u.cuda;
	if (!f->stage_gpu) {
		size_t n = (size_t)f->bl->cfg.max_streams * f->bl->pool * f->bl->buf_bytes;
		ucs_memory_type_t mt = f->bl->mem.kind == PDMA_BLOCK_CUDA ? UCS_MEMORY_TYPE_CUDA :
									     UCS_MEMORY_TYPE_HOST;

		if (pdma_ucx_map(&f->u, f->bl->pool_mem, n, mt, &f->pool_memh))
			f->pool_memh = NULL; /* sent without a memh: UCX registers as it goes */
	}
	if (f->stage_gpu || f->a.stage) {
		ret = pdma_fwd_stage_open(&f->stage, &f->u, f->bl,
					  f->a.stage_buffers ? f->a.stage_buffers : 64, msg, msglen);
		if (ret)
			goto err;
	}
	snprintf(f->desc, sizeof(f->desc), "%s; blocks in %s memory: %s", f->u.desc,
		 f->bl->mem.kind == PDMA_BLOCK_HOST ? "host" :
		 f->bl->mem.kind == PDMA_BLOCK_CUDA ? "GPU" : "pinned host",
		 f->stage_gpu ? "staged through host memory (this UCX has no CUDA memory type)" :
		 f->a.stage ? "staged through host memory (--stage)" :
		 f->bl->mem.kind == PDMA_BLOCK_CUDA ? "sent directly from GPU memory (UCX has CUDA)" :
		 "sent directly from the block buffers");
	if (f->stage.mem) {
		size_t n = strlen(f->desc);

		snprintf(f->desc + n, sizeof(f->desc) - n, ", %u staging buffers %s", f->stage.n,
			 f->stage.pin);
	}
	f->st.ucx_cuda = f->u.cuda;
	hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG;
	hp.arg = f;
	hp.id = PDMA_FWD_AM_HELLO;
	hp.cb = on_hello;
	if (f->u.api->worker_set_am_recv_handler(f->u.worker, &hp) != UCS_OK)
		goto ucx_err;
	hp.id = PDMA_FWD_AM_CREDIT;
	hp.cb = on_credit;
	if (f->u.api->worker_set_am_recv_handler(f->u.worker, &hp) != UCS_OK)
		goto ucx_err;
	if (f->u.api->worker_get_efd(f->u.worker, &f->efd) != UCS_OK)
		goto ucx_err;
	sin.sin_port = htons(a->port);
	lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
	lp.sockaddr.addr = (const struct sockaddr *)&sin;
	lp.sockaddr.addrlen = sizeof(sin);
	lp.conn_handler.cb = conn_request;
	lp.conn_handler.arg = f;
	ucs_status_t st = f->u.api->listener_create(f->u.worker, &lp, &f->listener);
	if (st != UCS_OK) {
		ret = st == UCS_ERR_BUSY ? -EADDRINUSE : -EIO;
		if (msg)
			snprintf(msg, msglen, "UCX listener on %s:%u: %s", a->addr, a->port,
				 f->u.api->status_string(st));
		goto err;
	}
	la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
	if (f->u.api->listener_query(f->listener, &la) != UCS_OK)
		goto ucx_err;
	f->port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
	*out = f;
	return 0;
ucx_err:
	ret = -EIO;
	if (msg)
		snprintf(msg, msglen, "UCX: setting up the forwarder's worker failed");
err:
	if (f->listener)
		f->u.api->listener_destroy(f->listener);
	pdma_fwd_stage_close(&f->stage, &f->u);
	if (f->pool_memh)
		f->u.api->mem_unmap(f->u.ctx, f->pool_memh);
	if (f->u.ctx)
		pdma_ucx_close(&f->u);
	pdma_sub_close(f->sub);
	close(f->sub_efd);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return ret;
}

int pdma_fwd_open(struct pdma_ingest *ing, const struct pdma_fwd_attr *a, struct pdma_fwd **out,
		  char *msg, size_t msglen)
{
	struct pdma_sub_attr sa;
	struct pdma_sub *sub;
	int ret;

	if (!ing || !a || !out) {
		if (msg)
			snprintf(msg, msglen, "bad forwarder attributes");
		return -EINVAL;
	}
	pdma_sub_attr_init(&sa);
	/* the forwarder keeps what the session publishes: when the network
	 * falls behind, the loss is at the socket, counted there. Per
	 * consumer it never waits (credits). */
	sa.policy = PDMA_SUB_BACKPRESSURE;
	sa.depth = PDMA_FWD_SUB_DEPTH;
	ret = pdma_ingest_subscribe(ing, &sa, &sub);
	if (ret) {
		if (msg)
			snprintf(msg, msglen, "subscribing to the session: %s (blocks enabled?)",
				 strerror(-ret));
		return ret;
	}
	/* forward.h: with less, a dead consumer's sends hold up the others. */
	if (a->size >= sizeof(*a) && sub->bl->pool < PDMA_FWD_POOL_RESERVE + (uint64_t)a->max_credits) {
		if (msg)
			snprintf(msg, msglen,
				 "the session's block pool holds %u buffers a stream; forwarding needs "
				 "%u + max_credits (%u): raise window_blocks",
				 sub->bl->pool, (unsigned)PDMA_FWD_POOL_RESERVE, a->max_credits);
		pdma_sub_close(sub);
		return -EINVAL;
	}
	return pdma_fwd_open_sub(sub, a, out, msg, msglen);
}

uint16_t pdma_fwd_port(const struct pdma_fwd *f)
{
	return f->port;
}

const char *pdma_fwd_describe(const struct pdma_fwd *f)
{
	return f->desc;
}

int pdma_fwd_start(struct pdma_fwd *f)
{
	int e;

	if (f->has_th)
		return -EBUSY;
	e = pthread_create(&f->th, NULL, fwd_main, f);
	if (e)
		return -e;
	f->has_th = true;
	return 0;
}

void pdma_fwd_stats(struct pdma_fwd *f, struct pdma_fwd_stats *s)
{
	pthread_mutex_lock(&f->lock);
	*s = f->st;
	s->consumers = s->live = 0;
	s->dropped_blocks = s->dropped_packets = 0;
	for (uint32_t i = 0; i < f->nc; i++) {
		const struct fwd_consumer *c = &f->c[i];

		if (!c->st.connects)
			continue;
		s->consumers++;
		s->live += c->state == C_LIVE;
		s->dropped_blocks += c->st.no_credit_blocks + c->st.gone_blocks;
		s->dropped_packets += c->st.dropped_packets;
	}
	pthread_mutex_unlock(&f->lock);
}

int pdma_fwd_consumer(struct pdma_fwd *f, uint32_t i, struct pdma_fwd_consumer_stats *s)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&f->lock);
	for (uint32_t k = 0, n = 0; k < f->nc; k++) {
		if (!f->c[k].st.connects)
			continue;
		if (n++ == i) {
			*s = f->c[k].st;
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&f->lock);
	return ret;
}

void pdma_fwd_drain(struct pdma_fwd *f)
{
	if (!f || !f->has_th)
		return;
	/* the thread ends on its own once the session's stop has drained its
	 * subscription (-EPIPE), after END to every consumer; told to only
	 * where the session never started */
	if (!f->bl->started)
		atomic_store(&f->quit, true);
	pthread_join(f->th, NULL);
	f->has_th = false;
}

void pdma_fwd_close(struct pdma_fwd *f)
{
	if (!f)
		return;
	pdma_fwd_drain(f);
	pdma_sub_close(f->sub); /* before its wake-up fd goes */
	close(f->sub_efd);
	for (uint32_t i = 0; i < f->nc; i++)
		if (f->c[i].ep)
			pdma_ucx_close_ep(&f->u, f->c[i].ep, 1000);
	if (f->listener)
		f->u.api->listener_destroy(f->listener);
	if (f->pool_memh)
		f->u.api->mem_unmap(f->u.ctx, f->pool_memh);
	pdma_fwd_stage_close(&f->stage, &f->u);
	pdma_ucx_close(&f->u);
	pthread_mutex_destroy(&f->lock);
	free(f);
}
