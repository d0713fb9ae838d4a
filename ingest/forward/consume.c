// SPDX-License-Identifier: MIT
/* The consumer (include/peerdma/forward.h): one UCP endpoint to a
 * forwarder and a blocks layer of its own (ingest/blocks/) into which it
 * publishes what arrives, so the program reads remote blocks with the same
 * pdma_sub_next / pdma_block_release as local ones. A thread owns the
 * worker: each BLOCK gets a buffer of its stream's pool (by the local
 * subscriptions' policies, as the deframer's blocks do), its samples land
 * there (rendezvous: received straight into the mapped pool), it is
 * delivered, and a credit goes back. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "blocks/blocks.h"
#include "forward/consume.h"
#include "forward/ucx.h"
#include "forward/wire.h"

struct recv_ctx {
	struct pdma_consume *c;
	struct pdma_blk *b;
	uint64_t slot;            /* its place in arrival order */
};

/* A block in arrival order until every one before it is delivered:
 * rendezvous receives complete in any order, and a stream's blocks must
 * reach the subscriptions in the order the forwarder sent them (a SigMF
 * writer drops what goes back in time). */
struct arrival {
	struct pdma_blk *b;       /* NULL: dropped here (its credit still goes back) */
	bool done;
};

struct pdma_consume {
	struct pdma_consume_attr a;
	struct pdma_consume_faults fl;
	uint32_t streams[PDMA_FWD_MAX_SUBS];
	struct pdma_ucx u;
	ucp_ep_h ep;
	int efd;
	struct pdma_blocks *bl;
	ucp_mem_h memh;
	uint32_t B, max_payload;
	uint64_t rate;
	uint32_t nids;
	uint32_t *ids;            /* stream table: index -> stream ID */
	bool got_welcome;
	struct pdma_fwd_welcome w;
	uint32_t credit_pending;
	bool granted_once;
	uint32_t recvs;           /* rendezvous receives in flight */
	struct arrival *arr;      /* [narr] ring: head .. tail */
	uint32_t narr;
	uint64_t head, tail;
	uint64_t *mask_tmp;
	pthread_t th;
	bool has_th;
	atomic_bool quit, ended_subs;
	pthread_mutex_t lock;     /* st */
	struct pdma_consume_stats st;
};

void pdma_consume_attr_init(struct pdma_consume_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->addr = "127.0.0.1";
	a->name = "consumer";
	a->max_streams = 16;
	a->pool_blocks = 16;
	a->timeout_ms = 5000;
}

static void fail(struct pdma_consume *c, int err)
{
	pthread_mutex_lock(&c->lock);
	if (!c->st.ended) {
		c->st.lost = true;
		if (!c->st.error)
			c->st.error = err;
	}
	pthread_mutex_unlock(&c->lock);
}

/* After a protocol error nothing the forwarder sends counts (DESIGN.md):
 * not a later block, not an END that would make the loss look like an end. */
static bool distrusted(struct pdma_consume *c)
{
	bool lost;

	pthread_mutex_lock(&c->lock);
	lost = c->st.lost;
	pthread_mutex_unlock(&c->lock);
	return lost;
}

static void ep_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)ep;
	fail(arg, pdma_ucx_errno(status) ? pdma_ucx_errno(status) : -ECONNRESET);
}

static ucs_status_t on_welcome(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			       const ucp_am_recv_param_t *param)
{
	struct pdma_consume *c = arg;

	(void)data;
	(void)param;
	if (c->got_welcome)
		return UCS_OK;
	int e = len ? -EPROTO : pdma_fwd_welcome_get(hdr, hlen, &c->w);

	if (e == -EPROTONOSUPPORT) {
		uint32_t v = c->w.version;

		c->w.status = e;
		snprintf(c->w.msg, sizeof(c->w.msg), "the forwarder speaks protocol version %u, not %u",
			 v, PDMA_FWD_VERSION);
	} else if (e) {
		c->w.status = -EPROTO;
		snprintf(c->w.msg, sizeof(c->w.msg), "malformed WELCOME from the forwarder");
	}
	c->got_welcome = true;
	return UCS_OK;
}

