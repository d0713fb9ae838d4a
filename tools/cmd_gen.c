// SPDX-License-Identifier: MIT
/* peerdma gen: send VITA-49 data packets over UDP (and/or write a pcap). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "gen/gen.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: peerdma gen [OPTIONS]\n"
		"Send VITA-49 signal data packets (DIFI-style: stream ID, class ID, UTC integer and\n"
		"sample-count fractional timestamps, optional trailer) over UDP, with deterministic\n"
		"injected loss, reordering and duplication.\n\n"
		"  -H, --host ADDR        destination IPv4 address (default 127.0.0.1)\n"
		"  -p, --port N           destination UDP port (default 4991)\n"
		"  -s, --streams N        number of streams (default 4)\n"
		"      --stream-id N      first stream ID (default 0x1000)\n"
		"  -S, --packet-size B    VRT packet bytes, multiple of 4 (default 1024)\n"
		"  -n, --packets N        data packets per stream (default 1000)\n"
		"  -r, --rate PPS         total packets per second, 0 = unpaced (default 0)\n"
		"  -t, --threads N        sender threads (default 1, at most one per stream): thread i\n"
		"                         sends streams i, i+N, ... on their own sockets, at its share\n"
		"                         of --rate; per-stream packets and injections do not depend\n"
		"                         on N (with --pcap: one thread)\n"
		"      --sample-rate HZ   samples per second in the timestamps (default 10000000)\n"
		"      --no-trailer       no trailer word\n"
		"      --no-context       no context packet at the start of each stream\n"
		"      --loss PM          loss events per mille of packets\n"
		"      --loss-burst N     packets lost per loss event (default 1; 16 defeats the 4-bit count)\n"
		"      --dup PM           duplications per mille\n"
		"      --reorder PM       adjacent swaps per mille\n"
		"      --seed N           injection seed (default 1)\n"
		"  -w, --pcap FILE        also write the datagrams to a pcap file (Ethernet/IPv4/UDP)\n"
		"      --pcap-only        write the pcap, send nothing\n"
		"  -j, --json             print what was sent and injected, per stream, as JSON\n"
		"  -h, --help\n");
}

static int num(const char *s, unsigned long long max, unsigned long long *v)
{
	char *e;
	errno = 0;
	*v = strtoull(s, &e, 0);
	return (errno || *e || !*s || *v > max) ? -1 : 0;
}

int pdma_cmd_gen(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "host", required_argument, NULL, 'H' },
		{ "port", required_argument, NULL, 'p' },
		{ "streams", required_argument, NULL, 's' },
		{ "stream-id", required_argument, NULL, 'I' },
		{ "packet-size", required_argument, NULL, 'S' },
		{ "packets", required_argument, NULL, 'n' },
		{ "rate", required_argument, NULL, 'r' },
		{ "threads", required_argument, NULL, 't' },
		{ "sample-rate", required_argument, NULL, 'R' },
		{ "no-trailer", no_argument, NULL, 'T' },
		{ "no-context", no_argument, NULL, 'C' },
		{ "loss", required_argument, NULL, 'l' },
		{ "loss-burst", required_argument, NULL, 'b' },
		{ "dup", required_argument, NULL, 'd' },
		{ "reorder", required_argument, NULL, 'o' },
		{ "seed", required_argument, NULL, 'e' },
		{ "pcap", required_argument, NULL, 'w' },
		{ "pcap-only", no_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct pdma_gen_config c;
	struct pdma_gen_send_opts so = { .host = "127.0.0.1", .port = 4991 };
	const char *pcap = NULL;
	bool pcap_only = false, json = false;
	unsigned long long v;
	int opt, ret;

	pdma_gen_config_default(&c);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "H:p:s:S:n:r:t:w:jh", opts, NULL)) != -1) {
		const char *bad = NULL;
		switch (opt) {
		case 'H': so.host = optarg; break;
		case 'p': if (num(optarg, 65535, &v) || !v) bad = "--port"; else so.port = (uint16_t)v; break;
		case 's': if (num(optarg, 65535, &v) || !v) bad = "--streams"; else c.streams = (uint32_t)v; break;
		case 'I': if (num(optarg, UINT32_MAX, &v)) bad = "--stream-id"; else c.stream_id_base = (uint32_t)v; break;
		case 'S': if (num(optarg, 65535 * 4, &v) || v % 4) bad = "--packet-size"; else c.packet_size = (uint32_t)v; break;
		case 'n': if (num(optarg, UINT64_MAX, &v) || !v) bad = "--packets"; else c.packets = v; break;
		case 'r': {
			char *e;
			so.rate_pps = strtod(optarg, &e);
			if (*e || so.rate_pps < 0)
				bad = "--rate";
			break;
		}
		case 't': if (num(optarg, 65535, &v) || !v) bad = "--threads"; else so.threads = (uint32_t)v; break;
		case 'R': if (num(optarg, UINT32_MAX, &v) || !v) bad = "--sample-rate"; else c.sample_rate = v; break;
		case 'T': c.trailer = false; break;
		case 'C': c.context = false; break;
		case 'l': if (num(optarg, 1000, &v)) bad = "--loss"; else c.loss_pm = (uint32_t)v; break;
		case 'b': if (num(optarg, 1u << 20, &v) || !v) bad = "--loss-burst"; else c.loss_burst = (uint32_t)v; break;
		case 'd': if (num(optarg, 1000, &v)) bad = "--dup"; else c.dup_pm = (uint32_t)v; break;
		case 'o': if (num(optarg, 1000, &v)) bad = "--reorder"; else c.reorder_pm = (uint32_t)v; break;
		case 'e': if (num(optarg, UINT64_MAX, &v)) bad = "--seed"; else c.seed = v; break;
		case 'w': pcap = optarg; break;
		case 'P': pcap_only = true; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (bad) {
			fprintf(stderr, "peerdma gen: invalid value '%s' for %s\n", optarg, bad);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "peerdma gen: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (pcap_only && !pcap) {
		fprintf(stderr, "peerdma gen: --pcap-only needs --pcap FILE\n");
		return 2;
	}
	if (c.loss_pm + c.dup_pm + c.reorder_pm > 1000) {
		fprintf(stderr, "peerdma gen: --loss + --dup + --reorder must not exceed 1000 per mille\n");
		return 2;
	}
	if (pdma_gen_payload_len(&c) < 4) {
		fprintf(stderr, "peerdma gen: --packet-size %u leaves no payload (prologue %u bytes)\n",
			c.packet_size, c.trailer ? 32u : 28u);
		return 2;
	}
	struct pdma_gen *g;
	ret = pdma_gen_open(&c, &g);
	if (ret) {
		fprintf(stderr, "peerdma gen: %s\n", strerror(-ret));
		return 2;
	}
	FILE *pf = NULL;
	if (pcap) {
		pf = fopen(pcap, "wb");
		if (!pf) {
			fprintf(stderr, "peerdma gen: cannot write %s: %s\n", pcap, strerror(errno));
			pdma_gen_close(g);
			return 1;
		}
	}
	if (pcap_only) {
		ret = pdma_gen_write_pcap(g, pf, so.host, so.port);
	} else {
		so.pcap = pf;
		ret = pdma_gen_send(g, &so);
	}
	if (pf && fclose(pf) && !ret)
		ret = -EIO;
	if (ret) {
		fprintf(stderr, "peerdma gen: %s\n", strerror(-ret));
		pdma_gen_close(g);
		return 1;
	}
	json_t *arr = json_array();
	for (uint32_t i = 0; i < c.streams; i++) {
		const struct pdma_gen_inject *in = pdma_gen_injected(g, i);
		if (json) {
			json_t *o = json_object();
			json_object_set_new(o, "stream_id", json_integer(c.stream_id_base + i));
			json_object_set_new(o, "sent", json_integer((json_int_t)in->sent));
			json_object_set_new(o, "lost", json_integer((json_int_t)in->lost));
			json_object_set_new(o, "duplicated", json_integer((json_int_t)in->duplicated));
			json_object_set_new(o, "reordered", json_integer((json_int_t)in->reordered));
			json_object_set_new(o, "context", json_integer((json_int_t)in->context));
			json_array_append_new(arr, o);
		} else {
			fprintf(stderr, "stream 0x%x: sent %llu, injected lost %llu, duplicated %llu, reordered %llu\n",
				c.stream_id_base + i, (unsigned long long)in->sent,
				(unsigned long long)in->lost, (unsigned long long)in->duplicated,
				(unsigned long long)in->reordered);
		}
	}
	if (json) {
		json_t *o = json_object();
		json_object_set_new(o, "packet_size", json_integer(c.packet_size));
		json_object_set_new(o, "packets_per_stream", json_integer((json_int_t)c.packets));
		json_object_set_new(o, "streams", arr);
		json_dumpf(o, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(o);
	} else {
		json_decref(arr);
	}
	pdma_gen_close(g);
	return 0;
}
