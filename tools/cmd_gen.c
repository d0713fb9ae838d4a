// SPDX-License-Identifier: MIT
/* peerdma gen: send VITA-49 data packets over UDP (and/or write a pcap). */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "deframe/frame_acct.h"
#include "gen/eth.h"
#include "gen/gen.h"
#include "opt.h"

/* The one global: a signal handler can reach nothing else, and a lock-free
 * atomic is what it may store to. */
static atomic_bool stop_sending;
_Static_assert(ATOMIC_BOOL_LOCK_FREE == 2, "a signal handler stores stop_sending");

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&stop_sending, true);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: peerdma gen [OPTIONS]\n"
		"Send VITA-49 signal data packets (DIFI-style: stream ID, class ID, UTC integer and\n"
		"sample-count fractional timestamps, optional trailer) over UDP, with deterministic\n"
		"injected loss, reordering and duplication. SIGINT or SIGTERM ends every stream after\n"
		"its event in progress: the report counts what was sent, the pcap is whole.\n\n"
		"  -H, --host ADDR        destination IPv4 address (default 127.0.0.1)\n"
		"  -p, --port N           destination UDP port (default 4991)\n"
		"  -s, --streams N        number of streams (default 4)\n"
		"      --stream-id N      first stream ID (default 0x1000)\n"
		"  -S, --packet-size B    VRT packet bytes, multiple of 4, at most 65504 (the UDP/IPv4\n"
		"                         limit; default 1024)\n"
		"  -n, --packets N        data packets per stream, 1..2^48 (default 1000)\n"
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
		"      --gso              UDP GSO (UDP_SEGMENT): each stream's turn of up to 64 packets as\n"
		"                         buffers the kernel segments late (a GRO receiver gets them whole);\n"
		"                         same packets, same order (not with --eth)\n"
		"  -w, --pcap FILE        also write the datagrams to a pcap file (Ethernet/IPv4/UDP)\n"
		"      --pcap-only        write the pcap, send nothing\n"
		"  -j, --json             print what was sent and injected, per stream, as JSON\n"
		"Ethernet frames for a guest NIC (QEMU's -netdev dgram):\n"
		"      --eth              wrap each datagram in Ethernet II/IPv4/UDP (valid IPv4 and UDP\n"
		"                         checksums) and send the frame as the payload of one UDP datagram\n"
		"                         to --to, from one socket and thread; --port is then the frame's\n"
		"                         UDP destination port, --pcap gets the frames\n"
		"      --to ADDR:PORT     where the frames go (QEMU's dgram socket); needs --eth\n"
		"      --nic DEV          instead of --to: the frames are built in GPU memory registered\n"
		"                         through libpeerdma and pinned by peerdma.ko, and the NIC\n"
		"                         (drivers/e1000, e.g. /dev/peerdma_nic0) transmits them from there\n"
		"      --kernel-device F  with --nic: peerdma.ko's device (default /dev/peerdma)\n"
		"      --cuda-device N    with --nic: the GPU that holds the frames (default 0)\n"
		"      --dst-mac MAC      frame destination (default 52:54:00:12:34:56, QEMU's NIC)\n"
		"      --src-mac MAC      frame source (default 02:00:00:00:00:01)\n"
		"      --dst-ip ADDR      IPv4 destination in the frames (default 10.0.2.15)\n"
		"      --src-ip ADDR      IPv4 source in the frames (default 10.0.2.2)\n"
		"      --src-port N       UDP source port in the frames (default 4990)\n"
		"      --malformed N      after every N good frames one malformed frame, cycling through\n"
		"                         runt, ethertype, ip_hdr, ip_len, fragment, not_udp, port,\n"
		"                         udp_len, ip_csum, udp_csum, oversize (4200 bytes); the JSON\n"
		"                         report counts them per kind (default 0: none)\n"
		"  -h, --help\n");
}

struct gen_args {
	struct pdma_gen_config c;
	struct pdma_gen_send_opts so;
	const char *pcap;
	bool pcap_only, json;
	bool eth, host_set, threads_set;
	bool nic_opt;                /* --kernel-device or --cuda-device given (need --nic) */
	char eth_only[40];           /* the first --eth option given (for the error without --eth) */
	char to_host[16];            /* --to: the dgram socket */
	struct pdma_gen_nic nic;     /* --nic: transmit from GPU memory */
	uint16_t to_port;
	struct pdma_gen_eth e;       /* addresses, --malformed */
};

