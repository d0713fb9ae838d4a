// SPDX-License-Identifier: MIT
/* AF_XDP receive (ingest/rx/xdp.c), on the loopback device of a network
 * namespace of the test's own (so that nothing else on the machine sees the
 * XDP program): datagrams land in ring slots in order, byte for byte, with
 * the slot format's header; what the program passes on (a frame longer than
 * a UMEM frame, IP fragments) comes through the UDP socket and is counted;
 * another port's and another address's traffic is untouched; a frame whose
 * IPv4 header checksum is wrong is counted invalid and never reaches a slot;
 * a full ring and a full RX ring drop, and count, exactly what found no
 * room; the errors say what is wrong; `peerdma gen | peerdma ingest --rx
 * xdp` agree on every injected loss, duplicate and reordering; and a stop
 * under traffic that goes on is not held up.
 *
 * Needs root (a network namespace, an XDP program, an XDP socket); skipped,
 * saying why, otherwise, and where the build or the kernel has no AF_XDP.
 * Single-threaded: the receive loop runs with stop already set, so it drains
 * what was sent and returns after 20 ms of quiet. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/gen_vs_ingest.h"

#include "deframe/deframe.h"
#include "rx/rx.h"

#define SLOT 1600u /* 1564-byte datagrams at most: 2048-byte UMEM frames */

struct fix {
	int fd; /* the session's UDP socket */
	uint16_t port;
	struct pdma_rx_xdp *x;
	struct pdma_rx_xsk *s;
	struct pdma_ring r;
	struct pdma_rx_stats st;
	char msg[256];
	bool open; /* closed by teardown if a check failed on the way */
};

/* Byte i of datagram d: distinct per datagram and place. */
static uint8_t pat(uint32_t d, uint32_t i)
{
	return (uint8_t)(d * 29u + i * 5u + 3u);
}

static int lo_set(unsigned long req, struct ifreq *ifr)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0), ret;
	snprintf(ifr->ifr_name, sizeof(ifr->ifr_name), "lo");
	ret = ioctl(fd, req, ifr);
	close(fd);
	return ret;
}

static void lo_mtu(int mtu)
{
	struct ifreq ifr = { .ifr_mtu = mtu };
	assert_int_equal(lo_set(SIOCSIFMTU, &ifr), 0);
}

static int udp_to(const char *addr, uint16_t port, const void *buf, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	inet_pton(AF_INET, addr, &a.sin_addr);
	ssize_t n = sendto(fd, buf, len, 0, (struct sockaddr *)&a, sizeof(a));
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

/* Datagram d of len bytes to the fixture's port. */
static void send_dg(const struct fix *f, uint32_t d, uint32_t len)
{
	uint8_t buf[8192];
	for (uint32_t i = 0; i < len; i++)
		buf[i] = pat(d, i);
	assert_int_equal(udp_to("127.0.0.1", f->port, buf, len), 0);
}

/* The session's socket on an ephemeral port, a ring of slots, the program
 * on lo and a socket on queue 0. */
static void fix_open(struct fix *f, uint32_t slots)
{
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	f->open = true;
	assert_int_equal(pdma_rx_socket_open("127.0.0.1", 0, 4 << 20, &f->fd), 0);
	f->port = pdma_rx_socket_port(f->fd);
	assert_int_equal(pdma_ring_init(&f->r, slots, SLOT, PDMA_RING_FULL), 0);
	int e = pdma_rx_xdp_open(&f->x, NULL, "127.0.0.1", f->port, SLOT, f->msg, sizeof(f->msg));
	if (!e)
		e = pdma_rx_xsk_open(&f->s, f->x, 0, f->msg, sizeof(f->msg));
	if (e)
		fail_msg("%s (%s)", f->msg, strerror(-e));
}

static void fix_close(struct fix *f)
{
	if (!f->open)
		return;
	pdma_rx_xsk_close(f->s);
	pdma_rx_xdp_close(f->x);
	pdma_ring_fini(&f->r);
	if (f->fd >= 0)
		close(f->fd);
	f->open = false;
}

static int setup(void **state)
{
	*state = calloc(1, sizeof(struct fix));
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	fix_close(*state);
	free(*state);
	return 0;
}

/* Everything sent so far, into the ring. */
static void drain(struct fix *f)
{
	atomic_bool stop = true;
	assert_int_equal(pdma_rx_xsk_run(f->s, f->fd, &f->r, 64, &stop, &f->st), 0);
}

static void check_slot(const struct fix *f, uint64_t k, uint32_t d, uint32_t len, uint32_t seq)
{
	const uint8_t *s = pdma_ring_slot(&f->r, k);
	const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)s;
	assert_int_equal(h->len, len);
	assert_int_equal(h->flags, len >= 4 ? PDMA_SLOT_TAIL : 0);
	assert_int_equal(h->rx_seq, seq);
	for (uint32_t i = 0; i < len; i++)
		if (s[PDMA_SLOT_HDR + i] != pat(d, i))
			fail_msg("slot %llu byte %u", (unsigned long long)k, i);
	if (len >= 4)
		assert_memory_equal(&h->tail, s + PDMA_SLOT_HDR + len - 4, 4);
}

