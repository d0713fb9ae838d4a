// SPDX-License-Identifier: MIT
/* peerdma gen --eth: the generator's frames (gen/eth.h) as the payloads of
 * UDP datagrams to one socket, QEMU's `-netdev dgram` (which hands each
 * payload to the guest NIC as a received frame). One sender and one socket,
 * so frames arrive in pdma_gen_eth_next's order; sendmmsg batches, paced. */
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

int pdma_gen_send_eth(struct pdma_gen *g, const struct pdma_gen_send_opts *o, struct pdma_gen_eth *e)
{
	const struct pdma_gen_config *c = pdma_gen_get_config(g);
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(o->port) };
	bool net = o->port != 0; /* port 0: the pcap only */
	/* A buffer per batch entry: the largest frame, good or malformed. */
	uint32_t cap = c->packet_size + PDMA_ETH_HDRS;
	cap = cap < PDMA_ETH_OVERSIZE_LEN ? PDMA_ETH_OVERSIZE_LEN : cap;
	cap = (cap + 63) & ~63u;
	uint8_t *bufs = malloc((size_t)SEND_BATCH * cap);
	struct mmsghdr msg[SEND_BATCH];
	struct iovec iov[SEND_BATCH];
	uint64_t sent = 0;
	uint32_t nb = 0, si;
	int fd = -1, ret = 0, n;

	if (net && inet_pton(AF_INET, o->host ? o->host : "127.0.0.1", &dst.sin_addr) != 1) {
		free(bufs);
		return -EINVAL;
	}
	if (!bufs)
		return -ENOMEM;
	if (net) {
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
			ret = -errno;
			goto out;
		}
		int sz = 4 << 20;
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	}
	if (o->pcap)
		pdma_gen_pcap_header(o->pcap);
	memset(msg, 0, sizeof(msg));
	double t0 = pdma_gen_now();
	do {
		bool stop = o->stop && atomic_load(o->stop);
		uint8_t *b = bufs + (size_t)nb * cap;
		n = stop ? 0 : pdma_gen_eth_next(e, g, b, cap, &si);
		if (n < 0) {
			ret = n;
			break;
		}
		if (n > 0) {
			if (o->pcap && (ret = pdma_gen_pcap_frame(o->pcap, b, (uint32_t)n, b + n, 0, sent + nb)))
				break;
			iov[nb] = (struct iovec){ .iov_base = b, .iov_len = (size_t)n };
			msg[nb].msg_hdr.msg_iov = &iov[nb];
			msg[nb].msg_hdr.msg_iovlen = 1;
			nb++;
		}
		if (nb && (n == 0 || nb == SEND_BATCH)) {
			if (net && (ret = pdma_gen_flush(fd, msg, nb)))
				break;
			sent += nb;
			nb = 0;
			pdma_gen_pace(t0, sent, o->rate_pps);
		}
	} while (n > 0);
out:
	if (fd >= 0)
		close(fd);
	free(bufs);
	return ret;
}