/* Parse and check everything that can be checked before sending: 0 to run,
 * 1 after --help, 2 after a one-line error. */
static int gen_parse(int argc, char **argv, struct gen_args *a)
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
		{ "eth", no_argument, NULL, 'E' },
		{ "to", required_argument, NULL, 'O' },
		{ "dst-mac", required_argument, NULL, 'M' },
		{ "src-mac", required_argument, NULL, 'm' },
		{ "dst-ip", required_argument, NULL, 'D' },
		{ "src-ip", required_argument, NULL, 'F' },
		{ "src-port", required_argument, NULL, 'Q' },
		{ "malformed", required_argument, NULL, 'X' },
		{ "nic", required_argument, NULL, 'N' },
		{ "kernel-device", required_argument, NULL, 'K' },
		{ "cuda-device", required_argument, NULL, 'G' },
		{ "gso", no_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct pdma_gen_config *c = &a->c;
	struct pdma_opt o;
	uint32_t port;
	int opt;

	memset(a, 0, sizeof(*a));
	pdma_gen_config_default(c);
	a->so.host = "127.0.0.1";
	a->so.port = 4991;
	a->e.addr = (struct pdma_eth_addr){ { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 }, { 0x02, 0, 0, 0, 0, 0x01 },
					   0, 0, 4990, 0 };
	inet_pton(AF_INET, "10.0.2.2", &a->e.addr.src_ip);
	inet_pton(AF_INET, "10.0.2.15", &a->e.addr.dst_ip);
	pdma_opt_init(&o, "peerdma gen", opts, "H:p:s:S:n:r:t:w:jh");
	while ((opt = pdma_opt_next(&o, argc, argv)) != -1) {
		int bad = 0; /* flags leave it 0 */

		switch (opt) {
		case 'H':
			bad = pdma_opt_ipv4(&o, &a->so.host);
			a->host_set = true;
			break;
		case 'p':
			bad = pdma_opt_u32(&o, 1, 65535, &port);
			if (!bad)
				a->so.port = (uint16_t)port;
			break;
		case 's': bad = pdma_opt_u32(&o, 1, 65535, &c->streams); break;
		case 'I': bad = pdma_opt_u32(&o, 0, UINT32_MAX, &c->stream_id_base); break;
		case 'S': {
			/* Checked here, not by the kernel's EMSGSIZE at the first send. */
			uint64_t x;
			bad = pdma_opt_parse_u64(optarg, &x) || x > PDMA_GEN_MAX_PACKET || x % 4;
			if (bad)
				pdma_opt_bad(&o, "want a multiple of 4 up to %u, the most a UDP/IPv4 datagram "
						 "carries in 32-bit words (65535 - 20 IPv4 - 8 UDP header bytes)",
					     PDMA_GEN_MAX_PACKET);
			else
				c->packet_size = (uint32_t)x;
			break;
		}
		case 'n': bad = pdma_opt_u64(&o, 1, PDMA_GEN_MAX_PACKETS, &c->packets); break;
		case 'r': bad = pdma_opt_double(&o, 0, 1e9, 0, &a->so.rate_pps); break;
		case 't':
			bad = pdma_opt_u32(&o, 1, 65535, &a->so.threads);
			a->threads_set = a->so.threads > 1;
			break;
		case 'R': bad = pdma_opt_u64(&o, 1, UINT32_MAX, &c->sample_rate); break;
		case 'T': c->trailer = false; break;
		case 'C': c->context = false; break;
		case 'l': bad = pdma_opt_u32(&o, 0, 1000, &c->loss_pm); break;
		case 'b': bad = pdma_opt_u32(&o, 1, 1u << 20, &c->loss_burst); break;
		case 'd': bad = pdma_opt_u32(&o, 0, 1000, &c->dup_pm); break;
		case 'o': bad = pdma_opt_u32(&o, 0, 1000, &c->reorder_pm); break;
		case 'e': bad = pdma_opt_u64(&o, 0, UINT64_MAX, &c->seed); break;
		case 'w': bad = pdma_opt_str(&o, &a->pcap); break;
		case 'P': a->pcap_only = true; break;
		case 'j': a->json = true; break;
		case 'E': a->eth = true; break;
		case 'g': a->so.gso = true; break;
		case 'O': bad = pdma_opt_ipv4_port(&o, a->to_host, &a->to_port); break;
		case 'M': bad = pdma_opt_mac(&o, a->e.addr.dst_mac); break;
		case 'm': bad = pdma_opt_mac(&o, a->e.addr.src_mac); break;
		case 'D':
		case 'F': {
			const char *ip;
			bad = pdma_opt_ipv4(&o, &ip);
			if (!bad)
				inet_pton(AF_INET, ip, opt == 'D' ? &a->e.addr.dst_ip : &a->e.addr.src_ip);
			break;
		}
		case 'Q': {
			uint32_t p;
			bad = pdma_opt_u32(&o, 1, 65535, &p);
			if (!bad)
				a->e.addr.sport = (uint16_t)p;
			break;
		}
		case 'X': bad = pdma_opt_u32(&o, 0, UINT32_MAX, &a->e.malformed_every); break;
		case 'N': bad = pdma_opt_str(&o, &a->nic.dev); break;
		case 'K': bad = pdma_opt_str(&o, &a->nic.kernel_device); break;
		case 'G': {
			uint32_t d;
			bad = pdma_opt_u32(&o, 0, 1023, &d);
			if (!bad)
				a->nic.cuda_device = (int)d;
			break;
		}
		case 'h': usage(stdout); return 1;
		default: return 2; /* getopt_long said why, in one line */
		}
		if (bad)
			return 2;
		if (strchr("KG", opt))
			a->nic_opt = true;
		if (strchr("OMmDFQXNKG", opt) && !a->eth_only[0])
			snprintf(a->eth_only, sizeof(a->eth_only), "%s", o.name);
	}
	if (pdma_opt_end(&o, argc, argv))
		return 2;
	if (a->eth_only[0] && !a->eth)
		return pdma_opt_fail(&o, "%s needs --eth", a->eth_only);
	if (a->eth) {
		if (a->to_port && a->nic.dev)
			return pdma_opt_fail(&o, "--to and --nic both name where frames go: one of them");
		if (a->nic_opt && !a->nic.dev)
			return pdma_opt_fail(&o, "--kernel-device and --cuda-device go with --nic");
		if (!a->to_port && !a->nic.dev && !a->pcap_only)
			return pdma_opt_fail(&o, "--eth needs --to ADDR:PORT (QEMU's -netdev dgram socket), "
						 "--nic DEV, or --pcap-only");
		if (a->pcap_only && (a->to_port || a->nic.dev))
			return pdma_opt_fail(&o, "--pcap-only sends nothing: not with --to or --nic");
		if (a->host_set)
			return pdma_opt_fail(&o, "--host does not combine with --eth: --to names where frames go, "
						 "--dst-ip the frames' IPv4 destination");
		if (a->threads_set)
			return pdma_opt_fail(&o, "--threads does not combine with --eth: one sender keeps the frames' order");
		if (a->so.gso)
			return pdma_opt_fail(&o, "--gso does not combine with --eth: frames go one per datagram");
		if ((uint64_t)c->packet_size + PDMA_ETH_HDRS > 65507)
			return pdma_opt_fail(&o, "--packet-size %u with --eth: a frame passes the 65507 bytes one UDP "
						 "datagram to --to carries", c->packet_size);
		a->e.addr.dport = a->so.port;
	}
	if (a->pcap_only && !a->pcap)
		return pdma_opt_fail(&o, "--pcap-only needs --pcap FILE");
	if (c->loss_pm + c->dup_pm + c->reorder_pm > 1000)
		return pdma_opt_fail(&o, "--loss + --dup + --reorder must not exceed 1000 per mille");
	if (pdma_gen_payload_len(c) < 4)
		return pdma_opt_fail(&o, "--packet-size %u leaves no payload (prologue %u bytes)",
				     c->packet_size, c->trailer ? 32u : 28u);
	/* Stream IDs are 32 bits: the last stream's must not wrap to 0. */
	if ((uint64_t)c->stream_id_base + c->streams - 1 > UINT32_MAX)
		return pdma_opt_fail(&o, "--stream-id %#x with --streams %u passes stream ID 0xffffffff",
				     c->stream_id_base, c->streams);
	return 0;
}

