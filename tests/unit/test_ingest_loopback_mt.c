// SPDX-License-Identifier: MIT
/* gen -> ingest over 127.0.0.1: what the generator injected (loss, bursts,
 * reordering, duplication) is exactly what the ingest side reports, per
 * stream, and the deframed bytes are the bytes sent. Threads: the sender,
 * the receive threads and the deframer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>

#include "gen/gen.h"
#include "ingest.h"
#include "loopback/demo.h"
#include "loopback/loopback.h"
#include "peerdma/mr.h"
#include "mem/sim.h"

static void check(const struct pdma_gen_config *g, struct pdma_ingest_config *ic, double rate)
{
	struct pdma_loopback_result r;
	uint64_t inj = 0;

	assert_int_equal(pdma_loopback_run(g, ic, rate, &r), 0);
	assert_int_equal(r.totals.socket_drops, 0);
	assert_int_equal(r.totals.ring_overruns, 0);
	assert_int_equal(r.totals.truncated, 0);
	for (uint32_t i = 0; i < g->streams; i++) {
		const struct pdma_loopback_stream *s = &r.s[i];
		assert_int_equal(s->detected.stream_id, g->stream_id_base + i);
		assert_int_equal(s->detected.lost, s->injected.lost);
		assert_int_equal(s->detected.duplicated, s->injected.duplicated);
		assert_int_equal(s->detected.reordered, s->injected.reordered);
		assert_int_equal(s->detected.received, g->packets - s->injected.lost);
		assert_int_equal(s->detected.context, g->context ? 1 : 0);
		assert_int_equal(s->detected.malformed, 0);
		assert_int_equal(s->detected.count_errors, 0);
		assert_int_equal(s->content_errors, 0);
		assert_true(s->checked_packets > 0);
		/* the subscriber's blocks: every packet, gaps where gen lost */
		assert_true(r.blocks_on);
		assert_int_equal(s->block_packets, g->packets);
		assert_int_equal(s->block_gaps, s->injected.lost);
		assert_int_equal(s->block_errors, 0);
		assert_true(s->match);
		inj += s->injected.lost + s->injected.duplicated + s->injected.reordered;
	}
	/* The scenario must actually inject something, or it proves nothing. */
	if (g->loss_pm || g->dup_pm || g->reorder_pm)
		assert_true(inj > 0);
	assert_true(r.match);
	free(r.s);
}

/* gen's default traffic, streams x packets, with 1% each of loss,
 * duplication and reordering. */
static void gen_lossy(struct pdma_gen_config *g, uint32_t streams, uint64_t packets)
{
	pdma_gen_config_default(g);
	g->streams = streams;
	g->packets = packets;
	g->loss_pm = 10;
	g->dup_pm = 10;
	g->reorder_pm = 10;
}

/* The direct path's ingest configuration: rings of slot_size-byte slots in
 * the memory of a new simulated GPU *sim, registered with a new domain *dom
 * (the caller closes both). */
static void direct_config(struct pdma_ingest_config *ic, struct pdma_sim **sim, struct pdma_domain **dom,
			  uint32_t slot_size)
{
	struct pdma_domain_attr da;
	struct pdma_sim_attr sa = { .mem_size = 16u << 20 };

	assert_int_equal(pdma_sim_open(&sa, sim), 0);
	pdma_domain_attr_init(&da);
	da.sim = *sim;
	assert_int_equal(pdma_domain_open(&da, dom), 0);
	pdma_ingest_config_default(ic);
	ic->path = PDMA_RX_DIRECT;
	ic->domain = *dom;
	ic->sim = *sim;
	ic->ring_slots = 512;
	ic->slot_size = slot_size;
}

static void test_loopback_single_loss(void **state)
{
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	(void)state;
	gen_lossy(&g, 3, 1500);
	g.seed = 7;
	pdma_ingest_config_default(&ic);
	ic.ring_slots = 1024;
	ic.slot_size = 2048;
	check(&g, &ic, 50000);
}

