// SPDX-License-Identifier: MIT
/* peerdma gen --eth: the generator's frames (gen/eth.h) in batches, to a
 * sink: here the payloads of UDP datagrams to one socket, QEMU's `-netdev
 * dgram` (which hands each payload to the guest NIC as a received frame),
 * or nothing (--pcap-only); gen/nic_send.c's sink is a NIC transmitting from
 * GPU memory. One sender, so frames leave in pdma_gen_eth_next's order. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gen/eth.h"
#include "gen/gen.h"
#include "gen/gen_int.h"

uint32_t pdma_gen_eth_slot(const struct pdma_gen *g, uint32_t align)
{
	/* the largest frame, good or malformed */
	uint32_t cap = pdma_gen_get_config(g)->packet_size + PDMA_ETH_HDRS;

	cap = cap < PDMA_ETH_OVERSIZE_LEN ? PDMA_ETH_OVERSIZE_LEN : cap;
	return (cap + align - 1) & ~(align - 1);
}

int pdma_gen_eth_batches(struct pdma_gen *g, const struct pdma_gen_send_opts *o, struct pdma_gen_eth *e,
			 uint8_t *buf, uint32_t slot, uint32_t min_len, pdma_gen_eth_flush_fn flush,
			 void *arg)
{
	uint32_t len[PDMA_GEN_ETH_BATCH], nb = 0, si;
	uint64_t sent = 0;
	int ret, n;

	if (o->pcap)
		pdma_gen_pcap_header(o->pcap);
	pdma_gen_stop_on(g, o->stop);
	double t0 = pdma_gen_now();
	do {
		uint8_t *b = buf + (size_t)nb * slot;

		n = pdma_gen_eth_next(e, g, b, slot, &si);
		if (n < 0)
			return n;
		if (n > 0) {
			if ((uint32_t)n < min_len) { /* as the MAC would pad it */
				memset(b + n, 0, min_len - (uint32_t)n);
				n = (int)min_len;
			}
			ret = o->pcap ? pdma_gen_pcap_frame(o->pcap, b, (uint32_t)n, b + n, 0, sent + nb) : 0;
			if (ret)
				return ret;
			len[nb++] = (uint32_t)n;
		}
		if (nb && (n == 0 || nb == PDMA_GEN_ETH_BATCH)) {
			ret = flush ? flush(arg, buf, slot, len, nb) : 0;
			if (ret)
				return ret;
			sent += nb;
			nb = 0;
			pdma_gen_pace(t0, sent, o->rate_pps);
		}
	} while (n > 0);
	return 0;
}

/* A batch as the payloads of UDP datagrams on the connected socket. */
static int udp_flush(void *arg, uint8_t *buf, uint32_t slot, const uint32_t *len, uint32_t n)
{
	struct mmsghdr msg[PDMA_GEN_ETH_BATCH];
	struct iovec iov[PDMA_GEN_ETH_BATCH];

	memset(msg, 0, sizeof(msg));
	for (uint32_t i = 0; i < n; i++) {
		iov[i] = (struct iovec){ .iov_base = buf + (size_t)i * slot, .iov_len = len[i] };
		msg[i].msg_hdr.msg_iov = &iov[i];
		msg[i].msg_hdr.msg_iovlen = 1;
	}
	return pdma_gen_flush(*(int *)arg, msg, n);
}

int pdma_gen_send_eth(struct pdma_gen *g, const struct pdma_gen_send_opts *o, struct pdma_gen_eth *e)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(o->port) };
	bool net = o->port != 0; /* port 0: the pcap only */
	uint32_t slot = pdma_gen_eth_slot(g, 64);
	uint8_t *bufs = malloc((size_t)PDMA_GEN_ETH_BATCH * slot);
	int fd = -1, ret;

	if (!bufs)
		return -ENOMEM;
	if (net && inet_pton(AF_INET, o->host ? o->host : "127.0.0.1", &dst.sin_addr) != 1) {
		free(bufs);
		return -EINVAL;
	}
	if (net) {
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
			ret = -errno;
			goto out;
		}
		int sz = 4 << 20;
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	}
	/* no padding: QEMU's NIC model pads what it receives */
	ret = pdma_gen_eth_batches(g, o, e, bufs, slot, 0, net ? udp_flush : NULL, &fd);
out:
	if (fd >= 0)
		close(fd);
	free(bufs);
	return ret;
}