static ucs_status_t on_end(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			   const ucp_am_recv_param_t *param)
{
	struct pdma_consume *c = arg;
	struct pdma_fwd_end e;

	(void)data;
	(void)param;
	if (len || pdma_fwd_end_get(hdr, hlen, &e)) {
		fail(c, -EPROTO);
		return UCS_OK;
	}
	pthread_mutex_lock(&c->lock);
	if (!c->st.lost) {
		c->st.ended = true;
		c->st.fwd_dropped_blocks = e.dropped_blocks;
		c->st.fwd_dropped_packets = e.dropped_packets;
	}
	pthread_mutex_unlock(&c->lock);
	return UCS_OK;
}

/* The block's samples are in its buffer: to the local subscriptions. */
static void publish(struct pdma_consume *c, struct pdma_blk *b)
{
	struct pdma_blocks *bl = c->bl;
	/* read before delivery: the buffer is the consumers' after it */
	const uint64_t gaps = b->pub.gaps, bytes = b->pub.nsamples * 4;
	uint32_t n;

	pthread_mutex_lock(&bl->lock);
	n = pdma_blocks_deliver(bl, b);
	pthread_mutex_unlock(&bl->lock);
	if (n) {
		atomic_fetch_add_explicit(&bl->published, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&bl->gap_packets, gaps, memory_order_relaxed);
	}
	pthread_mutex_lock(&c->lock);
	c->st.blocks++;
	c->st.bytes += bytes;
	c->st.gap_packets += gaps;
	pthread_mutex_unlock(&c->lock);
}

/* Every block whose predecessors are all in: published in arrival order. */
static void flush_arrivals(struct pdma_consume *c)
{
	while (c->head < c->tail && c->arr[c->head % c->narr].done) {
		struct arrival *a = &c->arr[c->head % c->narr];

		if (a->b)
			publish(c, a->b);
		a->b = NULL;
		a->done = false;
		c->head++;
		c->credit_pending++;
	}
}

/* A place in arrival order: -EPROTO when the forwarder sent more blocks
 * than it had credits for. */
static int arrive(struct pdma_consume *c, uint64_t *slot)
{
	if (c->tail - c->head == c->narr)
		return -EPROTO;
	*slot = c->tail++;
	return 0;
}

static void arrived(struct pdma_consume *c, uint64_t slot, struct pdma_blk *b)
{
	c->arr[slot % c->narr].b = b;
	c->arr[slot % c->narr].done = true;
	flush_arrivals(c);
}

static void recv_done(void *req, ucs_status_t status, size_t length, void *user)
{
	struct recv_ctx *r = user;
	struct pdma_consume *c = r->c;

	c->recvs--;
	if (status != UCS_OK || length != r->b->pub.nsamples * 4) {
		pthread_mutex_lock(&c->bl->lock);
		pdma_blocks_put_buf(c->bl, r->b);
		pthread_mutex_unlock(&c->bl->lock);
		fail(c, status != UCS_OK ? pdma_ucx_errno(status) : -EPROTO);
		arrived(c, r->slot, NULL);
	} else {
		arrived(c, r->slot, r->b);
	}
	free(r);
	if (req)
		c->u.api->request_free(req);
}

/* The stream table index of sid, a new one the first time. */
static int stream_idx(struct pdma_consume *c, uint32_t sid, uint32_t *idx)
{
	for (uint32_t i = 0; i < c->nids; i++)
		if (c->ids[i] == sid) {
			*idx = i;
			return 0;
		}
	if (c->nids == c->a.max_streams)
		return -ENOSPC;
	/* blocks.c's deframer would have opened the stream: its ID is what the
	 * policies match subscriptions by */
	c->ids[c->nids] = sid;
	c->bl->st[c->nids].have = true;
	c->bl->st[c->nids].stream_id = sid;
	atomic_fetch_add_explicit(&c->bl->streams, 1, memory_order_relaxed);
	*idx = c->nids++;
	return 0;
}

