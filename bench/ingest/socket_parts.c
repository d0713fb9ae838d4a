// SPDX-License-Identifier: MIT
/*
 * bench_ingest (g): the socket path's receive I/O side by side, one receive
 * thread, the CPU path, 1500-byte datagrams, each row the highest zero-loss
 * rate (part c's search, c_row) with where the time goes per datagram: the
 * receive thread's CPU time (and its system share), the softirq time of all
 * CPUs and all CPUs' busy time (/proc/stat: the senders included).
 *  loopback, sendmmsg   recvmmsg, io_uring, gro; each datagram its own skb:
 *                       the backlog does no GRO, so gro cannot coalesce
 *  loopback, GSO        the same receivers, gen sending UDP_SEGMENT buffers:
 *                       gro takes each buffer whole (the kernel's per-skb
 *                       work once per up to 64 datagrams), the others get
 *                       them segmented. A wire device sends one datagram at
 *                       a time, so this row is a bound, not the answer.
 *  veth, one at a time  gen in one network namespace, ingest in another, a
 *                       veth pair between them with GRO on the receiving
 *                       side (its NAPI, as a NIC's would deliver), gen
 *                       sending one datagram a call. Needs root and ip(8);
 *                       skipped, saying why, otherwise.
 * And a fourth receiver, xdp (AF_XDP, rx/xdp.c), in the rows whose
 * datagrams reach the device one by one: on loopback (generic XDP, after
 * the skb is built) and on the veth (native XDP: the veth's NAPI runs the
 * program before any skb of its own; XDP on a veth needs an MTU the page
 * holds, so the pair goes to 3000 for that row and back to 9000 after). Not
 * with GSO (a GSO buffer reaches XDP as one 64 KiB frame, which the program
 * passes to the stack) nor with the flush timeout (a GRO setting XDP skips).
 * The namespaces (pdg-rx-PID, pdg-tx-PID) and the veth pair are this run's
 * own, and deleted at the end, on error, and on SIGINT/SIGTERM.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_ingest.h"

/* The veth setup: names, the namespaces' fds. */
struct vethns {
	char rx_ns[32], tx_ns[32], rx_dev[IFNAMSIZ], tx_dev[IFNAMSIZ];
	int rx_fd, tx_fd;
	bool created;
};
static struct vethns *g_cleanup; /* for atexit and signals */

