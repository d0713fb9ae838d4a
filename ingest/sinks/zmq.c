// SPDX-License-Identifier: MIT
/* The ZeroMQ sink: blocks published for GNU Radio's ZMQ SUB Source (zmq.h). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "sinks/gr_tags.h"
#include "sinks/zmq.h"

/* How long one blocking send or receive waits before checking cancel. */
#define ZMQ_SLICE_MS 100

struct zstream {
	struct pdma_zmq_stream_stats st;
	uint64_t next;          /* time line index the next message starts at */
	bool started;
	char topic[PDMA_ZMQ_TOPIC_LEN + 1];
};

struct pdma_zmq {
	struct pdma_zmq_attr a;
	void *ctx, *sock;
	atomic_bool cancel;
	struct pdma_zmq_stats st;
	struct zstream *s;
	uint32_t ns, cap, last;
	struct pdma_gr_tags hdr;
	int16_t *stage;         /* device blocks read to host memory (pdma_block_read) */
	size_t stage_len;
};

void pdma_zmq_attr_init(struct pdma_zmq_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->format = PDMA_ZMQ_CI16;
	a->hwm = 1000;
	a->sample_rate = 1000000;
	a->max_fill = 1u << 22;
	a->linger_ms = 5000;
}

void pdma_zmq_topic(uint32_t stream_id, char buf[PDMA_ZMQ_TOPIC_LEN + 1])
{
	snprintf(buf, PDMA_ZMQ_TOPIC_LEN + 1, "stream-%08x", stream_id);
}

static int zerr(char *msg, size_t msglen, const char *what)
{
	int e = zmq_errno();
	if (msg && msglen)
		snprintf(msg, msglen, "%s: %s", what, zmq_strerror(e));
	return e > 0 ? -e : -EIO;
}

int pdma_zmq_open(const struct pdma_zmq_attr *a, struct pdma_zmq **zp, char *msg, size_t msglen)
{
	if (msg && msglen)
		msg[0] = '\0';
	if (!a || !zp || !a->endpoint || !a->endpoint[0] || !a->sample_rate || a->hwm < 0 ||
	    (a->format != PDMA_ZMQ_CI16 && a->format != PDMA_ZMQ_CF32))
		return -EINVAL;
	struct pdma_zmq *z = calloc(1, sizeof(*z));
	if (!z)
		return -ENOMEM;
	z->a = *a;
	atomic_init(&z->cancel, false);
	int ret;
	z->ctx = zmq_ctx_new();
	if (!z->ctx) {
		ret = zerr(msg, msglen, "zmq_ctx_new");
		goto fail;
	}
	z->sock = zmq_socket(z->ctx, ZMQ_XPUB);
	if (!z->sock) {
		ret = zerr(msg, msglen, "zmq_socket");
		goto fail;
	}
	/* XPUB, not PUB: it hands us the subscriptions (the slow-joiner
	 * handshake, every one of them with VERBOSE), and NODROP makes a full
	 * subscriber queue wait instead of silently losing messages, which the
	 * flowgraph could not see. */
	int one = 1, slice = ZMQ_SLICE_MS;
	if (zmq_setsockopt(z->sock, ZMQ_XPUB_VERBOSE, &one, sizeof(one)) ||
	    zmq_setsockopt(z->sock, ZMQ_XPUB_NODROP, &one, sizeof(one)) ||
	    zmq_setsockopt(z->sock, ZMQ_SNDHWM, &a->hwm, sizeof(a->hwm)) ||
	    zmq_setsockopt(z->sock, ZMQ_SNDTIMEO, &slice, sizeof(slice)) ||
	    zmq_setsockopt(z->sock, ZMQ_LINGER, &a->linger_ms, sizeof(a->linger_ms))) {
		ret = zerr(msg, msglen, "zmq_setsockopt");
		goto fail;
	}
	if (zmq_bind(z->sock, a->endpoint)) {
		char what[300];
		snprintf(what, sizeof(what), "cannot bind %s", a->endpoint);
		ret = zerr(msg, msglen, what);
		goto fail;
	}
	*zp = z;
	return 0;
fail:
	if (z->sock)
		zmq_close(z->sock);
	if (z->ctx)
		zmq_ctx_term(z->ctx);
	free(z);
	return ret;
}