/* 16-packet bursts: the 4-bit count cannot see them, the sample count can. */
static void test_loopback_bursts_two_threads(void **state)
{
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	struct pdma_loopback_result r;
	(void)state;
	pdma_gen_config_default(&g);
	g.streams = 4;
	g.packets = 1200;
	g.packet_size = 288;
	g.trailer = false;
	g.loss_pm = 8;
	g.loss_burst = 16;
	g.reorder_pm = 20;
	g.seed = 99;
	pdma_ingest_config_default(&ic);
	ic.threads = 2;
	ic.ring_slots = 1024;
	ic.slot_size = 1024;
	check(&g, &ic, 50000);
	/* Loss only (a swap also looks like a gap to the 4-bit count). */
	g.reorder_pm = 0;
	assert_int_equal(pdma_loopback_run(&g, &ic, 50000, &r), 0);
	assert_true(r.match);
	uint64_t lost = 0, lost4 = 0;
	for (uint32_t i = 0; i < g.streams; i++) {
		lost += r.s[i].detected.lost;
		lost4 += r.s[i].detected.lost_count4;
	}
	assert_true(lost >= 16);
	assert_int_equal(lost4, 0); /* every burst is a multiple of 16 */
	free(r.s);
}

/* Several sender threads (each owns streams i, i+T, ... and their sockets):
 * with the same seed every stream sends and injects exactly what one thread
 * (and pdma_gen_next, the pcap order) does, and ingest detects exactly that. */
static void test_loopback_sender_threads(void **state)
{
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	struct pdma_loopback_result r[2];
	uint32_t nthreads[2] = { 2, 3 }; /* one sender: the other tests */
	struct pdma_gen *ref;
	uint8_t buf[2048];
	uint32_t si;
	int len;
	(void)state;
	pdma_gen_config_default(&g);
	g.streams = 5; /* not a multiple of the thread counts */
	g.packets = 600;
	g.loss_pm = 10;
	g.loss_burst = 3;
	g.dup_pm = 10;
	g.reorder_pm = 10;
	g.seed = 1234;
	pdma_ingest_config_default(&ic);
	ic.threads = 2;
	ic.ring_slots = 2048;
	ic.slot_size = 2048;
	/* The single-threaded iterator's counts: the reference. */
	assert_int_equal(pdma_gen_open(&g, &ref), 0);
	while ((len = pdma_gen_next(ref, buf, sizeof(buf), &si)) > 0)
		;
	assert_int_equal(len, 0);
	for (size_t t = 0; t < 2; t++) {
		g.send_threads = nthreads[t];
		assert_int_equal(pdma_loopback_run(&g, &ic, 40000, &r[t]), 0);
		assert_int_equal(r[t].totals.socket_drops, 0);
		assert_int_equal(r[t].totals.ring_overruns, 0);
		assert_int_equal(r[t].totals.truncated, 0);
		assert_true(r[t].match); /* detected == injected, content checked */
		for (uint32_t i = 0; i < g.streams; i++) {
			const struct pdma_gen_inject *a = pdma_gen_injected(ref, i), *b = &r[t].s[i].injected;
			assert_int_equal(b->sent, a->sent);
			assert_int_equal(b->lost, a->lost);
			assert_int_equal(b->duplicated, a->duplicated);
			assert_int_equal(b->reordered, a->reordered);
			assert_int_equal(b->context, a->context);
			assert_int_equal(r[t].s[i].detected.lost, a->lost);
			assert_int_equal(r[t].s[i].detected.duplicated, a->duplicated);
			assert_int_equal(r[t].s[i].detected.reordered, a->reordered);
			assert_int_equal(r[t].s[i].detected.received, g.packets - a->lost);
			assert_int_equal(r[t].s[i].content_errors, 0);
		}
		free(r[t].s);
	}
	pdma_gen_close(ref);
}

/* The direct path: rings in simulated GPU memory, registered, written by the
 * simulated DMA device by key. */
