// SPDX-License-Identifier: MIT
/* Strict option values for the peerdma subcommands (opt.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opt.h"

void pdma_opt_init(struct pdma_opt *o, const char *cmd, const struct option *longopts,
		   const char *shortopts)
{
	o->cmd = cmd;
	o->longopts = longopts;
	o->shortopts = shortopts;
	o->name = "";
	/* 0, not 1: glibc then also forgets a half-read cluster of short
	 * options ("-qj") that an earlier parse stopped in. */
	optind = 0;
	opterr = 1;
}

/* Write msg (len bytes, no terminator needed) as one line: a value can hold
 * line breaks, shown as '?' so the error stays one line. */
static void put_line(const char *msg, size_t len)
{
	char line[1024];
	size_t n = len < sizeof(line) - 2 ? len : sizeof(line) - 2;

	memcpy(line, msg, n);
	while (n && line[n - 1] == '\n')
		n--;
	for (size_t i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = '?';
	line[n++] = '\n';
	fwrite(line, 1, n, stderr);
}

int pdma_opt_next(struct pdma_opt *o, int argc, char **argv)
{
	char *argv0 = argv[0], *msg = NULL;
	size_t len = 0;
	int li = -1, c;
	FILE *saved = stderr, *m = open_memstream(&msg, &len);

	/* getopt_long prefixes its own messages with argv[0]: make that the
	 * command's full name. It writes them to stderr, which is caught here
	 * for a moment (glibc's stderr is assignable) so that a word with a
	 * line break in it cannot make them two lines. */
	argv[0] = (char *)o->cmd;
	if (m)
		stderr = m;
	c = getopt_long(argc, argv, o->shortopts, o->longopts, &li);
	if (m) {
		stderr = saved;
		fclose(m);
		if (len)
			put_line(msg, len);
		free(msg);
	}
	argv[0] = argv0;
	if (c == -1 || c == '?')
		return c;
	/* A short option leaves li unset: find its long name by value. */
	for (int i = 0; li < 0 && o->longopts[i].name; i++)
		if (o->longopts[i].val == c)
			li = i;
	if (li >= 0) {
		snprintf(o->name_buf, sizeof(o->name_buf), "--%s", o->longopts[li].name);
		o->name = o->name_buf;
	} else {
		snprintf(o->name_buf, sizeof(o->name_buf), "-%c", c);
		o->name = o->name_buf;
	}
	return c;
}

static void vline(const struct pdma_opt *o, const char *pre, const char *fmt, va_list ap)
{
	char msg[1024];
	int n = snprintf(msg, sizeof(msg), "%s: %s", o->cmd, pre);

	if (n >= 0 && (size_t)n < sizeof(msg))
		vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	put_line(msg, strlen(msg));
}

int pdma_opt_bad(const struct pdma_opt *o, const char *why_fmt, ...)
{
	char pre[256];
	va_list ap;

	snprintf(pre, sizeof(pre), "invalid value '%.160s' for %s: ", optarg ? optarg : "", o->name);
	va_start(ap, why_fmt);
	vline(o, pre, why_fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int pdma_opt_fail(const struct pdma_opt *o, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vline(o, "", fmt, ap);
	va_end(ap);
	return 2;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int pdma_opt_parse_u64(const char *s, uint64_t *v)
{
	int base = 10;
	char *end;

	/* strtoull would take "-5" as 2^64 - 5, skip leading spaces and read
	 * "010" as octal: only plain digits, or 0x and hex digits. */
	if (!s)
		return -EINVAL;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	/* Every character a digit: strtoull would take a second "0x". */
	if (!*s)
		return -EINVAL;
	for (const char *q = s; *q; q++)
		if (base == 16 ? hexval(*q) < 0 : !(*q >= '0' && *q <= '9'))
			return -EINVAL;
	errno = 0;
	unsigned long long x = strtoull(s, &end, base);
	if (errno || *end)
		return -EINVAL;
	*v = x;
	return 0;
}

int pdma_opt_end(const struct pdma_opt *o, int argc, char **argv)
{
	return optind < argc ? pdma_opt_fail(o, "unexpected argument '%s'", argv[optind]) : 0;
}

int pdma_opt_u64(const struct pdma_opt *o, uint64_t min, uint64_t max, uint64_t *v)
{
	uint64_t x;

	if (pdma_opt_parse_u64(optarg, &x) || x < min || x > max)
		return pdma_opt_bad(o, "want an integer in %llu..%llu", (unsigned long long)min,
				    (unsigned long long)max);
	*v = x;
	return 0;
}

int pdma_opt_u32(const struct pdma_opt *o, uint32_t min, uint32_t max, uint32_t *v)
{
	uint64_t x = 0;
	int ret = pdma_opt_u64(o, min, max, &x);

	if (!ret)
		*v = (uint32_t)x;
	return ret;
}

int pdma_opt_double(const struct pdma_opt *o, double min, double max, int min_open, double *v)
{
	const char *s = optarg ? optarg : "";
	char *end;
	double x;

	/* strtod skips leading spaces and reads "nan", "inf" and 1e999 (as
	 * inf): none of them is a rate or a duration. */
	if (!*s || (*s != '-' && *s != '+' && *s != '.' && (*s < '0' || *s > '9')))
		goto bad;
	errno = 0;
	x = strtod(s, &end);
	if (errno || *end || !isfinite(x) || x > max || (min_open ? x <= min : x < min))
		goto bad;
	*v = x;
	return 0;
bad:
	return pdma_opt_bad(o, "want a number in %s%.15g, %.15g]", min_open ? "(" : "[", min, max);
}

int pdma_opt_str(const struct pdma_opt *o, const char **v)
{
	if (!optarg || !*optarg)
		return pdma_opt_bad(o, "must not be empty");
	*v = optarg;
	return 0;
}

int pdma_opt_ipv4(const struct pdma_opt *o, const char **v)
{
	struct in_addr a;

	if (!optarg || inet_pton(AF_INET, optarg, &a) != 1)
		return pdma_opt_bad(o, "not a valid IPv4 address (a.b.c.d, each 0..255)");
	*v = optarg;
	return 0;
}

int pdma_opt_mac(const struct pdma_opt *o, uint8_t mac[6])
{
	const char *s = optarg ? optarg : "";
	uint8_t m[6];

	/* Exactly six two-digit hex bytes and five colons: sscanf's %x would
	 * take spaces, signs and longer numbers. */
	for (int i = 0; i < 6; i++, s += 3) {
		int hi = hexval(s[0]), lo = hi < 0 ? -1 : hexval(s[1]);
		if (lo < 0 || s[2] != (i < 5 ? ':' : 0))
			return pdma_opt_bad(o, "want a MAC address as six hex bytes, aa:bb:cc:dd:ee:ff");
		m[i] = (uint8_t)(hi << 4 | lo);
	}
	memcpy(mac, m, 6);
	return 0;
}

int pdma_opt_ipv4_port(const struct pdma_opt *o, char host[16], uint16_t *port)
{
	const char *s = optarg ? optarg : "", *colon = strrchr(s, ':');
	struct in_addr a;
	uint64_t p;
	char h[16];

	if (!colon || (size_t)(colon - s) >= sizeof(h))
		goto bad;
	memcpy(h, s, (size_t)(colon - s));
	h[colon - s] = 0;
	if (inet_pton(AF_INET, h, &a) != 1 || pdma_opt_parse_u64(colon + 1, &p) || p < 1 || p > 65535)
		goto bad;
	memcpy(host, h, sizeof(h));
	*port = (uint16_t)p;
	return 0;
bad:
	return pdma_opt_bad(o, "want IPv4:PORT (a.b.c.d:1..65535)");
}

int pdma_opt_choice(const struct pdma_opt *o, const char *const *names, int *idx)
{
	char list[256] = "";
	size_t n = 0;

	for (int i = 0; names[i]; i++) {
		if (optarg && !strcmp(optarg, names[i])) {
			*idx = i;
			return 0;
		}
		n += (size_t)snprintf(list + n, n < sizeof(list) ? sizeof(list) - n : 0, "%s%s",
				      i ? ", " : "", names[i]);
		if (n >= sizeof(list))
			n = sizeof(list) - 1;
	}
	return pdma_opt_bad(o, "want one of %s", list);
}