static int shell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int shell(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int r = system(cmd);
	return r == -1 ? -1 : WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

static void veth_delete(struct vethns *v)
{
	if (!v || !v->created)
		return;
	if (v->rx_fd >= 0)
		close(v->rx_fd);
	if (v->tx_fd >= 0)
		close(v->tx_fd);
	v->rx_fd = v->tx_fd = -1;
	/* Deleting a namespace deletes the veth end in it, and with it the
	 * pair; the link delete covers a namespace still held elsewhere. */
	shell("ip -n %s link del %s 2>/dev/null; ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null",
	   v->rx_ns, v->rx_dev, v->rx_ns, v->tx_ns);
	v->created = false;
}

static void cleanup_atexit(void)
{
	veth_delete(g_cleanup);
}

static void cleanup_signal(int sig)
{
	veth_delete(g_cleanup);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* fn(arg) with this thread in network namespace ns, back in its own after. */
static int in_ns(int ns, int (*fn)(void *), void *arg)
{
	const int unrun = INT_MIN;
	int ret = unrun, e = pdma_loopback_in_netns(ns, fn, arg, &ret);

	if (e && ret != unrun) {
		fprintf(stderr, "bench_ingest: setns back: %s\n", strerror(-e));
		abort(); /* must not go on in the wrong namespace */
	}
	return e ? e : ret;
}

/* Device features by name through the ethtool ioctl (ETHTOOL_SFEATURES),
 * so that ethtool(8) need not be installed. */
struct feat_req {
	const char *dev;
	const char *const *names; /* to set, NULL-terminated */
	const char *const *show;  /* to report */
	bool on;
	char report[256];         /* "name on|off|n/a, ..." after the change */
};

static int feat_ioctl(int fd, const char *dev, void *data)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", dev);
	ifr.ifr_data = data;
	return ioctl(fd, SIOCETHTOOL, &ifr) < 0 ? -errno : 0;
}

static int set_features(void *arg)
{
	struct feat_req *q = arg;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret;
	struct ethtool_sset_info *si = NULL;
	struct ethtool_gstrings *gs = NULL;
	struct ethtool_sfeatures *sf = NULL;
	struct ethtool_gfeatures *gf = NULL;
	uint32_t n = 0, words;

	if (fd < 0)
		return -errno;
	si = calloc(1, sizeof(*si) + sizeof(uint32_t));
	if (!si) {
		ret = -ENOMEM;
		goto out;
	}
	si->cmd = ETHTOOL_GSSET_INFO;
	si->sset_mask = 1ull << ETH_SS_FEATURES;
	if ((ret = feat_ioctl(fd, q->dev, si)))
		goto out;
	n = si->sset_mask ? si->data[0] : 0;
	words = (n + 31) / 32;
	gs = calloc(1, sizeof(*gs) + (size_t)n * ETH_GSTRING_LEN);
	sf = calloc(1, sizeof(*sf) + words * sizeof(sf->features[0]));
	gf = calloc(1, sizeof(*gf) + words * sizeof(gf->features[0]));
	if (!n || !gs || !sf || !gf) {
		ret = n ? -ENOMEM : -EOPNOTSUPP;
		goto out;
	}
	gs->cmd = ETHTOOL_GSTRINGS;
	gs->string_set = ETH_SS_FEATURES;
	gs->len = n;
	if ((ret = feat_ioctl(fd, q->dev, gs)))
		goto out;
	sf->cmd = ETHTOOL_SFEATURES;
	sf->size = words;
	for (const char *const *nm = q->names; *nm; nm++)
		for (uint32_t i = 0; i < n; i++)
			if (!strncmp((const char *)gs->data + (size_t)i * ETH_GSTRING_LEN, *nm, ETH_GSTRING_LEN)) {
				sf->features[i / 32].valid |= 1u << (i % 32);
				if (q->on)
					sf->features[i / 32].requested |= 1u << (i % 32);
			}
	ret = feat_ioctl(fd, q->dev, sf);
	if (ret < 0)
		goto out;
	ret = 0; /* > 0: some were not changed as asked; the report says which */
	gf->cmd = ETHTOOL_GFEATURES;
	gf->size = words;
	if (feat_ioctl(fd, q->dev, gf) == 0) {
		size_t l = 0;
		for (const char *const *nm = q->show; *nm; nm++) {
			const char *st = "n/a";
			for (uint32_t i = 0; i < n; i++)
				if (!strncmp((const char *)gs->data + (size_t)i * ETH_GSTRING_LEN, *nm, ETH_GSTRING_LEN))
					st = gf->features[i / 32].active & (1u << (i % 32)) ? "on" : "off";
			l += (size_t)snprintf(q->report + l, l < sizeof(q->report) ? sizeof(q->report) - l : 0,
					      "%s%s %s", l ? ", " : "", *nm, st);
			if (l >= sizeof(q->report))
				break;
		}
	}
out:
	free(si);
	free(gs);
	free(sf);
	free(gf);
	close(fd);
	return ret;
}

/* Two namespaces, a veth pair between them (MTU 9000: a 1500-byte datagram
 * must not fragment), addresses 10.213.0.1 (rx) and .2 (tx), GRO on the rx
 * end. A negative errno with why in msg when it cannot. */
static int veth_create(struct vethns *v, char *msg, size_t msglen)
{
	int pid = (int)getpid();

	memset(v, 0, sizeof(*v));
	v->rx_fd = v->tx_fd = -1;
	snprintf(v->rx_ns, sizeof(v->rx_ns), "pdg-rx-%d", pid);
	snprintf(v->tx_ns, sizeof(v->tx_ns), "pdg-tx-%d", pid);
	snprintf(v->rx_dev, sizeof(v->rx_dev), "pdgr%d", pid);
	snprintf(v->tx_dev, sizeof(v->tx_dev), "pdgt%d", pid);
	v->created = true; /* from here on, delete whatever exists */
	g_cleanup = v;
	if (shell("ip netns add %s && ip netns add %s && "
	       "ip link add %s mtu 9000 netns %s type veth peer name %s mtu 9000 netns %s && "
	       "ip -n %s addr add 10.213.0.1/24 dev %s && ip -n %s link set lo up && ip -n %s link set %s up && "
	       "ip -n %s addr add 10.213.0.2/24 dev %s && ip -n %s link set lo up && ip -n %s link set %s up",
	       v->rx_ns, v->tx_ns, v->rx_dev, v->rx_ns, v->tx_dev, v->tx_ns, v->rx_ns, v->rx_dev, v->rx_ns,
	       v->rx_ns, v->rx_dev, v->tx_ns, v->tx_dev, v->tx_ns, v->tx_ns, v->tx_dev) != 0) {
		snprintf(msg, msglen, "ip netns / ip link add type veth failed (see above)");
		return -EIO;
	}
	char p[64];
	snprintf(p, sizeof(p), "/run/netns/%s", v->rx_ns);
	v->rx_fd = open(p, O_RDONLY | O_CLOEXEC);
	snprintf(p, sizeof(p), "/run/netns/%s", v->tx_ns);
	v->tx_fd = open(p, O_RDONLY | O_CLOEXEC);
	if (v->rx_fd < 0 || v->tx_fd < 0) {
		snprintf(msg, msglen, "cannot open /run/netns/pdg-*: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* The receiving veth's GRO: on (a veth has NAPI only with GRO on or an
 * XDP program), and rx-udp-gro-forwarding, without which a veth passes
 * skbs from a TSO-capable peer around its NAPI (veth_skb_is_eligible_for_gro,
 * Linux 6.x). */
static int veth_gro(struct vethns *v, char *report, size_t rlen)
{
	static const char *const want[] = { "rx-gro", "rx-udp-gro-forwarding", NULL };
	/* rx-gro-list shown too: it must stay off (fraglist GRO buffers are
	 * segmented again before a UDP_GRO socket). */
	static const char *const show[] = { "rx-gro", "rx-udp-gro-forwarding", "rx-gro-list", NULL };
	struct feat_req q = { .dev = v->rx_dev, .names = want, .show = show, .on = true };
	int e = in_ns(v->rx_fd, set_features, &q);
	if (e < 0)
		return e;
	snprintf(report, rlen, "%s", q.report);
	return 0;
}

struct g_mode {
	const char *label;
	bool gso, veth;
	uint32_t batch;    /* gen's datagrams per call (0: 64) */
	uint32_t flush_ns; /* veth: the receiving end's gro_flush_timeout */
};

/* The receiving veth's gro_flush_timeout (sysfs shows a namespace's devices
 * only to a sysfs mounted there: ip netns exec mounts one). 0: GRO flushes
 * what it holds at the end of every NAPI poll; > 0: it keeps packets across
 * polls up to a jiffy and the timer polls again, as a NIC's does with
 * napi_defer_hard_irqs. */
static int veth_flush_timeout(const struct vethns *v, uint32_t ns)
{
	return shell("ip netns exec %s sh -c 'echo %u > /sys/class/net/%s/gro_flush_timeout'", v->rx_ns, ns,
		  v->rx_dev);
}

/* Both ends of the veth pair to mtu. */
static int veth_mtu(const struct vethns *v, unsigned int mtu)
{
	return shell("ip -n %s link set %s mtu %u && ip -n %s link set %s mtu %u", v->rx_ns, v->rx_dev, mtu,
		     v->tx_ns, v->tx_dev, mtu);
}

static void g_print(const char *label, enum pdma_rx_io io, const struct row_fig *f)
{
	char buf[16] = "";
	if (io == PDMA_RX_IO_GRO)
		snprintf(buf, sizeof(buf), "%.1f", f->c.per_buf);
	printf("%-24s %9s %9.3f %7.2f %9.0f %8.0f %9.0f %9.0f %6.0f%% %8.2f %7s %s\n", label, pdma_rx_io_name(io),
	       f->pps / 1e6, f->pps * 1500 * 8 / 1e9, f->c.rx_cpu_ns, f->c.rx_sys_ns, f->c.softirq_ns, f->c.busy_ns,
	       f->c.rx_util * 100, f->c.rx_cpu_ns > 0 ? 1e3 / f->c.rx_cpu_ns : 0.0, buf, f->limit);
}

void part_g(struct ctx *x)
{
	static const struct g_mode modes[] = {
		{ "loopback sendmmsg", false, false, 0, 0 },
		{ "loopback GSO", true, false, 0, 0 },
		{ "veth 1-at-a-time, GRO", false, true, 1, 0 },
		/* A veth's NAPI runs in the sender's softirq right after each
		 * datagram, so a poll finds one packet and GRO has nothing to
		 * coalesce; a flush timeout lets it hold them across polls. */
		{ "veth 1-at-a-time, GRO+t", false, true, 1, 50000 },
	};
	static const enum pdma_rx_io ios[] = { PDMA_RX_IO_RECVMMSG, PDMA_RX_IO_URING, PDMA_RX_IO_GRO,
					       PDMA_RX_IO_XDP };
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	/* As (c): enough senders to outrun one receiver, half the cores (at
	 * most 8), or --senders; a stream per sender at least (one sender
	 * thread per stream at most), 8 at least. */
	uint32_t senders = x->senders ? x->senders : ncpu > 3 ? (uint32_t)(ncpu / 2) : 1;
	if (!x->senders && senders > 8)
		senders = 8;
	const uint32_t streams = senders > 8 ? senders : 8;
	json_t *arr = json_array(), *g = json_object();
	struct vethns v = { .rx_fd = -1, .tx_fd = -1 };
	char why[256] = "", feat[256] = "";
	bool veth_ok = false;

	if (senders > streams)
		senders = streams;
	printf("\n(g) the socket path, one receive thread, cpu path, 1500-byte datagrams, %u streams, %u sender "
	       "threads;\n    per received datagram: the receive thread's CPU (and system) time, all CPUs' "
	       "softirq and busy time\n", streams, senders);
	if (geteuid() != 0)
		snprintf(why, sizeof(why), "not root (network namespaces and veth need CAP_NET_ADMIN)");
	else if (shell("command -v ip >/dev/null 2>&1") != 0)
		snprintf(why, sizeof(why), "ip(8) (iproute2) not installed");
	if (!why[0]) {
		atexit(cleanup_atexit);
		signal(SIGINT, cleanup_signal);
		signal(SIGTERM, cleanup_signal);
		if (veth_create(&v, why, sizeof(why)) == 0) {
			int e = veth_gro(&v, feat, sizeof(feat));
			if (e)
				snprintf(why, sizeof(why), "setting GRO on the veth: %s", strerror(-e));
			else
				veth_ok = true;
		}
		if (!veth_ok)
			veth_delete(&v);
	}
	printf("%-24s %9s %9s %7s %9s %8s %9s %9s %7s %8s %7s %s\n", "sender", "rx", "0-loss", "Gb/s", "rx ns/dg",
	       "(sys)", "softirq", "all CPUs", "rx util", "rx core", "dg/buf", "limit");
	printf("%-24s %9s %9s %7s %9s %8s %9s %9s %7s %8s %7s\n", "", "", "Mpps", "", "", "", "ns/dg", "ns/dg", "",
	       "Mpps*", "");
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		const struct g_mode *md = &modes[m];
		struct pdma_loopback_opts lo = { .send_batch = md->batch, .gso = md->gso, .rx_netns = -1,
						 .tx_netns = -1 };
		if (md->veth) {
			if (!veth_ok) {
				printf("%-24s skipped: %s\n", md->label, why);
				continue;
			}
			lo.host = "10.213.0.1";
			lo.rx_netns = v.rx_fd;
			lo.tx_netns = v.tx_fd;
			if (veth_flush_timeout(&v, md->flush_ns)) {
				printf("%-24s skipped: cannot set gro_flush_timeout\n", md->label);
				continue;
			}
			printf("%-24s (receiving veth: %s, gro_flush_timeout %u ns)\n", "", feat, md->flush_ns);
		}
		for (size_t k = 0; k < sizeof(ios) / sizeof(ios[0]); k++) {
			struct row_fig f;
			if (x->rxlist && !in_list(x->rxlist, pdma_rx_io_name(ios[k])))
				continue;
			if (ios[k] == PDMA_RX_IO_XDP && (md->gso || md->flush_ns))
				continue;
			if (ios[k] == PDMA_RX_IO_XDP && geteuid() != 0) {
				printf("%-24s %9s skipped: not root (XDP programs and sockets need CAP_BPF, "
				       "CAP_NET_ADMIN, CAP_NET_RAW)\n", md->label, "xdp");
				continue;
			}
			if (ios[k] == PDMA_RX_IO_XDP && md->veth && veth_mtu(&v, 3000)) {
				printf("%-24s %9s skipped: cannot set the veth's MTU to 3000\n", md->label, "xdp");
				continue;
			}
			json_t *o = json_object();
			json_object_set_new(o, "sender", json_string(md->label));
			json_object_set_new(o, "gso", json_boolean(md->gso));
			json_object_set_new(o, "veth", json_boolean(md->veth));
			json_object_set_new(o, "send_batch", json_integer(md->batch ? md->batch : 64));
			if (md->veth)
				json_object_set_new(o, "gro_flush_timeout_ns", json_integer(md->flush_ns));
			c_row(x, PDMA_RX_CPU, "cpu", ios[k], 1, streams, senders, &lo, arr, o, &f);
			g_print(md->label, ios[k], &f);
			if (ios[k] == PDMA_RX_IO_XDP && md->veth && veth_mtu(&v, 9000))
				printf("%-24s cannot set the veth's MTU back to 9000\n", "");
		}
	}
	printf("  limit: what lost first above the best rate: socket (drops: the receive thread behind;\n"
	       "  xdp: its XDP socket's too), ring (overruns: the deframer behind), device (lost before\n"
	       "  any socket: a veth's queue), sender (no loss at the senders' most).\n");
	printf("  rx core Mpps*: 1 / (rx ns/dg), the rate the receive thread's CPU time per datagram at the\n"
	       "  best zero-loss rate allows on one core; an extrapolation (the cost per datagram falls as\n"
	       "  batches fill), not a measured rate. softirq and all-CPU figures are system-wide, tick-\n"
	       "  sampled (/proc/stat), and include the senders and anything else running.\n");
	json_object_set_new(g, "rows", arr);
	json_object_set_new(g, "sender_threads", json_integer(senders));
	json_object_set_new(g, "veth", veth_ok ? json_string(feat) : json_null());
	json_object_set_new(g, "veth_skipped", veth_ok ? json_null() : json_string(why));
	json_object_set_new(x->root, "g_socket_path", g);
	veth_delete(&v);
	g_cleanup = NULL;
}
