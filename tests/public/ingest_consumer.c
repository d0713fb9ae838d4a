/* SPDX-License-Identifier: MIT */
/*
 * A program a user would write against the installed API only
 * (<peerdma/ingest.h>, `pkg-config peerdma`): subscribe to every stream of a
 * session, take blocks until each of NSTREAMS streams has reached packet
 * index LAST_PKT or gone quiet, and check them.
 *  - every sample of a packet that came equals what `peerdma gen` sends
 *    (its sample word at absolute sample s of stream id, big-endian on the
 *    wire: I = high half, Q = low half, in host order in the block);
 *  - a gap packet reads as zeros;
 *  - blocks of a stream follow each other without a hole or an overlap.
 * Prints "PORT n" once receiving, then per gap "GAP stream_id packet" and
 * per stream "STREAM stream_id first_packet packets gaps", for
 * tests/install-test.sh and tests/vm/run to compare with gen's pcap
 * (tests/public/gen_sent.py).
 *
 * The session is a loopback one (PDMA_INGEST_PATH_CPU, an ephemeral port)
 * unless PDMA_CONSUMER_NIC is set: then PDMA_INGEST_PATH_NIC on the NIC it
 * names (empty: the default, /dev/peerdma_nic0; kernel device /dev/peerdma),
 * for frames to UDP port 4991 (`peerdma gen --eth`'s), as
 * tests/vm/nic-system.sh runs it in the QEMU guest. On either path a
 * stream's last block, cut short at its last packet, comes while the
 * session runs (flush_idle_ms after the sender stopped): every stream must
 * be complete before pdma_ingest_stop, and the stop must flush nothing.
 * usage: [PDMA_CONSUMER_NIC=DEV] ingest_consumer NSTREAMS LAST_PKT_COUNT
 */
#include <errno.h>
#include <peerdma/ingest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t gen_sample(uint32_t id, uint64_t s)
{
	uint32_t i = (uint32_t)(s * 2654435761u) ^ (id * 40503u);

	return (i & 0xffff0000u) | ((uint32_t)(s + id) & 0xffffu);
}

struct seen {
	uint32_t id;
	uint64_t first, next, gaps;
	int have;
};

static unsigned long long bad_packets; /* packets with a sample not gen's */

/* One block against gen's formula and the stream's previous block; counts
 * the stream done once it reaches npkts packets. 1 if anything was wrong. */
static int check_block(struct seen *st, unsigned nstreams, uint64_t npkts, unsigned *done,
		       const struct pdma_block *b)
{
	int bad = 0;
	unsigned k;

	for (k = 0; k < nstreams && st[k].have && st[k].id != b->stream_id; k++)
		;
	if (k == nstreams) {
		fprintf(stderr, "unexpected stream %#x\n", b->stream_id);
		return 1;
	}
	struct seen *s = &st[k];
	uint64_t p0 = b->first_sample / b->samples_per_packet;
	if (!s->have) {
		s->have = 1;
		s->id = b->stream_id;
		s->first = s->next = p0;
	}
	if (p0 != s->next || b->mem != PDMA_BLOCK_HOST || b->format != PDMA_FMT_CI16 ||
	    b->nsamples != (uint64_t)b->npackets * b->samples_per_packet) {
		fprintf(stderr, "stream %#x: block at packet %llu, expected %llu\n", b->stream_id,
			(unsigned long long)p0, (unsigned long long)s->next);
		bad = 1;
	}
	const int16_t *iq = b->data;
	for (uint32_t i = 0; i < b->npackets; i++) {
		int gap = (b->gap_mask[i / 64] >> (i % 64)) & 1;
		if (gap) {
			printf("GAP %u %llu\n", b->stream_id, (unsigned long long)(p0 + i));
			s->gaps++;
		}
		for (uint32_t j = 0; j < b->samples_per_packet; j++) {
			uint64_t n = (uint64_t)i * b->samples_per_packet + j;
			uint32_t w = gap ? 0 : gen_sample(b->stream_id, b->first_sample + n);
			if (iq[2 * n] != (int16_t)(w >> 16) || iq[2 * n + 1] != (int16_t)(w & 0xffff)) {
				/* the first few say what is wrong; main says how many */
				if (++bad_packets <= 8)
					fprintf(stderr, "stream %#x sample %llu: %d,%d want %d,%d\n", b->stream_id,
						(unsigned long long)(b->first_sample + n), iq[2 * n],
						iq[2 * n + 1], (int16_t)(w >> 16), (int16_t)(w & 0xffff));
				bad = 1;
				break;
			}
		}
	}
	s->next = p0 + b->npackets;
	if (s->next - s->first == npkts)
		(*done)++;
	return bad;
}