#define LD(x) atomic_load(&(x))

/* 300 datagrams of 1 to 1564 bytes: 300 slots in order, through the XDP
 * socket (none via the stack), and the report says where and how. */
static void test_datagrams_in_order(void **state)
{
	struct fix *f = *state;
	struct pdma_rx_xdp_info in;
	uint64_t bytes = 0;

	fix_open(f, 512);
	pdma_rx_xdp_info(f->x, &in);
	assert_string_equal(in.dev, "lo");
	assert_string_equal(in.mode, "generic"); /* lo has no driver XDP */
	assert_false(in.zerocopy);
	assert_true(in.csum_trusted);
	assert_int_equal(in.chunk, 2048);
	for (uint32_t d = 0; d < 300; d++) {
		uint32_t len = d == 0 ? 1 : d == 1 ? SLOT - PDMA_SLOT_HDR : 1 + (d * 97u) % 1500u;
		send_dg(f, d, len);
		bytes += len;
	}
	drain(f);
	assert_int_equal(LD(f->r.head), 300);
	for (uint32_t d = 0; d < 300; d++)
		check_slot(f, d, d, d == 0 ? 1 : d == 1 ? SLOT - PDMA_SLOT_HDR : 1 + (d * 97u) % 1500u, d);
	assert_int_equal(LD(f->st.datagrams), 300);
	assert_int_equal(LD(f->st.bytes), bytes);
	assert_int_equal(LD(f->st.xdp_stack), 0);
	assert_int_equal(LD(f->st.xdp_invalid), 0);
	assert_int_equal(LD(f->st.truncated), 0);
	assert_int_equal(LD(f->st.socket_drops), 0);
	assert_int_equal(LD(f->r.overruns), 0);
	fix_close(f);
}

/* A 3000-byte datagram is longer than a 2048-byte UMEM frame holds, and so
 * passed on; with an MTU of 1500 it arrives as IP fragments, also passed on:
 * both come through the UDP socket, whole (truncated to the slot, as every
 * path does), counted as via the stack. The datagram after them takes the
 * XDP way again. */
static void test_passed_on_to_socket(void **state)
{
	struct fix *f = *state;
	const uint32_t cap = SLOT - PDMA_SLOT_HDR;

	fix_open(f, 64);
	/* drained one at a time: the two ways are not ordered with each
	 * other (rx/xdp.c) */
	send_dg(f, 0, 3000);
	drain(f);
	lo_mtu(1500);
	send_dg(f, 1, 3000);
	lo_mtu(65536);
	drain(f);
	send_dg(f, 2, 100);
	/* longer than a slot, within a UMEM frame: the XDP way, truncated
	 * to the slot as the socket's are */
	send_dg(f, 3, 1700);
	drain(f);
	assert_int_equal(LD(f->r.head), 4);
	assert_int_equal(LD(f->st.xdp_stack), 2);
	assert_int_equal(LD(f->st.datagrams), 4);
	assert_int_equal(LD(f->st.truncated), 3);
	for (uint32_t d = 0; d < 4; d += d == 1 ? 2 : 1) {
		const uint8_t *s = pdma_ring_slot(&f->r, d);
		const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)s;
		assert_int_equal(h->len, cap);
		assert_true(h->flags & PDMA_SLOT_TRUNC);
		for (uint32_t i = 0; i < cap; i++)
			if (s[PDMA_SLOT_HDR + i] != pat(d, i))
				fail_msg("datagram %u byte %u", d, i);
	}
	check_slot(f, 2, 2, 100, 0); /* rx_seq counts within a run: the third drain's first */
	fix_close(f);
}

/* The program takes only the session's port and address: a socket on
 * another port, and one on the session's port at another address, get
 * their datagrams as without it. */
static void test_other_traffic_untouched(void **state)
{
	struct fix *f = *state;
	int other, addr2;
	uint8_t buf[64];

	fix_open(f, 64);
	assert_int_equal(pdma_rx_socket_open("127.0.0.1", 0, 1 << 20, &other), 0);
	assert_int_equal(pdma_rx_socket_open("127.0.0.2", f->port, 1 << 20, &addr2), 0);
	assert_int_equal(udp_to("127.0.0.1", pdma_rx_socket_port(other), "other port", 10), 0);
	assert_int_equal(udp_to("127.0.0.2", f->port, "other addr", 10), 0);
	assert_int_equal(recv(other, buf, sizeof(buf), 0), 10);
	assert_memory_equal(buf, "other port", 10);
	assert_int_equal(recv(addr2, buf, sizeof(buf), 0), 10);
	assert_memory_equal(buf, "other addr", 10);
	drain(f);
	assert_int_equal(LD(f->r.head), 0);
	assert_int_equal(LD(f->st.datagrams), 0);
	close(other);
	close(addr2);
	fix_close(f);
}