/* Reads the subscription messages waiting on the socket (byte 1 subscribe,
 * 0 unsubscribe, then the topic) into the subscriber count. */
static void drain_subscriptions(struct pdma_zmq *z)
{
	uint8_t m[64];
	int n;

	while ((n = zmq_recv(z->sock, m, sizeof(m), ZMQ_DONTWAIT)) >= 0) {
		if (n >= 1 && m[0] == 1)
			z->st.subscribers++;
		else if (n >= 1 && m[0] == 0)
			z->st.subscribers--;
	}
}

int pdma_zmq_wait_subscribers(struct pdma_zmq *z, int n, int timeout_ms)
{
	int waited = 0;

	for (;;) {
		drain_subscriptions(z);
		if (z->st.subscribers >= n)
			return 0;
		if (atomic_load(&z->cancel))
			return -ECANCELED;
		if (timeout_ms >= 0 && waited >= timeout_ms)
			return -ETIMEDOUT;
		int slice = ZMQ_SLICE_MS;
		if (timeout_ms >= 0 && timeout_ms - waited < slice)
			slice = timeout_ms - waited;
		zmq_pollitem_t it = { .socket = z->sock, .events = ZMQ_POLLIN };
		if (zmq_poll(&it, 1, slice) < 0 && zmq_errno() != EINTR)
			return -zmq_errno();
		waited += slice;
	}
}

void pdma_zmq_cancel(struct pdma_zmq *z)
{
	atomic_store(&z->cancel, true);
}

/* One frame, waiting out a slow subscriber (XPUB_NODROP answers EAGAIN when
 * a subscriber's queue is full) until cancelled. msg is consumed on success. */
static int send_frame(struct pdma_zmq *z, zmq_msg_t *m, int flags)
{
	bool waited = false;

	for (;;) {
		if (zmq_msg_send(m, z->sock, flags) >= 0)
			return 0;
		int e = zmq_errno();
		if (e != EAGAIN && e != EINTR)
			return -e;
		if (e == EAGAIN && !waited) {
			waited = true;
			z->st.send_waits++;
		}
		if (atomic_load(&z->cancel))
			return -ECANCELED;
	}
}

static struct zstream *stream_of(struct pdma_zmq *z, uint32_t id)
{
	if (z->last < z->ns && z->s[z->last].st.stream_id == id)
		return &z->s[z->last];
	for (uint32_t i = 0; i < z->ns; i++) {
		if (z->s[i].st.stream_id == id) {
			z->last = i;
			return &z->s[i];
		}
	}
	if (z->ns == z->cap) {
		uint32_t cap = z->cap ? 2 * z->cap : 8;
		struct zstream *s = realloc(z->s, cap * sizeof(*s));
		if (!s)
			return NULL;
		z->s = s;
		z->cap = cap;
	}
	struct zstream *s = &z->s[z->ns];
	memset(s, 0, sizeof(*s));
	s->st.stream_id = id;
	pdma_zmq_topic(id, s->topic);
	z->last = z->ns++;
	z->st.streams = z->ns;
	return s;
}

static size_t out_bytes(const struct pdma_zmq *z)
{
	return z->a.format == PDMA_ZMQ_CF32 ? 8 : 4;
}

/* Samples (CI16, or NULL for zeros) into the frame's payload. */
static void fill_payload(const struct pdma_zmq *z, uint8_t *dst, const int16_t *src, uint64_t n)
{
	if (!src) {
		memset(dst, 0, n * out_bytes(z));
	} else if (z->a.format == PDMA_ZMQ_CI16) {
		memcpy(dst, src, n * 4);
	} else {
		/* gr_complex: scale so that int16 full scale is 1.0 (exact in
		 * float32: every int16 / 32768 is representable). Stored with
		 * memcpy: after a tag header the payload has any alignment. */
		for (uint64_t i = 0; i < 2 * n; i++) {
			float f = (float)src[i] * (1.0f / 32768.0f);
			memcpy(dst + 4 * i, &f, sizeof(f));
		}
	}
}