static bool asked(const struct pdma_consume *c, uint32_t sid)
{
	if (!c->a.nstreams)
		return true;
	for (uint32_t i = 0; i < c->a.nstreams; i++)
		if (c->streams[i] == sid)
			return true;
	return false;
}

static ucs_status_t on_block(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *param)
{
	struct pdma_consume *c = arg;
	const bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
	struct pdma_block h = { 0 };
	struct pdma_blk *b;
	uint32_t idx;
	uint64_t slot;

	if (distrusted(c)) {
		if (rndv)
			c->u.api->am_data_release(c->u.worker, data);
		return UCS_OK;
	}
	if (!c->bl || pdma_fwd_block_get(hdr, hlen, c->B, c->max_payload, &h, c->mask_tmp) ||
	    len != h.nsamples * 4 || !asked(c, h.stream_id) || arrive(c, &slot)) {
		/* a forwarder that breaks the protocol: nothing it sends is
		 * trusted from here on */
		if (rndv)
			c->u.api->am_data_release(c->u.worker, data);
		fail(c, -EPROTO);
		return UCS_OK;
	}
	b = NULL;
	if (!stream_idx(c, h.stream_id, &idx)) {
		pthread_mutex_lock(&c->bl->lock);
		b = pdma_blocks_get_buf(c->bl, idx);
		pthread_mutex_unlock(&c->bl->lock);
	}
	if (!b) {
		/* every buffer of the stream held by the program (or too many
		 * streams): dropped here, counted, and its credit goes back */
		if (rndv)
			c->u.api->am_data_release(c->u.worker, data);
		atomic_fetch_add_explicit(&c->bl->window_drops, h.npackets, memory_order_relaxed);
		pthread_mutex_lock(&c->lock);
		c->st.local_drops++;
		pthread_mutex_unlock(&c->lock);
		arrived(c, slot, NULL);
		return UCS_OK;
	}
	/* the public view: the forwarder's metadata, this buffer's memory */
	void *buf = b->pub.data;
	b->pub = h;
	b->pub.data = buf;
	b->pub.gap_mask = b->mask;
	memcpy(b->mask, c->mask_tmp, (h.npackets + 63) / 64 * sizeof(uint64_t));
	b->pub.mem = PDMA_BLOCK_HOST;
	b->pub.device = 0;
	b->pub.cuda_event = NULL;
	if (!rndv) {
		memcpy(buf, data, len);
		arrived(c, slot, b);
		return UCS_OK;
	}
	struct recv_ctx *r = malloc(sizeof(*r));
	ucp_request_param_t p = { 0 };
	ucs_status_ptr_t rq;

	if (!r) {
		c->u.api->am_data_release(c->u.worker, data);
		pthread_mutex_lock(&c->bl->lock);
		pdma_blocks_put_buf(c->bl, b);
		pthread_mutex_unlock(&c->bl->lock);
		fail(c, -ENOMEM);
		arrived(c, slot, NULL);
		return UCS_OK;
	}
	r->c = c;
	r->b = b;
	r->slot = slot;
	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	p.cb.recv_am = recv_done;
	p.user_data = r;
	if (c->memh) {
		p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
		p.memh = c->memh;
	}
	c->recvs++;
	rq = c->u.api->am_recv_data_nbx(c->u.worker, data, buf, len, &p);
	if (rq == NULL)
		recv_done(NULL, UCS_OK, len, r);
	else if (UCS_PTR_IS_ERR(rq))
		recv_done(NULL, UCS_PTR_STATUS(rq), 0, r);
	return UCS_OK;
}