/* Raw Ethernet frames on lo (a packet socket: XDP sees them as a NIC's):
 * one well formed, one with its IPv4 header checksum wrong, one more well
 * formed. Two datagrams; one invalid frame, counted, in no slot. */
static void send_frame(uint16_t port, uint32_t d, bool bad_ip_csum)
{
	uint8_t fr[14 + 20 + 8 + 100] = { 0 };
	uint8_t *ip = fr + 14, *udp = ip + 20;
	uint32_t sum = 0;
	struct sockaddr_ll ll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP),
				  .sll_ifindex = (int)if_nametoindex("lo"), .sll_halen = 6 };
	int fd = socket(AF_PACKET, SOCK_RAW, 0);

	assert_true(fd >= 0);
	fr[12] = 0x08;
	ip[0] = 0x45;
	ip[3] = 20 + 8 + 100;
	ip[6] = 0x40; /* DF */
	ip[8] = 64;
	ip[9] = 17;
	ip[12] = ip[16] = 127;
	ip[15] = ip[19] = 1;
	for (int i = 0; i < 20; i += 2)
		sum += (uint32_t)ip[i] << 8 | ip[i + 1];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = ~((sum & 0xffff) + (sum >> 16)) & 0xffff;
	if (bad_ip_csum)
		sum ^= 0x0100;
	ip[10] = (uint8_t)(sum >> 8);
	ip[11] = (uint8_t)sum;
	udp[0] = 0x30;
	udp[2] = (uint8_t)(port >> 8);
	udp[3] = (uint8_t)port;
	udp[5] = 8 + 100; /* UDP checksum 0: none */
	for (uint32_t i = 0; i < 100; i++)
		udp[8 + i] = pat(d, i);
	assert_int_equal(sendto(fd, fr, sizeof(fr), 0, (struct sockaddr *)&ll, sizeof(ll)), (ssize_t)sizeof(fr));
	close(fd);
}

static void test_invalid_frame_counted(void **state)
{
	struct fix *f = *state;

	fix_open(f, 64);
	send_frame(f->port, 0, false);
	send_frame(f->port, 1, true);
	send_frame(f->port, 2, false);
	drain(f);
	assert_int_equal(LD(f->r.head), 2);
	assert_int_equal(LD(f->st.datagrams), 2);
	assert_int_equal(LD(f->st.xdp_invalid), 1);
	check_slot(f, 0, 0, 100, 0);
	check_slot(f, 1, 2, 100, 1);
	fix_close(f);
}

/* A ring of 8 slots and 20 datagrams: 8 land, 12 overruns, one each. */
static void test_ring_full(void **state)
{
	struct fix *f = *state;

	fix_open(f, 8);
	for (uint32_t d = 0; d < 20; d++)
		send_dg(f, d, 200);
	drain(f);
	assert_int_equal(LD(f->r.head), 8);
	assert_int_equal(LD(f->st.datagrams), 8);
	assert_int_equal(LD(f->r.overruns), 12);
	for (uint32_t d = 0; d < 8; d++)
		check_slot(f, d, d, 200, d);
	fix_close(f);
}

/* Nobody reading: the XDP socket's RX ring (4096 entries) fills and the
 * kernel drops the rest, each counted (XDP_STATISTICS): what was sent is
 * what landed plus what the socket dropped. */
static void test_rx_ring_full_drops(void **state)
{
	struct fix *f = *state;
	const uint32_t n = 5000;

	fix_open(f, 8192);
	for (uint32_t d = 0; d < n; d++)
		send_dg(f, d, 64);
	drain(f);
	assert_int_equal(LD(f->st.datagrams) + LD(f->st.socket_drops), n);
	assert_int_equal(LD(f->st.datagrams), 4096);
	for (uint32_t d = 0; d < 4096; d++)
		check_slot(f, d, d, 64, d);
	fix_close(f);
}