/*
 * One message: topic frame, then [tag header] + n samples from src (NULL:
 * zeros). The payload is copied, never handed to ZeroMQ in place: the block
 * goes back to its window at once, where a message may wait in a
 * subscriber's queue for long (hwm messages).
 */
static int send_message(struct pdma_zmq *z, struct zstream *s, const int16_t *src, uint64_t n,
			char *msg, size_t msglen)
{
	size_t hl = z->a.tags ? z->hdr.len : 0;
	size_t pl = (size_t)n * out_bytes(z);
	zmq_msg_t topic, data;
	int ret;

	if (zmq_msg_init_size(&data, hl + pl))
		return zerr(msg, msglen, "zmq_msg_init_size");
	if (hl)
		memcpy(zmq_msg_data(&data), z->hdr.buf, hl);
	fill_payload(z, (uint8_t *)zmq_msg_data(&data) + hl, src, n);
	if (zmq_msg_init_size(&topic, PDMA_ZMQ_TOPIC_LEN)) {
		zmq_msg_close(&data);
		return zerr(msg, msglen, "zmq_msg_init_size");
	}
	memcpy(zmq_msg_data(&topic), s->topic, PDMA_ZMQ_TOPIC_LEN);
	ret = send_frame(z, &topic, ZMQ_SNDMORE);
	if (!ret)
		ret = send_frame(z, &data, 0);
	zmq_msg_close(&topic);
	zmq_msg_close(&data);
	if (ret) {
		if (msg && msglen && ret != -ECANCELED)
			snprintf(msg, msglen, "zmq send (stream 0x%x): %s", s->st.stream_id,
				 zmq_strerror(-ret));
		return ret;
	}
	z->st.messages++;
	z->st.bytes += hl + pl;
	s->st.messages++;
	s->st.samples += n;
	return 0;
}

/* rx_time, rx_rate (and rx_freq) at offset: where the time line (re)starts. */
static void tag_time(struct pdma_zmq *z, const struct pdma_block *b)
{
	double rate = (b->ctx_fields & PDMA_CTX_SAMPLE_RATE) ? b->ctx_sample_rate
							     : (double)z->a.sample_rate;

	pdma_gr_tag_time(&z->hdr, b->first_sample, "rx_time", b->ts_int,
			 (double)b->ts_frac / (double)z->a.sample_rate);
	pdma_gr_tag_double(&z->hdr, b->first_sample, "rx_rate", rate);
	if (b->ctx_fields & PDMA_CTX_RF_FREQ)
		pdma_gr_tag_double(&z->hdr, b->first_sample, "rx_freq", b->ctx_rf_freq);
}

/* Zeros for samples [s->next, upto): blocks this consumer never got. */
static int fill_dropped(struct pdma_zmq *z, struct zstream *s, uint64_t upto, uint64_t chunk,
			char *msg, size_t msglen)
{
	while (s->next < upto) {
		uint64_t n = upto - s->next < chunk ? upto - s->next : chunk;
		if (z->a.tags) {
			pdma_gr_tags_begin(&z->hdr, s->next);
			pdma_gr_tag_u64(&z->hdr, s->next, "pdma_drop", n);
			if (pdma_gr_tags_end(&z->hdr))
				return -ENOMEM;
		}
		int ret = send_message(z, s, NULL, n, msg, msglen);
		if (ret)
			return ret;
		s->st.fill_samples += n;
		s->next += n;
	}
	return 0;
}