static void test_loopback_direct_sim(void **state)
{
	struct pdma_sim *sim;
	struct pdma_domain *dom;
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	struct pdma_sim_stats st;
	(void)state;
	gen_lossy(&g, 2, 800);
	direct_config(&ic, &sim, &dom, 1088);
	check(&g, &ic, 40000);
	pdma_sim_get_stats(sim, &st);
	assert_true(st.dma_bytes > 800 * 1024);
	assert_int_equal(st.live_pins, 0); /* rings unregistered at close */
	/* io_uring fills host buffers: not the direct path's device ring. */
	struct pdma_ingest *ing;
	ic.rx_io = PDMA_RX_IO_URING;
	assert_int_equal(pdma_ingest_open_config(&ic, &ing, NULL, 0), -EINVAL);
	assert_int_equal(pdma_domain_close(dom), 0);
	assert_int_equal(pdma_sim_close(sim), 0);
}

/* The same exact accounting with io_uring receive (two receive threads, so
 * two rings and two multishot requests). Skipped where io_uring is not
 * available. */
static void test_loopback_io_uring(void **state)
{
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	struct pdma_ingest *ing;
	(void)state;
	pdma_ingest_config_default(&ic);
	ic.rx_io = PDMA_RX_IO_URING;
	ic.port = 0;
	ic.ring_slots = 64;
	ic.slot_size = 256;
	int e = pdma_ingest_open_config(&ic, &ing, NULL, 0);
	if (e == -EOPNOTSUPP) {
		printf("skipped: io_uring receive unavailable here (%s)\n", strerror(-e));
		skip();
	}
	assert_int_equal(e, 0);
	pdma_ingest_close(ing);
	pdma_gen_config_default(&g);
	g.streams = 4;
	g.packets = 1500;
	g.loss_pm = 10;
	g.loss_burst = 16;
	g.dup_pm = 10;
	g.reorder_pm = 10;
	g.seed = 11;
	pdma_ingest_config_default(&ic);
	ic.rx_io = PDMA_RX_IO_URING;
	ic.threads = 2;
	ic.ring_slots = 1024;
	ic.slot_size = 2048;
	check(&g, &ic, 50000);
}

/* The slot layout and slot size a session with config ic reports. */
static void layout_of(const struct pdma_ingest_config *ic, const char *layout, int slot_bytes)
{
	struct pdma_ingest_config c = *ic;
	struct pdma_ingest *ing;
	c.port = 0;
	assert_int_equal(pdma_ingest_open_config(&c, &ing, NULL, 0), 0);
	json_t *j = pdma_ingest_json(ing, 0);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "slot_layout")), layout);
	assert_int_equal(json_integer_value(json_object_get(j, "slot_bytes")), slot_bytes);
	json_decref(j);
	pdma_ingest_close(ing);
}

/* 64-byte datagrams into slot-byte slots, which auto gives the layout
 * named name (choice): the same exact accounting and bytes through recvmmsg
 * (auto, then the layout by name with two threads), UDP GRO (where the
 * kernel has it) and the direct path's device ring. */
static void small_slots(uint32_t slot, enum pdma_slot_choice choice, const char *name, uint32_t seed)
{
	struct pdma_sim *sim;
	struct pdma_domain *dom;
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	gen_lossy(&g, 3, 1500);
	g.packet_size = 64;
	g.seed = seed;
	pdma_ingest_config_default(&ic);
	ic.ring_slots = 1024;
	ic.slot_size = slot;
	layout_of(&ic, name, (int)slot);
	check(&g, &ic, 50000);
	ic.slot_layout = choice;
	ic.threads = 2;
	check(&g, &ic, 50000);
	pdma_ingest_config_default(&ic);
	ic.ring_slots = 1024;
	ic.slot_size = slot;
	ic.rx_io = PDMA_RX_IO_GRO;
	struct pdma_ingest *ing;
	ic.port = 0;
	int e = pdma_ingest_open_config(&ic, &ing, NULL, 0);
	if (e == -EOPNOTSUPP) {
		printf("(UDP GRO unavailable here: that part not run)\n");
	} else {
		assert_int_equal(e, 0);
		pdma_ingest_close(ing);
		ic.port = 4991;
		check(&g, &ic, 50000);
	}
	direct_config(&ic, &sim, &dom, slot);
	check(&g, &ic, 40000);
	assert_int_equal(pdma_domain_close(dom), 0);
	assert_int_equal(pdma_sim_close(sim), 0);
}