/* A control AM (HELLO, CREDIT): header copied, freed when sent. */
struct ctl {
	const struct pdma_ucp_api *api; /* for the completion, which has no c */
	uint8_t hdr[PDMA_FWD_HELLO_FIXED + 4 * PDMA_FWD_MAX_SUBS];
};

static void ctl_done(void *req, ucs_status_t status, void *user)
{
	const struct pdma_ucp_api *api = ((struct ctl *)user)->api;

	(void)status;
	free(user);
	if (req)
		api->request_free(req);
}

static int ctl_send(struct pdma_consume *c, unsigned id, struct ctl *m, size_t hlen)
{
	ucp_request_param_t p = { 0 };
	ucs_status_ptr_t r;

	/* REPLY: the forwarder tells its consumers apart by the endpoint */
	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			 UCP_OP_ATTR_FIELD_FLAGS;
	p.flags = UCP_AM_SEND_FLAG_REPLY;
	p.cb.send = ctl_done;
	p.user_data = m;
	m->api = c->u.api;
	r = c->u.api->am_send_nbx(c->ep, id, m->hdr, hlen, NULL, 0, &p);
	if (r == NULL) {
		free(m);
		return 0;
	}
	if (UCS_PTR_IS_ERR(r)) {
		free(m);
		return pdma_ucx_errno(UCS_PTR_STATUS(r));
	}
	return 0;
}

static void send_credits(struct pdma_consume *c)
{
	struct ctl *m;

	/* the fault: the first grant (at start), then never a credit back */
	if (!c->credit_pending || (c->fl.no_credits && c->granted_once))
		return;
	m = malloc(sizeof(*m));
	if (!m)
		return;
	if (!ctl_send(c, PDMA_FWD_AM_CREDIT, m, pdma_fwd_credit_put(m->hdr, c->credit_pending))) {
		c->credit_pending = 0;
		c->granted_once = true;
	}
}

static bool done(struct pdma_consume *c)
{
	bool d;

	pthread_mutex_lock(&c->lock);
	/* END comes after the blocks' sends completed; their receives here
	 * may still be finishing */
	d = (c->st.ended && !c->recvs) || c->st.lost;
	pthread_mutex_unlock(&c->lock);
	return d;
}

static void *consume_main(void *arg)
{
	struct pdma_consume *c = arg;
	struct pollfd pfd = { .fd = c->efd, .events = POLLIN };

	c->credit_pending = c->a.pool_blocks;
	while (!atomic_load(&c->quit) && !done(c)) {
		unsigned k = pdma_ucx_progress(&c->u);

		/* credits back in batches of 4 while busy, at once when idle:
		 * the forwarder may use fewer than granted (its max_credits),
		 * so a batch must stay well below any window it keeps */
		if (!k || c->credit_pending >= 4)
			send_credits(c);
		if (!k && c->u.api->worker_arm(c->u.worker) == UCS_OK)
			poll(&pfd, 1, 50);
	}
	pdma_ucx_progress(&c->u);
	/* END and every block before it are in: close this end now, which is
	 * the forwarder's signal to close its own (forward.c: finish) */
	pthread_mutex_lock(&c->lock);
	bool bye = c->st.ended && !c->st.lost;
	pthread_mutex_unlock(&c->lock);
	if (c->ep && bye) {
		pdma_ucx_close_ep(&c->u, c->ep, 1000);
		c->ep = NULL;
	}
	pdma_blocks_end_subs(c->bl);
	atomic_store(&c->ended_subs, true);
	return NULL;
}

int pdma_consume_open_faults(const struct pdma_consume_attr *a, const struct pdma_consume_faults *fl,
			     struct pdma_consume **out, char *msg, size_t msglen)
{
	struct pdma_consume *c;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	ucp_ep_params_t ep = { 0 };
	ucp_am_handler_param_t hp = { 0 };
	struct pdma_fwd_hello h = { 0 };
	struct pdma_dfr_config cfg = { 0 };
	struct ctl *m;
	ucs_status_t st;
	double end;
	int ret;