int pdma_zmq_publish(struct pdma_zmq *z, const struct pdma_block *b, char *msg, size_t msglen)
{
	if (msg && msglen)
		msg[0] = '\0';
	drain_subscriptions(z);
	if (b->format != PDMA_FMT_CI16 || b->bytes_per_sample != 4) {
		if (msg && msglen)
			snprintf(msg, msglen, "sample format %u (%u bytes) is not complex int16",
				 b->format, b->bytes_per_sample);
		return -EPROTO;
	}
	if (atomic_load(&z->cancel))
		return -ECANCELED;
	const int16_t *src = b->data;
	int ret;
	if (b->mem != PDMA_BLOCK_HOST) {
		/* GPU paths: read to host memory after the block's event (the
		 * samples leave for a CPU flowgraph anyway). */
		size_t need = (size_t)b->nsamples * 4;
		if (z->stage_len < need) {
			int16_t *st = realloc(z->stage, need);
			if (!st)
				return -ENOMEM;
			z->stage = st;
			z->stage_len = need;
		}
		ret = pdma_block_read(b, 0, b->npackets, z->stage);
		if (ret) {
			if (msg && msglen)
				snprintf(msg, msglen, "reading a %s block (stream 0x%x) to host memory: %s",
					 b->mem == PDMA_BLOCK_CUDA ? "CUDA device" : "pinned host",
					 b->stream_id, strerror(-ret));
			return ret;
		}
		src = z->stage;
	}

	struct zstream *s = stream_of(z, b->stream_id);
	if (!s)
		return -ENOMEM;
	bool restart = !s->started;

	if (s->started && b->first_sample < s->next) {
		/* behind what was published (cannot happen in publication order;
		 * counted rather than sent twice) */
		s->st.stale++;
		return 0;
	}
	if (s->started && b->first_sample > s->next) {
		if (b->first_sample - s->next <= z->a.max_fill) {
			ret = fill_dropped(z, s, b->first_sample, b->nsamples ? b->nsamples : 4096,
					   msg, msglen);
			if (ret)
				return ret;
		} else {
			s->st.jumps++;
			restart = true;
		}
	}
	if (!s->started) {
		s->started = true;
		s->st.first_sample = b->first_sample;
	}
	if (z->a.tags) {
		pdma_gr_tags_begin(&z->hdr, b->first_sample);
		if (restart)
			tag_time(z, b);
		/* one pdma_gap per run of lost packets */
		for (uint32_t i = 0; i < b->npackets;) {
			if (!(b->gap_mask[i / 64] >> (i % 64) & 1)) {
				i++;
				continue;
			}
			uint32_t j = i;
			while (j < b->npackets && (b->gap_mask[j / 64] >> (j % 64) & 1))
				j++;
			pdma_gr_tag_u64(&z->hdr, b->first_sample + (uint64_t)i * b->samples_per_packet,
					"pdma_gap", (uint64_t)(j - i) * b->samples_per_packet);
			i = j;
		}
		if (pdma_gr_tags_end(&z->hdr))
			return -ENOMEM;
	}
	ret = send_message(z, s, src, b->nsamples, msg, msglen);
	if (ret)
		return ret;
	s->st.gap_samples += (uint64_t)b->gaps * b->samples_per_packet;
	s->next = b->first_sample + b->nsamples;
	return 0;
}

void pdma_zmq_stats(struct pdma_zmq *z, struct pdma_zmq_stats *st)
{
	drain_subscriptions(z);
	*st = z->st;
}

bool pdma_zmq_stream_stats(const struct pdma_zmq *z, uint32_t i, struct pdma_zmq_stream_stats *st)
{
	if (i >= z->ns)
		return false;
	*st = z->s[i].st;
	return true;
}

void pdma_zmq_close(struct pdma_zmq *z)
{
	if (!z)
		return;
	/* zmq_close keeps the queued messages; zmq_ctx_term waits for them to
	 * reach the subscribers, up to the linger time. */
	zmq_close(z->sock);
	zmq_ctx_term(z->ctx);
	pdma_gr_tags_free(&z->hdr);
	free(z->stage);
	free(z->s);
	free(z);
}