int main(int argc, char **argv)
{
	struct pdma_ingest_attr a;
	struct pdma_sub_attr sa;
	struct pdma_ingest *ing;
	struct pdma_sub *sub;
	struct seen st[16] = { 0 };
	const char *nic = getenv("PDMA_CONSUMER_NIC");
	char msg[256];
	int bad = 0, e;

	if (argc < 3)
		return 2;
	unsigned nstreams = (unsigned)atoi(argv[1]);
	unsigned long long npkts = strtoull(argv[2], NULL, 0);
	if (nstreams == 0 || nstreams > 16)
		return 2;
	pdma_ingest_attr_init(&a);
	/* Longer than any pause of a paced gen: it sends a stream's turn of up
	 * to 64 datagrams, then sleeps (160 ms at the debug guests' 400/s). An
	 * idle flush inside such a pause would publish a block before the
	 * reordered packet that completes it, which then counts as late and
	 * reads as a gap gen never made. The streams' ends still come from the
	 * idle flush, before the stop (5 s of quiet ends this program). */
	a.flush_idle_ms = 1000;
	if (nic) {
		a.path = PDMA_INGEST_PATH_NIC;
		a.nic_dev = nic[0] ? nic : NULL;
		a.port = 4991; /* the frames' UDP destination port: gen's default */
	}
	pdma_sub_attr_init(&sa);
	sa.depth = 4096; /* keep every block: this consumer checks, it does not stall */
	if ((e = pdma_ingest_open(&a, &ing, msg, sizeof(msg)))) {
		fprintf(stderr, "open: %s: %s\n", strerror(-e), msg);
		return 1;
	}
	if ((e = pdma_ingest_subscribe(ing, &sa, &sub)) || (e = pdma_ingest_start(ing))) {
		fprintf(stderr, "subscribe/start: %s\n", strerror(-e));
		return 1;
	}
	printf("PORT %u\n", pdma_ingest_port(ing));
	fflush(stdout);
	unsigned done = 0;
	int idle = 0, blocks = 0;
	/* Quiet: 5 s without a block once blocks came; before the first, the
	 * nic path waits for its sender to be started (tests/vm/nic-system.sh
	 * starts gen on the host only once this has printed PORT). */
	while (done < nstreams && idle < (blocks || !nic ? 50 : 600)) {
		struct pdma_block *b;

		e = pdma_sub_next(sub, &b, 100);
		if (e == -ETIMEDOUT) {
			idle++;
			continue;
		}
		if (e) {
			fprintf(stderr, "next: %s\n", strerror(-e));
			bad = 1;
			break;
		}
		idle = 0;
		blocks++;
		bad |= check_block(st, nstreams, npkts, &done, b);
		pdma_block_release(b);
	}
	unsigned done_before_stop = done;
	if ((e = pdma_ingest_stop(ing))) {
		fprintf(stderr, "stop: %s\n", strerror(-e));
		bad = 1;
	}
	/* The flush: blocks still open at stop. None: the idle flush gave
	 * every stream's end while the session ran. */
	int flushed = 0;
	for (struct pdma_block *b; pdma_sub_next(sub, &b, 0) == 0; flushed++) {
		if (done_before_stop == nstreams) {
			fprintf(stderr, "a block after every stream was complete (stream %#x)\n", b->stream_id);
			bad = 1;
		} else {
			bad |= check_block(st, nstreams, npkts, &done, b);
		}
		pdma_block_release(b);
	}
	struct pdma_ingest_stats is;
	pdma_ingest_stats(ing, &is);
	fprintf(stderr, "%d blocks while receiving, %d at stop; %llu datagrams, %llu packets placed, %llu late, "
		"%llu window drops\n", blocks, flushed, (unsigned long long)is.datagrams,
		(unsigned long long)is.packets_placed, (unsigned long long)is.late,
		(unsigned long long)is.window_drops);
	if (bad_packets)
		fprintf(stderr, "%llu packets with a sample that is not gen's\n", bad_packets);
	for (unsigned k = 0; k < nstreams; k++)
		printf("STREAM %u %llu %llu %llu\n", st[k].id, (unsigned long long)st[k].first,
		       (unsigned long long)(st[k].next - st[k].first), (unsigned long long)st[k].gaps);
	if (done < nstreams) {
		fprintf(stderr, "%u of %u streams complete\n", done, nstreams);
		bad = 1;
	} else if (done_before_stop < nstreams) {
		fprintf(stderr, "%u of %u streams complete before the stop: the idle flush (flush_idle_ms) "
			"did not publish their ends\n", done_before_stop, nstreams);
		bad = 1;
	}
	pdma_sub_close(sub);
	pdma_ingest_close(ing);
	return bad;
}
