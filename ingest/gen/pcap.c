// SPDX-License-Identifier: MIT
/* The generator's datagrams as a pcap file (Ethernet, IPv4, UDP; no network
 * needed): pdma_gen_next's order, one source port per stream. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"
#include "gen/eth.h"
#include "gen/gen_int.h"

/* Ethernet (14) + IPv4 (20) + UDP (8) header bytes before each datagram. */
#define PCAP_HDRS PDMA_ETH_HDRS
/* The largest UDP payload over IPv4: 65535 - 20 - 8. */
#define UDP4_MAX 65507u
/* The file header's snaplen: libpcap's and tcpdump's maximum (MAXIMUM_SNAPLEN).
 * It must cover the longest record, PCAP_HDRS + UDP4_MAX = 65549 bytes; 65535
 * made readers cut every datagram above 65493 bytes. */
#define PCAP_SNAPLEN 262144u
_Static_assert(PCAP_HDRS + UDP4_MAX <= PCAP_SNAPLEN, "a record longer than the snaplen");

void pdma_gen_pcap_header(FILE *f)
{
	uint32_t h[6] = { 0xa1b2c3d4u, 0x00040002u, 0, 0, PCAP_SNAPLEN, 1 /* Ethernet */ };
	/* version 2.4 stored as two 16-bit fields, little-endian host order */
	uint16_t v[2] = { 2, 4 };
	fwrite(&h[0], 4, 1, f);
	fwrite(v, 2, 2, f);
	fwrite(&h[2], 4, 4, f);
}

int pdma_gen_pcap_frame(FILE *f, const uint8_t *hdr, uint32_t hlen, const uint8_t *pkt, uint32_t len,
			uint64_t t_us)
{
	uint32_t caplen = hlen + len;
	uint32_t rec[4] = { (uint32_t)(t_us / 1000000), (uint32_t)(t_us % 1000000), caplen, caplen };

	if (caplen > PCAP_SNAPLEN)
		return -EMSGSIZE;
	if (fwrite(rec, 4, 4, f) != 4 || fwrite(hdr, 1, hlen, f) != hlen || fwrite(pkt, 1, len, f) != len)
		return -EIO;
	return 0;
}

int pdma_gen_pcap_record(FILE *f, const uint8_t *pkt, uint32_t len, uint32_t src, uint32_t dst,
			 uint16_t sport, uint16_t dport, uint64_t t_us)
{
	const struct pdma_eth_addr a = { { 0x02, 0, 0, 0, 0, 2 }, { 0x02, 0, 0, 0, 0, 1 }, src, dst, sport, dport };
	uint8_t h[PDMA_ETH_HDRS];

	if (len > UDP4_MAX)
		return -EMSGSIZE;
	pdma_eth_frame(h, &a, len, 0, 0); /* headers only: no UDP checksum */
	return pdma_gen_pcap_frame(f, h, PDMA_ETH_HDRS, pkt, len, t_us);
}

int pdma_gen_write_pcap(struct pdma_gen *g, FILE *f, const char *host, uint16_t port,
			const atomic_bool *stop)
{
	struct in_addr dst, src;
	uint8_t *buf = malloc(65536);
	uint32_t si;
	uint64_t n = 0;
	int len, ret = 0;

	if (!buf)
		return -ENOMEM;
	if (inet_pton(AF_INET, host ? host : "127.0.0.1", &dst) != 1) {
		free(buf);
		return -EINVAL;
	}
	inet_pton(AF_INET, "127.0.0.1", &src);
	pdma_gen_pcap_header(f);
	pdma_gen_stop_on(g, stop);
	while ((len = pdma_gen_next(g, buf, 65536, &si)) > 0) {
		/* One source port per stream, as pdma_gen_send uses. */
		ret = pdma_gen_pcap_record(f, buf, (uint32_t)len, src.s_addr, dst.s_addr,
				  (uint16_t)(40000 + si % 20000), port, n++);
		if (ret)
			break;
	}
	free(buf);
	if (len < 0)
		return len;
	return ferror(f) ? -EIO : ret;
}
