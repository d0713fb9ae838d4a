/* SPDX-License-Identifier: MIT */
/*
 * The ZeroMQ sink: a consumer of the public block API (peerdma/ingest.h) that
 * publishes each stream's samples in the form GNU Radio 3.10's gr-zeromq
 * "ZMQ SUB Source" (zeromq.sub_source) reads.
 *
 * The wire (what sub_source expects, gr-zeromq/lib/base_impl.cc):
 *  - One XPUB socket bound to one endpoint carries every stream. Each message
 *    has two frames: the topic, then the data. The topic is "stream-" and the
 *    stream ID in 8 lowercase hex digits ("stream-00001000"): sub_source's
 *    `key` subscribes with a ZeroMQ prefix filter, so topics are fixed-width
 *    (none is the prefix of another), and 15 bytes long, an odd length, so a
 *    sub_source left without a key fails loudly ("Incompatible vector sizes")
 *    instead of reading topics as samples.
 *  - The data frame is whole samples: ci16 (I, Q as int16, host byte order, 4
 *    bytes a sample, as ingest delivers them) or cf32 (gr_complex: I/32768,
 *    Q/32768 as float32, 8 bytes). One block, one message. Blocks in GPU
 *    memory (host-staged, zero-copy paths) are read to host memory first
 *    (pdma_block_read, after the block's CUDA event).
 *  - With tags, the data frame starts with gr-zeromq's tag header
 *    (tag_headers.cc: u16 magic 0x5FF0, u8 version 1, u64 offset, u64 ntags,
 *    then per tag u64 offset and the PMT-serialized key, value and srcid;
 *    integers in host order, as GNU Radio writes them). Offsets count
 *    samples on the stream's time line (first_sample), so sub_source
 *    (pass_tags=True) puts each tag on its sample as long as one item is one
 *    sample (itemsize * vlen = 4 for ci16, 8 for cf32).
 *
 * The time line is kept: samples of packets that never came are zeros (the
 * block's gaps), and blocks this consumer never got (dropped by the
 * subscription's drop-oldest policy) are published as zeros too, up to
 * max_fill samples; beyond that the time line jumps and, with tags, rx_time
 * says where it resumes.
 *
 * Tags (when enabled): rx_time (tuple of u64 seconds, double fractional
 * seconds: UHD's convention), rx_rate (double, Hz) and, where the stream's
 * context packet gave one, rx_freq (double, Hz) on a stream's first sample and
 * wherever the time line jumps; pdma_gap (u64: zero samples that follow) on
 * the first sample of each run of lost packets within a message; pdma_drop
 * (u64) on the first of the zero samples standing for dropped blocks.
 *
 * Slow subscribers: the socket never drops (ZMQ_XPUB_NODROP): publishing
 * waits while a subscriber's queue holds hwm messages, so a slow flowgraph
 * slows this consumer, and the subscription's policy decides what happens in
 * the session (drop-oldest: blocks dropped, zero-filled here, counted;
 * backpressure: the receive path drops, the packets become gaps).
 *
 * Thread safety: one thread publishes (pdma_zmq_publish, _wait_subscribers,
 * _stats, _close); pdma_zmq_cancel from any thread.
 */
#ifndef PDMA_INGEST_SINKS_ZMQ_H
#define PDMA_INGEST_SINKS_ZMQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peerdma/ingest.h"

#define PDMA_ZMQ_TOPIC_LEN 15 /* "stream-" + 8 hex digits */

enum pdma_zmq_format {
	PDMA_ZMQ_CI16 = 0, /* interleaved int16 I, Q (GNU Radio: sizeof_short, vlen 2) */
	PDMA_ZMQ_CF32,     /* gr_complex, full scale 1.0 = 32768 */
};

struct pdma_zmq_attr {
	const char *endpoint;        /* zmq_bind address, e.g. tcp://127.0.0.1:5555 */
	enum pdma_zmq_format format;
	bool tags;                   /* the tag header (sub_source pass_tags=True) */
	int hwm;                     /* messages queued per subscriber (default 1000) */
	uint64_t sample_rate;        /* the timestamps' unit (rx_time, rx_rate) */
	uint64_t max_fill;           /* dropped blocks zero-filled up to this many samples
				      * at a time (default 1 << 22) */
	int linger_ms;               /* close: time to flush queued messages (default 5000) */
};

/* Per stream, what was published (pdma_zmq_stream_stats). */
struct pdma_zmq_stream_stats {
	uint32_t stream_id;
	uint64_t first_sample;       /* time line index of the first sample published */
	uint64_t samples;            /* samples published, zero-filled included */
	uint64_t messages;
	uint64_t gap_samples;        /* zeros of lost packets */
	uint64_t fill_samples;       /* zeros standing for dropped blocks */
	uint64_t jumps;              /* time line jumps (not zero-filled) */
	uint64_t stale;              /* blocks behind the time line, not published */
};

struct pdma_zmq_stats {
	uint64_t messages, bytes;
	uint32_t streams;
	int32_t subscribers;         /* subscriptions seen minus unsubscriptions */
	uint64_t send_waits;         /* sends that waited for a slow subscriber */
};

struct pdma_zmq;

void pdma_zmq_attr_init(struct pdma_zmq_attr *a);
/* Binds the socket. -EINVAL for bad attributes; other negative errno values
 * from ZeroMQ (-EADDRINUSE, -EPROTONOSUPPORT...), with a line in msg. */
int pdma_zmq_open(const struct pdma_zmq_attr *a, struct pdma_zmq **z, char *msg, size_t msglen);
/* Waits until n subscriptions arrived (any topic), up to timeout_ms (-1: no
 * limit): a SUB socket that connects after samples began misses them (the
 * slow-joiner problem), so start receiving after this. -ETIMEDOUT, -ECANCELED. */
int pdma_zmq_wait_subscribers(struct pdma_zmq *z, int n, int timeout_ms);
/* Publishes one block (PDMA_FMT_CI16, host or GPU memory); the caller still
 * owns and releases it. -EPROTO for another format, -EIO when a GPU block
 * cannot be read, -ECANCELED after pdma_zmq_cancel (the sink is done then: a
 * message may have been cut), -ENOMEM, or ZeroMQ's errno; msg says which. */
int pdma_zmq_publish(struct pdma_zmq *z, const struct pdma_block *b, char *msg, size_t msglen);
/* Makes a publish waiting on a slow subscriber give up (-ECANCELED). */
void pdma_zmq_cancel(struct pdma_zmq *z);
void pdma_zmq_stats(struct pdma_zmq *z, struct pdma_zmq_stats *s);
/* The i-th stream (in order of first appearance); false past the last. */
bool pdma_zmq_stream_stats(const struct pdma_zmq *z, uint32_t i, struct pdma_zmq_stream_stats *s);
/* The topic of stream id (PDMA_ZMQ_TOPIC_LEN chars and a NUL into buf). */
void pdma_zmq_topic(uint32_t stream_id, char buf[PDMA_ZMQ_TOPIC_LEN + 1]);
/* Flushes what is queued (up to linger_ms) and closes. */
void pdma_zmq_close(struct pdma_zmq *z);

#endif /* PDMA_INGEST_SINKS_ZMQ_H */