/* Packed slots (deframe.h), the layout auto picks for rings of small slots:
 * 64-byte datagrams in 96-byte slots (the full layout needs 128). */
static void test_loopback_packed(void **state)
{
	(void)state;
	small_slots(96, PDMA_SLOTS_PACKED, "packed", 5);
}

/* Tiny slots (deframe.h), the layout auto picks for 80-byte slots: 64-byte
 * datagrams in 80 bytes (packed needs 96); an 84-byte slot, the smallest
 * packed one, is 96 bytes packed. */
static void test_loopback_tiny(void **state)
{
	struct pdma_ingest_config ic;
	(void)state;
	small_slots(80, PDMA_SLOTS_TINY, "tiny", 11);
	pdma_ingest_config_default(&ic);
	ic.slot_size = 84;
	layout_of(&ic, "packed", 96);
}

/* The GPU launch mode a session with config ic reports ("graph", "stream"). */
static const char *launch_of(const struct pdma_ingest_config *ic)
{
	static char mode[16];
	struct pdma_ingest *ing;
	assert_int_equal(pdma_ingest_open_config(ic, &ing, NULL, 0), 0);
	json_t *j = pdma_ingest_json(ing, 0);
	assert_non_null(j);
	snprintf(mode, sizeof(mode), "%s", json_string_value(json_object_get(j, "gpu_launch")));
	json_decref(j);
	pdma_ingest_close(ing);
	return mode;
}

static void test_ingest_bad_config(void **state)
{
	struct pdma_ingest_config ic;
	struct pdma_ingest *ing;
	(void)state;
	pdma_ingest_config_default(&ic);
	ic.threads = 0;
	assert_int_equal(pdma_ingest_open_config(&ic, &ing, NULL, 0), -EINVAL);
	pdma_ingest_config_default(&ic);
	ic.path = PDMA_RX_DIRECT; /* needs a domain and a sim */
	assert_int_equal(pdma_ingest_open_config(&ic, &ing, NULL, 0), -EINVAL);
	pdma_ingest_config_default(&ic);
	ic.rx_io = (enum pdma_rx_io)7; /* no such receive I/O */
	assert_int_equal(pdma_ingest_open_config(&ic, &ing, NULL, 0), -EINVAL);
	/* Slot layouts, each refused with its reason: no such layout; packed or
	 * tiny for io_uring, whose completion header needs the full layout's
	 * room; a slot too small for the fast path's 64-byte prefix after its
	 * header; tiny slots over 80 bytes. 81-83 bytes fit no layout: over a
	 * tiny slot, under the smallest packed one (84, test_loopback_tiny
	 * opens it). */
	char msg[256];
	static const struct {
		enum pdma_slot_choice layout;
		uint32_t size;
		enum pdma_rx_io io;
		const char *says;
	} why[] = {
		{ (enum pdma_slot_choice)7, 2048, PDMA_RX_IO_RECVMMSG, "slot layout 7: no such layout" },
		{ PDMA_SLOTS_PACKED, 9216, PDMA_RX_IO_URING, "packed slots: io_uring's completion header" },
		{ PDMA_SLOTS_PACKED, 64, PDMA_RX_IO_RECVMMSG, "packed slots are at least 84 bytes" },
		{ PDMA_SLOTS_AUTO, 81, PDMA_RX_IO_RECVMMSG, "slot size 81 fits no slot layout" },
		{ PDMA_SLOTS_AUTO, 83, PDMA_RX_IO_RECVMMSG, "packed ones at least 84" },
		{ PDMA_SLOTS_PACKED, 83, PDMA_RX_IO_RECVMMSG, "packed slots are at least 84 bytes" },
		{ PDMA_SLOTS_FULL, 96, PDMA_RX_IO_RECVMMSG, "full slots are at least 100 bytes" },
		{ PDMA_SLOTS_TINY, 96, PDMA_RX_IO_RECVMMSG, "tiny slots are at most 80 bytes" },
		{ PDMA_SLOTS_TINY, 67, PDMA_RX_IO_RECVMMSG, "tiny slots are at least 68 bytes" },
		{ PDMA_SLOTS_TINY, 80, PDMA_RX_IO_URING, "tiny slots: io_uring's completion header" },
	};
	for (size_t k = 0; k < sizeof(why) / sizeof(why[0]); k++) {
		pdma_ingest_config_default(&ic);
		ic.slot_layout = why[k].layout;
		ic.slot_size = why[k].size;
		ic.rx_io = why[k].io;
		msg[0] = 0;
		assert_int_equal(pdma_ingest_open_config(&ic, &ing, msg, sizeof(msg)), -EINVAL);
		if (!strstr(msg, why[k].says))
			fail_msg("case %zu: \"%s\" lacks \"%s\"", k, msg, why[k].says);
	}
	pdma_ingest_config_default(&ic);
	ic.path = PDMA_RX_HOST_STAGED;
	ic.port = 0;
	int r = pdma_ingest_open_config(&ic, &ing, NULL, 0);
	if (r == 0) {
		/* A machine with a GPU and the module: the default launch mode
		 * per path (graphs for zero-copy, streams for host-staged, as
		 * measured), unless the environment or the config says. */
		pdma_ingest_close(ing);
		if (!getenv("PEERDMA_GPU_LAUNCH")) {
			assert_string_equal(launch_of(&ic), "stream");
			ic.path = PDMA_RX_ZERO_COPY;
			assert_string_equal(launch_of(&ic), "graph");
			ic.path = PDMA_RX_HOST_STAGED;
			ic.gpu_launch = PDMA_INGEST_LAUNCH_GRAPH;
			assert_string_equal(launch_of(&ic), "graph");
		}
	} else {
		assert_int_equal(r, -ENODEV); /* CI: no CUDA device, module never loaded */
	}
	pdma_ingest_config_default(&ic);
	ic.port = 0;
	ic.ring_slots = 64;
	ic.slot_size = 256;
	assert_int_equal(pdma_ingest_open_config(&ic, &ing, NULL, 0), 0);
	assert_true(pdma_ingest_port(ing) != 0);
	assert_int_equal(pdma_ingest_stop(ing), -EINVAL); /* never started */
	pdma_ingest_close(ing);
}

