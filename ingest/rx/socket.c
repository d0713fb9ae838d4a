// SPDX-License-Identifier: MIT
/* The UDP socket every receive path reads: one per receive thread, all bound
 * to the same port with SO_REUSEPORT so the kernel spreads flows over them
 * (a flow always hashes to the same socket, which keeps per-stream order). */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "rx/rx.h"

int pdma_rx_socket_open(const char *bind_addr, uint16_t port, int rcvbuf, int *fdp)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, fd;

	if (inet_pton(AF_INET, bind_addr ? bind_addr : "127.0.0.1", &a.sin_addr) != 1)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	/* Kernel drop counter in every recvmsg: socket-level loss is counted,
	 * never silent. */
	setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
	/* As root, FORCE lifts the rmem_max cap; otherwise take what we get. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	/* A short timeout so receive threads notice a stop request. */
	struct timeval tv = { 0, 20000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	*fdp = fd;
	return 0;
}

uint16_t pdma_rx_socket_port(int fd)
{
	struct sockaddr_in a = { 0 };
	socklen_t al = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &al) < 0)
		return 0;
	return ntohs(a.sin_port);
}

void pdma_rx_socket_drops(int fd, struct pdma_rx_stats *st)
{
	uint32_t mi[SK_MEMINFO_VARS];
	socklen_t l = sizeof(mi);

	if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mi, &l) == 0 && l > SK_MEMINFO_DROPS * sizeof(uint32_t))
		atomic_store_explicit(&st->socket_drops, mi[SK_MEMINFO_DROPS], memory_order_relaxed);
}
