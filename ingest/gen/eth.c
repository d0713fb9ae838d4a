// SPDX-License-Identifier: MIT
/* Ethernet/IPv4/UDP frames of the generator's datagrams, and their
 * malformed variants. The checksums are computed with the frame parser's
 * own sum (deframe/frame.h), the code that checks them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"

#include "gen/eth.h"

const uint8_t pdma_eth_malformed_kind[PDMA_ETH_MALFORMED_KINDS] = {
	PDMA_FRM_E_RUNT,     PDMA_FRM_E_ETHERTYPE, PDMA_FRM_E_IP_HDR,  PDMA_FRM_E_IP_LEN,
	PDMA_FRM_E_FRAGMENT, PDMA_FRM_E_NOT_UDP,   PDMA_FRM_E_PORT,    PDMA_FRM_E_UDP_LEN,
	PDMA_FRM_E_IP_CSUM,  PDMA_FRM_E_UDP_CSUM,  PDMA_FRM_E_OVERSIZE,
};

static void put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint32_t get16(const uint8_t *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

static void ip_csum(uint8_t *ip)
{
	put16(ip + 10, 0);
	put16(ip + 10, ~pdma_frm_fold(pdma_frm_sum(ip, 20, 0)) & 0xffffu);
}

/* The UDP checksum of the datagram at udp (ulen bytes) under the addresses
 * of ip; 0 comes out as 0xffff (0 means "none"). */
static void udp_csum(const uint8_t *ip, uint8_t *udp, uint32_t ulen)
{
	put16(udp + 6, 0);
	uint32_t s = ~pdma_frm_fold(pdma_frm_sum(udp, ulen, pdma_frm_sum(ip + 12, 8, 17u + ulen))) & 0xffffu;
	put16(udp + 6, s ? s : 0xffffu);
}

int pdma_eth_frame(uint8_t *f, const struct pdma_eth_addr *a, uint32_t len, uint16_t ip_id, int with_csum)
{
	uint8_t *ip = f + 14, *udp = f + 34;

	if (len > 65535u - 28u)
		return -EMSGSIZE;
	memcpy(f, a->dst_mac, 6);
	memcpy(f + 6, a->src_mac, 6);
	put16(f + 12, 0x0800);
	memset(ip, 0, 28);
	ip[0] = 0x45;
	put16(ip + 2, 28 + len);
	put16(ip + 4, ip_id);
	ip[6] = 0x40; /* DF */
	ip[8] = 64;
	ip[9] = 17;
	memcpy(ip + 12, &a->src_ip, 4);
	memcpy(ip + 16, &a->dst_ip, 4);
	ip_csum(ip);
	put16(udp, a->sport);
	put16(udp + 2, a->dport);
	put16(udp + 4, 8 + len);
	if (with_csum)
		udp_csum(ip, udp, 8 + len);
	return (int)(PDMA_ETH_HDRS + len);
}