	if (msg && msglen)
		msg[0] = 0;
	if (!a || a->size < sizeof(*a) || !out || !a->addr || inet_pton(AF_INET, a->addr, &sin.sin_addr) != 1 ||
	    !a->port || !a->name || !a->name[0] || strlen(a->name) > PDMA_FWD_NAME_LEN ||
	    a->nstreams > PDMA_FWD_MAX_SUBS || (a->nstreams && !a->streams) || !a->max_streams ||
	    a->max_streams > 65535 || a->pool_blocks < 2) {
		if (msg)
			snprintf(msg, msglen, "bad consumer attributes");
		return -EINVAL;
	}
	for (const char *p = a->name; *p; p++)
		if (*p < 0x20 || *p > 0x7e) {
			if (msg)
				snprintf(msg, msglen, "consumer name: printable ASCII only");
			return -EINVAL;
		}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->a = *a;
	if (fl)
		c->fl = *fl;
	if (a->nstreams) /* streams may be NULL with none */
		memcpy(c->streams, a->streams, a->nstreams * sizeof(*a->streams));
	c->a.streams = c->streams;
	c->efd = -1;
	pthread_mutex_init(&c->lock, NULL);
	c->ids = calloc(a->max_streams, sizeof(*c->ids));
	if (!c->ids) {
		ret = -ENOMEM;
		goto err;
	}
	ret = pdma_ucx_open(&c->u, msg, msglen);
	if (ret)
		goto err;
	hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG;
	hp.arg = c;
	hp.id = PDMA_FWD_AM_WELCOME;
	hp.cb = on_welcome;
	st = c->u.api->worker_set_am_recv_handler(c->u.worker, &hp);
	hp.id = PDMA_FWD_AM_BLOCK;
	hp.cb = on_block;
	if (st == UCS_OK)
		st = c->u.api->worker_set_am_recv_handler(c->u.worker, &hp);
	hp.id = PDMA_FWD_AM_END;
	hp.cb = on_end;
	if (st == UCS_OK)
		st = c->u.api->worker_set_am_recv_handler(c->u.worker, &hp);
	if (st == UCS_OK)
		st = c->u.api->worker_get_efd(c->u.worker, &c->efd);
	sin.sin_port = htons(a->port);
	ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
			UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
	ep.sockaddr.addr = (const struct sockaddr *)&sin;
	ep.sockaddr.addrlen = sizeof(sin);
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = ep_err;
	ep.err_handler.arg = c;
	if (st == UCS_OK)
		st = c->u.api->ep_create(c->u.worker, &ep, &c->ep);
	if (st != UCS_OK) {
		ret = pdma_ucx_errno(st);
		if (msg)
			snprintf(msg, msglen, "UCX: connecting to %s:%u: %s", a->addr, a->port,
				 c->u.api->status_string(st));
		goto err;
	}
	h.version = c->fl.version ? c->fl.version : PDMA_FWD_VERSION;
	h.credits = 0; /* granted at start, once subscribed */
	snprintf(h.name, sizeof(h.name), "%s", a->name);
	h.nstreams = a->nstreams;
	memcpy(h.streams, c->streams, a->nstreams * sizeof(*a->streams));
	m = malloc(sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		goto err;
	}
	size_t hl = pdma_fwd_hello_put(m->hdr, &h);
	if (c->fl.garbage_hello && getrandom(m->hdr, hl, 0) < 0)
		memset(m->hdr, 0xa5, hl);
	ret = ctl_send(c, PDMA_FWD_AM_HELLO, m, hl);
	end = pdma_ucx_now() + a->timeout_ms / 1000.0;
	while (!ret && !c->got_welcome && !c->st.lost && pdma_ucx_now() < end)
		pdma_ucx_progress(&c->u);
	if (!ret && !c->got_welcome)
		ret = c->st.lost ? (c->st.error ? c->st.error : -ECONNREFUSED) : -ETIMEDOUT;
	if (ret) {
		if (msg)
			snprintf(msg, msglen, "no WELCOME from %s:%u: %s", a->addr, a->port, strerror(-ret));
		goto err;
	}
	if (c->w.status) {
		ret = c->w.status;
		if (msg)
			snprintf(msg, msglen, "the forwarder refused: %s", c->w.msg);
		goto err;
	}
	c->B = c->w.block_packets;
	c->max_payload = c->w.max_payload;
	c->rate = c->w.sample_rate;
	/* a blocks layer as the session's: only the producer differs (the
	 * window it would copy from is unused: no deframer here) */
	cfg.max_streams = a->max_streams;
	cfg.out_pkts = 2 * c->B;
	cfg.max_payload = c->max_payload;
	cfg.bytes_per_sample = 4;
	cfg.sample_rate = c->rate;
	c->mask_tmp = calloc((c->B + 63) / 64, sizeof(uint64_t));
	/* blocks in flight are at most the credits granted */
	c->narr = a->pool_blocks;
	c->arr = calloc(c->narr, sizeof(*c->arr));
	ret = c->mask_tmp && c->arr ? pdma_blocks_open(&c->bl, &cfg, c->B, 0, a->pool_blocks, NULL, NULL) : -ENOMEM;
	if (ret) {
		if (msg)
			snprintf(msg, msglen, "blocks for %u packets of %u bytes: %s", c->B, c->max_payload,
				 strerror(-ret));
		goto err;
	}
	/* rendezvous data lands in the pool itself */
	if (pdma_ucx_map(&c->u, c->bl->pool_mem,
			 (size_t)a->max_streams * a->pool_blocks * c->bl->buf_bytes, UCS_MEMORY_TYPE_HOST,
			 &c->memh))
		c->memh = NULL;
	*out = c;
	return 0;
err:
	pdma_consume_close(c);
	return ret;
}