static void test_errors(void **state)
{
	struct fix *f = *state;
	struct pdma_rx_xdp *x = NULL;
	struct pdma_rx_xsk *s = NULL;
	char msg[256] = "";

	assert_int_equal(pdma_rx_xdp_open(&x, "nope0", "127.0.0.1", 9, SLOT, msg, sizeof(msg)), -ENODEV);
	assert_non_null(strstr(msg, "no network device 'nope0'"));
	assert_int_equal(pdma_rx_xdp_open(&x, NULL, "0.0.0.0", 9, SLOT, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "--xdp-dev"));
	assert_int_equal(pdma_rx_xdp_open(&x, NULL, "10.99.99.99", 9, SLOT, msg, sizeof(msg)), -ENODEV);
	assert_non_null(strstr(msg, "no device holds 10.99.99.99"));
	assert_int_equal(pdma_rx_xdp_open(&x, "lo", "127.0.0.1", 0, SLOT, msg, sizeof(msg)), -EINVAL);
	assert_null(x);

	fix_open(f, 8);
	/* lo has one receive queue */
	assert_int_equal(pdma_rx_xsk_open(&s, f->x, 1, msg, sizeof(msg)), -EINVAL);
	assert_null(s);
	assert_non_null(strstr(msg, "receive queue 1"));
	assert_non_null(strstr(msg, "--threads"));
	/* one XDP program a device */
	assert_int_equal(pdma_rx_xdp_open(&x, "lo", "127.0.0.1", f->port, SLOT, msg, sizeof(msg)), -EBUSY);
	assert_null(x);
	assert_non_null(strstr(msg, "another XDP program"));
	fix_close(f);
	/* gone with the first: the device is free again */
	fix_open(f, 8);
	fix_close(f);
}

/* The command: gen -> ingest --rx xdp, what gen injected is what ingest
 * reports, per stream; every datagram came the XDP way. */
static void test_gen_to_ingest(void **state)
{
	const char *tool = getenv("PEERDMA_TOOL");
	char dir[] = "/tmp/pdma-xdp-XXXXXX", cmd[64];
	json_t *g, *in;

	if (!tool) {
		printf("skipped: PEERDMA_TOOL not set (run through ctest)\n");
		skip();
	}
	assert_non_null(mkdtemp(dir));
	gen_to_ingest_run(tool, dir, 4995, "--rx xdp", "", &g, &in);
	assert_string_equal(json_string_value(json_object_get(in, "rx_io")), "xdp");
	json_t *x = json_object_get(in, "xdp");
	assert_string_equal(json_string_value(json_object_get(x, "device")), "lo");
	assert_int_equal(json_integer_value(json_object_get(x, "via_stack")), 0);
	assert_int_equal(json_integer_value(json_object_get(x, "invalid_frames")), 0);
	assert_int_equal(json_integer_value(json_object_get(in, "socket_drops")), 0);
	assert_int_equal(json_integer_value(json_object_get(in, "ring_overruns")), 0);
	assert_int_equal(json_array_size(json_object_get(g, "streams")), 3);
	assert_true(gen_vs_ingest(g, in, 3000) > 0);
	json_decref(g);
	json_decref(in);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* A stop while gen goes on sending ends within the drain bound on the XDP
 * path too (support/gen_vs_ingest.h). */
static void test_stop_under_traffic(void **state)
{
	const char *tool = getenv("PEERDMA_TOOL");
	char dir[] = "/tmp/pdma-xdp-XXXXXX", cmd[64];

	(void)state;
	if (!tool) {
		printf("skipped: PEERDMA_TOOL not set (run through ctest)\n");
		skip();
	}
	assert_non_null(mkdtemp(dir));
	stop_under_traffic(tool, dir, 4996, "--rx xdp", "-d 1");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_datagrams_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_passed_on_to_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_traffic_untouched, setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalid_frame_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ring_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rx_ring_full_drops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gen_to_ingest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_under_traffic, setup, teardown),
	};
	struct pdma_rx_xdp *x = NULL;
	struct ifreq ifr = { 0 };
	char msg[256] = "";
	int e;

	if (geteuid() != 0) {
		printf("skipped: AF_XDP needs root (a network namespace, CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW)\n");
		return 77;
	}
	/* Our own network namespace, its lo up: the program is seen by no one
	 * else, and the address 127.0.0.2 is on lo as 127.0.0.0/8. */
	if (unshare(CLONE_NEWNET) < 0) {
		printf("skipped: cannot make a network namespace: %s\n", strerror(errno));
		return 77;
	}
	ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
	if (lo_set(SIOCSIFFLAGS, &ifr) < 0) {
		printf("skipped: cannot bring lo up in the namespace: %s\n", strerror(errno));
		return 77;
	}
	e = pdma_rx_xdp_open(&x, "lo", "127.0.0.1", 9, SLOT, msg, sizeof(msg));
	pdma_rx_xdp_close(x);
	if (e == -EOPNOTSUPP) {
		printf("skipped: %s\n", msg);
		return 77;
	}
	int fd = socket(AF_XDP, SOCK_RAW, 0);
	if (fd < 0) {
		printf("skipped: no AF_XDP sockets in this kernel: %s\n", strerror(errno));
		return 77;
	}
	close(fd);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