/* Datagrams larger than a slot (recvmmsg receive): each counted truncated
 * exactly once, and none of the ordinary ones elsewhere (slot header flags
 * other than PDMA_SLOT_TRUNC, such as PDMA_SLOT_TAIL, are not truncation). */
static void test_loopback_truncated(void **state)
{
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	struct pdma_loopback_result r;
	(void)state;
	pdma_gen_config_default(&g);
	g.streams = 2;
	g.packets = 300;
	g.packet_size = 512;
	g.context = false;
	pdma_ingest_config_default(&ic);
	ic.ring_slots = 1024;
	ic.slot_size = 256; /* auto: full, 220 bytes of datagram room */
	assert_int_equal(pdma_loopback_run(&g, &ic, 20000, &r), 0);
	assert_int_equal(r.totals.socket_drops, 0);
	assert_int_equal(r.totals.ring_overruns, 0);
	assert_int_equal(r.totals.truncated, 600);
	assert_int_equal(r.totals.datagrams, 600);
	assert_int_equal(r.malformed, 600);
	free(r.s);
}

static void test_demo(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	(void)state;
	assert_non_null(f);
	assert_int_equal(pdma_ingest_demo(f), 0);
	fclose(f);
	assert_non_null(strstr(buf, "match"));
	assert_null(strstr(buf, "MISMATCH"));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ingest_bad_config),
		cmocka_unit_test(test_loopback_single_loss),
		cmocka_unit_test(test_loopback_bursts_two_threads),
		cmocka_unit_test(test_loopback_sender_threads),
		cmocka_unit_test(test_loopback_direct_sim),
		cmocka_unit_test(test_loopback_io_uring),
		cmocka_unit_test(test_loopback_truncated),
		cmocka_unit_test(test_loopback_packed),
		cmocka_unit_test(test_loopback_tiny),
		cmocka_unit_test(test_demo),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