int pdma_eth_malform(uint8_t *f, uint32_t len, uint32_t cap, int why)
{
	uint8_t *ip = f + 14, *udp = f + 34;
	uint32_t tot = get16(ip + 2);

	if (len <= PDMA_FRM_MIN + 4u || len < 14 + tot || tot < 28)
		return -EINVAL;
	switch (why) {
	case PDMA_FRM_E_RUNT:
		return 34;
	case PDMA_FRM_E_ETHERTYPE:
		put16(f + 12, 0x86dd); /* IPv6 */
		return (int)len;
	case PDMA_FRM_E_IP_HDR:
		ip[0] = 0x65; /* version 6, IHL 5 */
		break;
	case PDMA_FRM_E_IP_LEN:
		put16(ip + 2, len - 14 + 100 > 65535u ? 65535u : len - 14 + 100); /* past the frame and any FCS */
		break;
	case PDMA_FRM_E_FRAGMENT:
		put16(ip + 6, 0x2000); /* MF: the first fragment of more */
		break;
	case PDMA_FRM_E_NOT_UDP:
		ip[9] = 6; /* TCP */
		break;
	case PDMA_FRM_E_PORT:
		put16(udp + 2, get16(udp + 2) ^ 0x8000u);
		udp_csum(ip, udp, get16(udp + 4));
		return (int)len;
	case PDMA_FRM_E_UDP_LEN:
		put16(udp + 4, tot - 20 + 4); /* past the IP datagram */
		return (int)len;
	case PDMA_FRM_E_IP_CSUM:
		ip[11] ^= 0x5a;
		return (int)len;
	case PDMA_FRM_E_UDP_CSUM: {
		/* A wrong checksum that is not 0 ("none"), never by 0xffff
		 * (the same sum in ones' complement). */
		uint32_t s = get16(udp + 6), b = s == 0x5a5au ? 0x1111u : 0x5a5au;
		put16(udp + 6, s ^ b);
		return (int)len;
	}
	case PDMA_FRM_E_OVERSIZE: {
		/* A valid frame, only too long: the datagram padded with zeros. */
		const uint32_t n = PDMA_ETH_OVERSIZE_LEN;
		if (len >= n)
			return (int)len; /* already past it */
		if (cap < n)
			return -EINVAL;
		memset(f + len, 0, n - len);
		put16(ip + 2, n - 14);
		put16(udp + 4, n - 34);
		ip_csum(ip);
		udp_csum(ip, udp, n - 34);
		return (int)n;
	}
	default:
		return -EINVAL;
	}
	ip_csum(ip); /* only the kind's property is wrong */
	return (int)len;
}

/* The copy of the last good frame: the largest frame gen builds. */
#define LAST_CAP (PDMA_GEN_MAX_PACKET + PDMA_ETH_HDRS)

int pdma_gen_eth_init(struct pdma_gen_eth *e)
{
	e->good = 0;
	memset(e->injected, 0, sizeof(e->injected));
	e->since = 0;
	e->next_kind = 0;
	e->ip_id = 0;
	e->last_len = 0;
	e->last = malloc(LAST_CAP > PDMA_ETH_OVERSIZE_LEN ? LAST_CAP : PDMA_ETH_OVERSIZE_LEN);
	return e->last ? 0 : -ENOMEM;
}

void pdma_gen_eth_fini(struct pdma_gen_eth *e)
{
	free(e->last);
	e->last = NULL;
}

int pdma_gen_eth_next(struct pdma_gen_eth *e, struct pdma_gen *g, uint8_t *buf, uint32_t cap, uint32_t *stream)
{
	if (cap < PDMA_ETH_OVERSIZE_LEN)
		return -EINVAL;
	if (e->malformed_every && e->since == e->malformed_every && e->last_len) {
		const int why = pdma_eth_malformed_kind[e->next_kind];
		memcpy(buf, e->last, e->last_len);
		int n = pdma_eth_malform(buf, e->last_len, cap, why);
		if (n < 0)
			return n;
		e->injected[why]++;
		e->next_kind = (e->next_kind + 1) % PDMA_ETH_MALFORMED_KINDS;
		e->since = 0;
		*stream = UINT32_MAX;
		return n;
	}
	int len = pdma_gen_next(g, buf + PDMA_ETH_HDRS, cap - PDMA_ETH_HDRS, stream);
	if (len <= 0)
		return len;
	int n = pdma_eth_frame(buf, &e->addr, (uint32_t)len, e->ip_id++, 1);
	if (n < 0)
		return n;
	e->good++;
	e->since++;
	if (e->malformed_every && (uint32_t)n <= LAST_CAP) {
		memcpy(e->last, buf, (size_t)n);
		e->last_len = (uint32_t)n;
	}
	return n;
}

uint64_t pdma_gen_eth_malformed(const struct pdma_gen_eth *e)
{
	uint64_t n = 0;

	for (int i = 0; i < PDMA_FRM_E__MAX; i++)
		n += e->injected[i];
	return n;
}