int pdma_cmd_gen_check(int argc, char **argv)
{
	struct gen_args a;

	return gen_parse(argc, argv, &a) == 2 ? 2 : 0;
}

int pdma_cmd_gen(int argc, char **argv)
{
	struct gen_args a;
	int ret = gen_parse(argc, argv, &a);

	if (ret)
		return ret == 1 ? 0 : 2;
	/* A stop ends each stream where its receiver's accounting still
	 * equals what the report says was sent (pdma_gen_finish), and closes
	 * the pcap whole; killed, gen left neither. */
	pdma_cmd_catch_stop(on_signal);

	struct pdma_gen_config c = a.c;
	struct pdma_gen_send_opts so = a.so;
	const char *pcap = a.pcap;
	bool pcap_only = a.pcap_only, json = a.json;
	struct pdma_gen *g;
	/* The parse checked what pdma_gen_open checks: what fails here is
	 * memory, not usage. */
	ret = pdma_gen_open(&c, &g);
	if (ret) {
		fprintf(stderr, "peerdma gen: %s\n", strerror(-ret));
		return 1;
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
	char msg[256] = "";
	so.stop = &stop_sending;
	if (a.eth) {
		so.host = a.to_host;
		so.port = a.to_port; /* 0 with --pcap-only: nothing sent */
		so.pcap = pf;
		ret = pdma_gen_eth_init(&a.e);
		if (!ret && a.nic.dev)
			ret = pdma_gen_send_nic(g, &so, &a.e, &a.nic, msg, sizeof(msg));
		else if (!ret)
			ret = pdma_gen_send_eth(g, &so, &a.e);
	} else if (pcap_only) {
		ret = pdma_gen_write_pcap(g, pf, so.host, so.port, &stop_sending);
	} else {
		so.pcap = pf;
		ret = pdma_gen_send(g, &so);
	}
	if (pf && fclose(pf) && !ret)
		ret = -EIO;
	if (ret) {
		fprintf(stderr, "peerdma gen: %s\n", msg[0] ? msg : strerror(-ret));
		pdma_gen_eth_fini(&a.e);
		pdma_gen_close(g);
		return 1;
	}
	/* A signal after the last packet had been decided cut nothing. */
	bool stopped = atomic_load(&stop_sending) && !pdma_gen_complete(g);
	uint64_t total = 0;
	json_t *arr = json_array();
	for (uint32_t i = 0; i < c.streams; i++) {
		const struct pdma_gen_inject *in = pdma_gen_injected(g, i);
		total += in->sent + in->context;
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
		/* by a signal: the streams' "sent" say how far each got */
		json_object_set_new(o, "stopped", json_boolean(stopped));
		json_object_set_new(o, "streams", arr);
		if (a.eth) {
			json_t *m = json_object();
			for (int k = 1; k < PDMA_FRM_E__MAX; k++)
				json_object_set_new(m, pdma_frm_reason_name(k), json_integer((json_int_t)a.e.injected[k]));
			json_t *eo = json_object();
			json_object_set_new(eo, "frames", json_integer((json_int_t)(a.e.good + pdma_gen_eth_malformed(&a.e))));
			json_object_set_new(eo, "good", json_integer((json_int_t)a.e.good));
			json_object_set_new(eo, "malformed_every", json_integer(a.e.malformed_every));
			json_object_set_new(eo, "malformed", m);
			json_object_set_new(o, "eth", eo);
		}
		json_dumpf(o, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(o);
	} else {
		json_decref(arr);
		if (a.eth)
			fprintf(stderr, "frames: %llu good, %llu malformed\n", (unsigned long long)a.e.good,
				(unsigned long long)pdma_gen_eth_malformed(&a.e));
	}
	if (stopped)
		fprintf(stderr, "peerdma gen: stopped by a signal after %llu %s%s\n",
			(unsigned long long)(a.eth ? a.e.good + pdma_gen_eth_malformed(&a.e) : total),
			a.eth ? "frame(s)" : "datagram(s)", pcap_only ? " (written to the pcap)" : "");
	pdma_gen_eth_fini(&a.e);
	pdma_gen_close(g);
	return 0;
}