int pdma_consume_open(const struct pdma_consume_attr *a, struct pdma_consume **c, char *msg, size_t msglen)
{
	return pdma_consume_open_faults(a, NULL, c, msg, msglen);
}

uint32_t pdma_consume_block_packets(const struct pdma_consume *c)
{
	return c->B;
}

uint64_t pdma_consume_sample_rate(const struct pdma_consume *c)
{
	return c->rate;
}

int pdma_consume_subscribe(struct pdma_consume *c, const struct pdma_sub_attr *a, struct pdma_sub **sub)
{
	if (!c)
		return -EINVAL;
	return pdma_blocks_subscribe(c->bl, a, sub);
}

int pdma_consume_start(struct pdma_consume *c)
{
	int e;

	if (!c || c->has_th)
		return -EINVAL;
	pdma_blocks_start(c->bl, true);
	e = pthread_create(&c->th, NULL, consume_main, c);
	if (e)
		return -e;
	c->has_th = true;
	return 0;
}

bool pdma_consume_ended(struct pdma_consume *c)
{
	return atomic_load(&c->ended_subs);
}

void pdma_consume_stats(struct pdma_consume *c, struct pdma_consume_stats *s)
{
	pthread_mutex_lock(&c->lock);
	*s = c->st;
	pthread_mutex_unlock(&c->lock);
}

void pdma_consume_close(struct pdma_consume *c)
{
	if (!c)
		return;
	if (c->has_th) {
		atomic_store(&c->quit, true);
		pthread_join(c->th, NULL);
	}
	if (c->ep)
		pdma_ucx_close_ep(&c->u, c->ep, 1000);
	if (c->memh)
		c->u.api->mem_unmap(c->u.ctx, c->memh);
	if (c->u.ctx)
		pdma_ucx_close(&c->u);
	if (c->bl) {
		pdma_blocks_end_subs(c->bl);
		pdma_blocks_close(c->bl, NULL, NULL);
	}
	free(c->mask_tmp);
	free(c->arr);
	free(c->ids);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
