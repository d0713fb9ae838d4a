// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>

#include "loopback/demo.h"
#include "loopback/loopback.h"

int pdma_ingest_demo(FILE *out)
{
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	struct pdma_loopback_result r;
	int ret;

	pdma_gen_config_default(&g);
	g.streams = 4;
	g.packets = 3000;
	g.packet_size = 1056; /* 28-byte prologue + 1024 payload (256 samples) + trailer */
	g.loss_pm = 3;
	g.loss_burst = 16;
	g.dup_pm = 5;
	g.reorder_pm = 5;
	g.seed = 2014;
	pdma_ingest_config_default(&ic);
	ic.threads = 2;
	ic.ring_slots = 4096;
	ic.slot_size = 2048;

	fprintf(out, "VITA-49 ingest over 127.0.0.1: %u streams x %llu packets of %u bytes, "
		     "CPU deframer, %u receive threads\n",
		g.streams, (unsigned long long)g.packets, g.packet_size, ic.threads);
	ret = pdma_loopback_run(&g, &ic, 100000, &r);
	if (ret) {
		fprintf(out, "demo: loopback run failed: %s\n", strerror(-ret));
		free(r.s);
		return ret;
	}
	fprintf(out, "%-8s | %-24s | %-32s | %-9s | %s\n", "", "injected by gen",
		"detected by ingest (exact)", "4-bit cnt", "");
	fprintf(out, "%-8s | %6s %5s %5s %5s | %6s %6s %5s %5s %5s | %9s | %s\n", "stream", "sent",
		"lost", "dup", "reord", "recv", "lost", "dup", "reord", "malf", "lost", "result");
	for (uint32_t i = 0; i < r.streams; i++) {
		const struct pdma_loopback_stream *s = &r.s[i];
		fprintf(out, "0x%-6x | %6llu %5llu %5llu %5llu | %6llu %6llu %5llu %5llu %5llu | %9llu | %s\n",
			s->detected.stream_id, (unsigned long long)s->injected.sent,
			(unsigned long long)s->injected.lost, (unsigned long long)s->injected.duplicated,
			(unsigned long long)s->injected.reordered, (unsigned long long)s->detected.received,
			(unsigned long long)s->detected.lost, (unsigned long long)s->detected.duplicated,
			(unsigned long long)s->detected.reordered, (unsigned long long)s->detected.malformed,
			(unsigned long long)s->detected.lost_count4,
			s->match ? "match" : s->content_errors ? "DATA MISMATCH" : "MISMATCH");
	}
	fprintf(out, "%llu datagrams in %.2f s at %.0f pkt/s (attempt %d), socket drops %llu, "
		     "ring overruns %llu; deframed payload verified byte for byte: %s\n",
		(unsigned long long)r.totals.datagrams, r.seconds, r.rate_pps, r.attempts,
		(unsigned long long)r.totals.socket_drops, (unsigned long long)r.totals.ring_overruns,
		r.match ? "yes" : "NO");
	if (r.blocks_on) {
		uint64_t pk = 0, gp = 0, bad = 0;
		for (uint32_t i = 0; i < r.streams; i++) {
			pk += r.s[i].block_packets;
			gp += r.s[i].block_gaps;
			bad += r.s[i].block_errors;
		}
		fprintf(out, "a subscriber (include/peerdma/ingest.h) took %llu blocks while they arrived: "
			     "%llu packets, %llu of them gaps (zeros) where gen lost, samples equal to "
			     "gen's: %s\n",
			(unsigned long long)r.blocks, (unsigned long long)pk, (unsigned long long)gp,
			bad ? "NO" : "yes");
	}
	fprintf(out, "(4-bit cnt: what the 4-bit packet count alone would call lost: blind to every "
		     "16-packet burst, fooled by each swap; exact accounting uses the sample-count "
		     "timestamps)\n");
	bool ok = r.match;
	free(r.s);
	return ok ? 0 : 1;
}
