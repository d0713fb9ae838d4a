// SPDX-License-Identifier: MIT
/*
 * Every option of every peerdma subcommand, through its parser in-process
 * (pdma_cmd_NAME_check, tools/cmd.h), over generated argument lists:
 *   - each option with each value that no option of its kind accepts
 *     (negative, NaN, inf, empty, huge, garbage after the digits, not an
 *     address): exit status 2 and one line on stderr naming the option and the
 *     value;
 *   - fuzz-style: random lists of known and unknown options, good and bad
 *     values, the --opt=value and -oVALUE forms, missing values and stray
 *     arguments. The status is 0 or 2, never anything else and never a crash;
 *     a list holding a bad value gets 2; on 2 stderr holds exactly one line
 *     naming something in the list; on 0 it is empty.
 * The option tables below mirror tools/cmd_*.c by hand, with each value's
 * kind; test_tables_match holds them to each command's --help text, so an
 * option added to a command without a line here fails.
 * PDMA_CLI_FUZZ_ROUNDS (default 10000) and PDMA_CLI_FUZZ_SEED set the run.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cmd.h"

enum kind { FLAG, UINT, DBL, STR, IPV4, CHOICE, BDF, MAC, HOSTPORT };

struct optspec {
	const char *lng;
	char shrt; /* 0: long only */
	enum kind kind;
	const char *const *choices; /* CHOICE */
};

struct cmdspec {
	const char *name;
	int (*check)(int argc, char **argv);
	int (*run)(int argc, char **argv); /* for --help only */
	const struct optspec *opts;
	const char *const *positional; /* accepted positional words (NULL: none) */
};

static const char *const paths[] = { "cpu", "direct", "host-staged", "zero-copy", "nic", NULL };
static const char *const dfrs[] = { "auto", "cpu", "gpu", NULL };
static const char *const bufsizes[] = { "2048", "4096", NULL };
static const char *const rxs[] = { "recvmmsg", "io_uring", "gro", "xdp", NULL };
static const char *const layouts[] = { "auto", "full", "packed", "tiny", NULL };
static const char *const benches[] = { "reg", "dma", "all", NULL };
static const char *const zfmts[] = { "ci16", "cf32", NULL };
static const char *const zpols[] = { "drop-oldest", "backpressure", NULL };

static const struct optspec gen_opts[] = {
	{ "host", 'H', IPV4, NULL },       { "port", 'p', UINT, NULL },
	{ "streams", 's', UINT, NULL },    { "stream-id", 0, UINT, NULL },
	{ "packet-size", 'S', UINT, NULL }, { "packets", 'n', UINT, NULL },
	{ "rate", 'r', DBL, NULL },        { "threads", 't', UINT, NULL },
	{ "sample-rate", 0, UINT, NULL },  { "no-trailer", 0, FLAG, NULL },
	{ "no-context", 0, FLAG, NULL },   { "loss", 0, UINT, NULL },
	{ "loss-burst", 0, UINT, NULL },   { "dup", 0, UINT, NULL },
	{ "reorder", 0, UINT, NULL },      { "seed", 0, UINT, NULL },
	{ "pcap", 'w', STR, NULL },        { "pcap-only", 0, FLAG, NULL },
	{ "json", 'j', FLAG, NULL },       { "eth", 0, FLAG, NULL },
	{ "to", 0, HOSTPORT, NULL },       { "dst-mac", 0, MAC, NULL },
	{ "src-mac", 0, MAC, NULL },       { "dst-ip", 0, IPV4, NULL },
	{ "src-ip", 0, IPV4, NULL },       { "src-port", 0, UINT, NULL },
	{ "malformed", 0, UINT, NULL },    { "nic", 0, STR, NULL },
	{ "kernel-device", 0, STR, NULL }, { "cuda-device", 0, UINT, NULL },
	{ "gso", 0, FLAG, NULL },
	{ NULL, 0, FLAG, NULL },
};

static const struct optspec ingest_opts[] = {
	{ "port", 'p', UINT, NULL },        { "bind", 'b', IPV4, NULL },
	{ "threads", 't', UINT, NULL },     { "path", 0, CHOICE, paths },
	{ "ring-slots", 0, UINT, NULL },    { "slot-size", 0, UINT, NULL },
	{ "slot-layout", 0, CHOICE, layouts },
	{ "batch", 0, UINT, NULL },         { "rx", 0, CHOICE, rxs },
	{ "xdp-dev", 0, STR, NULL },
	{ "chunk", 0, UINT, NULL },         { "no-register", 0, FLAG, NULL },
	{ "sample-rate", 0, UINT, NULL },   { "max-streams", 0, UINT, NULL },
	{ "out-packets", 0, UINT, NULL },   { "duration", 'd', DBL, NULL },
	{ "count", 'c', UINT, NULL },       { "idle", 'i', UINT, NULL },
	{ "json", 'j', STR, NULL },         { "quiet", 'q', FLAG, NULL },
	{ "nic", 0, STR, NULL },            { "nic-bufs", 0, UINT, NULL },
	{ "nic-buf-size", 0, CHOICE, bufsizes }, { "kernel-device", 0, STR, NULL },
	{ "cuda-device", 0, UINT, NULL },   { "deframer", 0, CHOICE, dfrs },
	{ "revoke-after", 0, UINT, NULL },
	{ "zmq", 0, STR, NULL },            { "zmq-format", 0, CHOICE, zfmts },
	{ "zmq-tags", 0, FLAG, NULL },      { "zmq-wait", 0, UINT, NULL },
	{ "zmq-policy", 0, CHOICE, zpols },
	{ NULL, 0, FLAG, NULL },
};

/* peerdma record: its own options, then every one of ingest's (filled in by
 * setup: ingest's table is the one above). */
static const char *const policies[] = { "drop-oldest", "backpressure", NULL };
static const struct optspec record_own[] = {
	{ "dir", 0, STR, NULL },            { "prefix", 0, STR, NULL },
	{ "stream", 0, UINT, NULL },        { "policy", 0, CHOICE, policies },
	{ "depth", 0, UINT, NULL },         { "block-packets", 0, UINT, NULL },
	{ "pool-blocks", 0, UINT, NULL },   { "late-blocks", 0, UINT, NULL },
	{ "flush-idle", 0, UINT, NULL },    { "buffer", 0, UINT, NULL },
	{ "no-sync", 0, FLAG, NULL },       { "description", 0, STR, NULL },
	{ NULL, 0, FLAG, NULL },
};
static struct optspec record_opts[64];

/* peerdma forward: likewise, its own then ingest's. */
static const struct optspec forward_own[] = {
	{ "listen", 0, IPV4, NULL },        { "fwd-port", 0, UINT, NULL },
	{ "stall-ms", 0, UINT, NULL },      { "stage", 0, FLAG, NULL },
	{ "stage-buffers", 0, UINT, NULL }, { "credits", 0, UINT, NULL },
	{ "block-packets", 0, UINT, NULL }, { "pool-blocks", 0, UINT, NULL },
	{ "late-blocks", 0, UINT, NULL },   { "flush-idle", 0, UINT, NULL },
	{ "eager-max", 0, UINT, NULL },
	{ NULL, 0, FLAG, NULL },
};
static struct optspec forward_opts[64];

static const struct optspec consume_opts[] = {
	{ "connect", 0, HOSTPORT, NULL },   { "streams", 0, STR, NULL },
	{ "name", 0, STR, NULL },           { "dir", 0, STR, NULL },
	{ "prefix", 0, STR, NULL },         { "pool-blocks", 0, UINT, NULL },
	{ "depth", 0, UINT, NULL },         { "policy", 0, CHOICE, policies },
	{ "max-streams", 0, UINT, NULL },   { "json", 0, STR, NULL },
	{ "no-sync", 0, FLAG, NULL },       { "quiet", 'q', FLAG, NULL },
	{ "test-version", 0, UINT, NULL },  { "test-no-credits", 0, FLAG, NULL },
	{ "test-garbage-hello", 0, FLAG, NULL },
	{ NULL, 0, FLAG, NULL },
};

static const struct optspec bench_opts[] = {
	{ "json", 'j', STR, NULL }, { "iters", 'n', UINT, NULL }, { NULL, 0, FLAG, NULL },
};

static const struct optspec info_opts[] = {
	{ "device", 0, BDF, NULL }, { "sysfs-root", 0, STR, NULL },
	{ "cmdline", 0, STR, NULL }, { NULL, 0, FLAG, NULL },
};

static const struct optspec demo_opts[] = { { NULL, 0, FLAG, NULL } };

static const struct optspec deframe_opts[] = {
	{ "pcap", 'r', STR, NULL },         { "port", 'p', UINT, NULL },
	{ "max-frame", 0, UINT, NULL },     { "sample-rate", 0, UINT, NULL },
	{ "max-streams", 0, UINT, NULL },   { "out-packets", 0, UINT, NULL },
	{ "json", 'j', FLAG, NULL },        { NULL, 0, FLAG, NULL },
};

static const struct cmdspec cmds[] = {
	{ "gen", pdma_cmd_gen_check, pdma_cmd_gen, gen_opts, NULL },
	{ "ingest", pdma_cmd_ingest_check, pdma_cmd_ingest, ingest_opts, NULL },
	{ "record", pdma_cmd_record_check, pdma_cmd_record, record_opts, NULL },
	{ "forward", pdma_cmd_forward_check, pdma_cmd_forward, forward_opts, NULL },
	{ "consume", pdma_cmd_consume_check, pdma_cmd_consume, consume_opts, NULL },
	{ "bench", pdma_cmd_bench_check, pdma_cmd_bench, bench_opts, benches },
	{ "info", pdma_cmd_info_check, pdma_cmd_info, info_opts, NULL },
	{ "demo", pdma_cmd_demo_check, pdma_cmd_demo, demo_opts, NULL },
	{ "deframe", pdma_cmd_deframe_check, pdma_cmd_deframe, deframe_opts, NULL },
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

/* Values no option of the kind accepts, whatever its range. */
static const char *const bad_num[] = { "", "-1", "-5", "-0", "nan", "-nan", "NaN", "inf",
				       "-inf", "infinity", "12abc", " 5", "5 ", "0x", "x5",
				       "99999999999999999999999", "1,5", "--", "-", "1\n2", "0x0x40", "0X0x1",
				       "0x-1", "0x 1", NULL };
static const char *const bad_dbl[] = { "", "-1", "-0.5", "nan", "-nan", "inf", "-inf",
				       "1e400", "12abc", " 5", "5 ", "0x", "1.5.5", "-", NULL };
static const char *const bad_str[] = { "", NULL };
static const char *const bad_ipv4[] = { "", "300.1.2.3", "notanip", "1.2.3", "1.2.3.4.5",
					"-1.0.0.0", " 127.0.0.1", "127.0.0.1\n", NULL };
static const char *const bad_choice[] = { "", "nonsense", "CPU ", NULL };
static const char *const bad_bdf[] = { "", "zz", "0000:3b:00", "-1", NULL };
static const char *const bad_mac[] = { "", "52:54:00:12:34", "52:54:00:12:34:56:78", "zz:54:00:12:34:56",
				       "52-54-00-12-34-56", "5254.0012.3456", " 52:54:00:12:34:56",
				       "52:54:00:12:34:5g", "152:54:00:12:34:56", "2:54:00:12:34:56",
				       "52:54:00:12:34:56:", "-1", NULL };
static const char *const bad_hostport[] = { "", "127.0.0.1", "127.0.0.1:", ":5000", "127.0.0.1:0",
					    "127.0.0.1:65536", "127.0.0.1:-1", "host:5000", "300.0.0.1:5000",
					    "127.0.0.1:5000x", " 127.0.0.1:5000", "127.0.0.1: 5000", "-1", NULL };

static const char *const good_num[] = { "0", "1", "2", "3", "4", "8", "64", "100", "1000",
					"4096", "9216", "65504", "0x10", "0X1F", "007", NULL };
static const char *const good_dbl[] = { "0", "0.5", "1", "2.5", "100", "1e3", "0.001", NULL };
static const char *const good_str[] = { "out.json", "/tmp/x", "-", "a b", "-1", NULL };
static const char *const good_ipv4[] = { "127.0.0.1", "10.1.2.3", "0.0.0.0", NULL };
static const char *const good_bdf[] = { "0000:3b:00.0", "3b:00.0", NULL };
static const char *const good_mac[] = { "52:54:00:12:34:56", "02:00:00:00:00:01", "ff:ff:ff:ff:ff:ff",
					"0a:1B:2c:3D:4e:5F", NULL };
static const char *const good_hostport[] = { "127.0.0.1:5000", "10.0.2.2:1234", "127.0.0.1:65535",
					     "0.0.0.0:1", NULL };

static const char *const *bad_values(enum kind k)
{
	switch (k) {
	case UINT: return bad_num;
	case DBL: return bad_dbl;
	case STR: return bad_str;
	case IPV4: return bad_ipv4;
	case CHOICE: return bad_choice;
	case BDF: return bad_bdf;
	case MAC: return bad_mac;
	case HOSTPORT: return bad_hostport;
	default: return NULL;
	}
}

static const char *const *good_values(const struct optspec *o)
{
	switch (o->kind) {
	case UINT: return good_num;
	case DBL: return good_dbl;
	case STR: return good_str;
	case IPV4: return good_ipv4;
	case CHOICE: return o->choices;
	case BDF: return good_bdf;
	case MAC: return good_mac;
	case HOSTPORT: return good_hostport;
	default: return NULL;
	}
}

static size_t count(const char *const *v)
{
	size_t n = 0;

	while (v[n])
		n++;
	return n;
}

/* ------------------------------------------------------------ one call */

#define MAXARGS 24

struct call {
	char err[4096];
	size_t err_len;
	int status;
};

static FILE *cap; /* stderr goes here during a call */

/* Run cmd's parser on argv[0..argc) (argv[0] the command name) with stderr
 * captured. getopt_long permutes its argv: it gets a copy. */
static void call(const struct cmdspec *c, int argc, char **argv, struct call *r)
{
	char *copy[MAXARGS + 2];
	int saved;

	memcpy(copy, argv, sizeof(char *) * (size_t)argc);
	copy[argc] = NULL;
	fflush(stderr);
	assert_int_equal(ftruncate(fileno(cap), 0), 0);
	rewind(cap);
	saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(fileno(cap), STDERR_FILENO) >= 0);
	r->status = c->check(argc, copy);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(cap);
	r->err_len = fread(r->err, 1, sizeof(r->err) - 1, cap);
	r->err[r->err_len] = 0;
}

static void show(const struct cmdspec *c, int argc, char **argv, const char *why,
		 const struct call *r)
{
	char list[2048];
	size_t n = 0;

	for (int i = 1; i < argc && n < sizeof(list) - 4; i++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, " '%s'", argv[i]);
	fail_msg("peerdma %s%s: %s (status %d, stderr: %s)", c->name, list, why, r->status,
		 r->err);
}

/* Exactly one line, starting with "peerdma NAME: ". */
static void check_one_line(const struct cmdspec *c, int argc, char **argv, const struct call *r)
{
	char pre[64];

	snprintf(pre, sizeof(pre), "peerdma %s: ", c->name);
	if (r->err_len == 0 || r->err[r->err_len - 1] != '\n' || memchr(r->err, '\n', r->err_len - 1))
		show(c, argc, argv, "not exactly one line on stderr", r);
	if (strncmp(r->err, pre, strlen(pre)))
		show(c, argc, argv, "the line does not start with the command", r);
}

static const struct optspec *by_short(const struct cmdspec *c, char s)
{
	for (const struct optspec *o = c->opts; o->lng; o++)
		if (s && o->shrt == s)
			return o;
	return NULL;
}

/* "'v'" as the error line shows a value: line breaks as '?' (tools/opt.c). */
static void quoted(const char *v, char *out, size_t size)
{
	snprintf(out, size, "'%s'", v);
	for (char *p = out; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = '?';
}

/* The line names something in the list: an option as "--name" (also for a
 * short option given), "-x" or 'x' for a short option, or a quoted word. */
static int names_something(const struct cmdspec *c, int argc, char **argv, const char *line)
{
	char want[256];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		quoted(a, want, sizeof(want));
		if (strstr(line, want))
			return 1;
		if (a[0] == '-' && a[1] == '-' && a[2]) {
			size_t n = strcspn(a, "=");
			if (n > 2 && n < sizeof(want)) {
				memcpy(want, a, n);
				want[n] = 0;
				if (strstr(line, want))
					return 1;
			}
		} else if (a[0] == '-' && a[1]) {
			for (const char *p = a + 1; *p; p++) {
				const struct optspec *o = by_short(c, *p);
				char s1[3] = { '-', *p, 0 }, s2[4] = { '\'', *p, '\'', 0 };

				if (strstr(line, s1) || strstr(line, s2))
					return 1;
				snprintf(want, sizeof(want), "--%s", o ? o->lng : "");
				if (o && strstr(line, want))
					return 1;
				if (o && o->kind != FLAG)
					break; /* the rest of the word is its value */
			}
		}
	}
	return 0;
}

/* ------------------------------------------------------------ the tests */

static int setup(void **state)
{
	size_t n = 0;

	(void)state;
	for (const struct optspec *o = record_own; o->lng; o++)
		record_opts[n++] = *o;
	for (const struct optspec *o = ingest_opts; o->lng; o++)
		record_opts[n++] = *o;
	record_opts[n] = (struct optspec){ NULL, 0, FLAG, NULL };
	n = 0;
	for (const struct optspec *o = forward_own; o->lng; o++)
		forward_opts[n++] = *o;
	for (const struct optspec *o = ingest_opts; o->lng; o++)
		forward_opts[n++] = *o;
	forward_opts[n] = (struct optspec){ NULL, 0, FLAG, NULL };
	cap = tmpfile();
	return cap ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	fclose(cap);
	return 0;
}

/* Each option, in each form, with each value no option of its kind takes. */
static void test_every_bad_value(void **state)
{
	(void)state;
	size_t cases = 0;

	for (size_t ci = 0; ci < NCMDS; ci++) {
		const struct cmdspec *c = &cmds[ci];

		for (const struct optspec *o = c->opts; o->lng; o++) {
			const char *const *bad = bad_values(o->kind);

			for (size_t b = 0; bad && bad[b]; b++) {
				for (int form = 0; form < 3; form++) {
					char name[64], joined[128];
					char *argv[3] = { (char *)c->name, name, (char *)bad[b] };
					int argc = 3;
					struct call r;

					if (form == 2 && !o->shrt)
						continue;
					if (form == 0) {
						snprintf(name, sizeof(name), "--%s", o->lng);
					} else if (form == 1) {
						snprintf(joined, sizeof(joined), "--%s=%s", o->lng, bad[b]);
						argv[1] = joined;
						argc = 2;
					} else {
						snprintf(name, sizeof(name), "-%c", o->shrt);
					}
					call(c, argc, argv, &r);
					cases++;
					if (r.status != 2)
						show(c, argc, argv, "a bad value was accepted", &r);
					check_one_line(c, argc, argv, &r);
					/* A value error names the option by its long
					 * name and quotes the value. */
					snprintf(name, sizeof(name), "--%s", o->lng);
					quoted(bad[b], joined, sizeof(joined));
					if (!strstr(r.err, name) || !strstr(r.err, joined))
						show(c, argc, argv, "the line lacks the option or the value", &r);
				}
			}
		}
	}
	printf("bad values: %zu lists, all refused in one line\n", cases);
}

/* Good values alone, one option at a time: never a crash, 0 or 2, and on 2
 * (a range or a combination: --packet-size 4) one line naming the option. */
static void test_every_good_value(void **state)
{
	(void)state;
	for (size_t ci = 0; ci < NCMDS; ci++) {
		const struct cmdspec *c = &cmds[ci];

		for (const struct optspec *o = c->opts; o->lng; o++) {
			const char *const *good = good_values(o);
			char name[64];
			char *argv[3] = { (char *)c->name, name, NULL };
			struct call r;

			snprintf(name, sizeof(name), "--%s", o->lng);
			for (size_t g = 0; good ? good[g] != NULL : g == 0; g++) {
				argv[2] = good ? (char *)good[g] : NULL;
				call(c, good ? 3 : 2, argv, &r);
				if (r.status == 0 && r.err_len)
					show(c, good ? 3 : 2, argv, "status 0 with output on stderr", &r);
				if (r.status != 0 && r.status != 2)
					show(c, good ? 3 : 2, argv, "status neither 0 nor 2", &r);
				if (r.status == 2) {
					check_one_line(c, good ? 3 : 2, argv, &r);
					if (!strstr(r.err, name))
						show(c, good ? 3 : 2, argv, "the line does not name the option", &r);
				}
			}
		}
	}
	/* Flags and plain defaults run: the defaults are valid. */
	for (size_t ci = 0; ci < NCMDS; ci++) {
		char *argv[1] = { (char *)cmds[ci].name };
		struct call r;

		call(&cmds[ci], 1, argv, &r);
		if (r.status != 0)
			show(&cmds[ci], 1, argv, "the defaults are refused", &r);
	}
}

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
	/* xorshift64*: reproducible from the seed printed */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)(((rng * 0x2545f4914f6cdd1dull) >> 32) % n);
}

static const char *pick(const char *const *v)
{
	return v[rnd((uint32_t)count(v))];
}

/* Random lists: status 0 or 2; a bad value, unknown option, missing value or
 * stray word makes it 2; 2 prints one line naming something in the list. */
static void test_fuzz_lists(void **state)
{
	(void)state;
	const char *e = getenv("PDMA_CLI_FUZZ_ROUNDS"), *s = getenv("PDMA_CLI_FUZZ_SEED");
	unsigned long rounds = e ? strtoul(e, NULL, 10) : 10000;
	unsigned long seed = s ? strtoul(s, NULL, 0) : 17;
	/* Not "--=": glibc's getopt_long takes its empty name as an
	 * abbreviation of every option, so with demo's single --help it
	 * reports "'--help' doesn't allow an argument". */
	static const char *const unknown[] = { "--bogus", "--no-such-option", "-Z", "-%",
					       "--port2", "--jsonx", "-9", "--x=1", "--a\nb", NULL };
	static const char *const strays[] = { "foo", "5", "-", "reg", "all", "127.0.0.1", NULL };
	unsigned long by_status[3] = { 0 };

	printf("fuzz: %lu lists, seed %lu (PDMA_CLI_FUZZ_SEED to repeat)\n", rounds, seed);
	rng = seed * 0x9e3779b97f4a7c15ull + 1;
	for (unsigned long round = 0; round < rounds; round++) {
		const struct cmdspec *c = &cmds[rnd(NCMDS)];
		char store[MAXARGS][160];
		char *argv[MAXARGS + 1];
		int argc = 1, want_error = 0, words = 0, n = (int)rnd(6);
		struct call r;

		argv[0] = (char *)c->name;
		for (int k = 0; k < n && argc < MAXARGS - 2; k++) {
			uint32_t what = rnd(100);
			size_t no = 0;

			while (c->opts[no].lng)
				no++;
			if (what < 8 || !no) {
				argv[argc++] = (char *)pick(unknown);
				want_error = 1;
				continue;
			}
			if (what < 14) {
				const char *w = pick(strays);
				int ok = 0;

				for (size_t p = 0; c->positional && c->positional[p]; p++)
					ok |= !strcmp(w, c->positional[p]);
				argv[argc++] = (char *)w;
				want_error |= !ok;
				words++;
				continue;
			}
			const struct optspec *o = &c->opts[rnd((uint32_t)no)];
			int bad = o->kind != FLAG && rnd(3) == 0;
			const char *v = o->kind == FLAG ? NULL
							: bad ? pick(bad_values(o->kind)) : pick(good_values(o));
			int form = (int)rnd(3);

			if (form == 2 && (!o->shrt || (v && !*v)))
				form = 0; /* -x"" would take the next word */
			want_error |= bad;
			if (form == 1 && v) {
				snprintf(store[argc], sizeof(store[argc]), "--%s=%s", o->lng, v);
				argv[argc] = store[argc];
				argc++;
			} else if (form == 2 && v) {
				snprintf(store[argc], sizeof(store[argc]), "-%c%s", o->shrt, v);
				argv[argc] = store[argc];
				argc++;
			} else {
				if (form == 2)
					snprintf(store[argc], sizeof(store[argc]), "-%c", o->shrt);
				else
					snprintf(store[argc], sizeof(store[argc]), "--%s", o->lng);
				argv[argc] = store[argc];
				argc++;
				if (v)
					argv[argc++] = (char *)v;
			}
		}
		if (rnd(12) == 0) {
			/* A value-taking option last, its value missing. */
			for (const struct optspec *o = c->opts; o->lng; o++)
				if (o->kind != FLAG) {
					snprintf(store[argc], sizeof(store[argc]), "--%s", o->lng);
					argv[argc] = store[argc];
					argc++;
					want_error = 1;
					break;
				}
		}
		/* bench takes one word: a second is one too many. */
		want_error |= words > 1;
		argv[argc] = NULL;
		call(c, argc, argv, &r);
		if (r.status != 0 && r.status != 2)
			show(c, argc, argv, "status neither 0 nor 2", &r);
		by_status[r.status]++;
		if (want_error && r.status != 2)
			show(c, argc, argv, "a bad list was accepted", &r);
		if (r.status == 0 && r.err_len)
			show(c, argc, argv, "status 0 with output on stderr", &r);
		if (r.status == 2) {
			check_one_line(c, argc, argv, &r);
			if (!names_something(c, argc, argv, r.err))
				show(c, argc, argv, "the line names nothing in the list", &r);
		}
	}
	printf("fuzz: %lu accepted, %lu refused\n", by_status[0], by_status[2]);
	/* Both outcomes happen, or the generator tests nothing. */
	assert_true(by_status[0] > rounds / 20);
	assert_true(by_status[2] > rounds / 20);
}

/* gen --eth: what combines and what does not, each refusal one line naming
 * the option at fault. */
static void test_gen_eth_combos(void **state)
{
	static const struct {
		const char *args[10];
		int status;
		const char *names;
	} cases[] = {
		{ { "--eth", "--to", "127.0.0.1:5555" }, 0, NULL },
		{ { "--eth", "--to=127.0.0.1:5555", "--dst-mac", "52:54:00:12:34:57", "--src-mac", "02:00:00:00:00:09",
		    "-p", "5000" }, 0, NULL },
		{ { "--eth", "--to", "127.0.0.1:5555", "--dst-ip", "10.0.2.16", "--src-ip", "10.0.2.3" }, 0, NULL },
		{ { "--eth", "--to", "127.0.0.1:5555", "--src-port", "1", "--malformed", "1", "-w", "x.pcap" }, 0, NULL },
		{ { "--eth", "--to", "127.0.0.1:5555", "-t", "1", "-S", "65464" }, 0, NULL },
		{ { "--eth" }, 2, "--to" },
		{ { "--to", "127.0.0.1:5555" }, 2, "--to" },
		{ { "--malformed", "3" }, 2, "--malformed" },
		{ { "--src-port", "7", "--dst-mac", "52:54:00:12:34:57" }, 2, "--src-port" },
		{ { "--eth", "--to", "127.0.0.1:5555", "-H", "127.0.0.1" }, 2, "--host" },
		{ { "--eth", "--to", "127.0.0.1:5555", "-t", "2" }, 2, "--threads" },
		{ { "--eth", "--to", "127.0.0.1:5555", "-w", "x", "--pcap-only" }, 2, "--pcap-only" },
		{ { "--eth", "-w", "x.pcap", "--pcap-only" }, 0, NULL },
		{ { "--eth", "--pcap-only" }, 2, "--pcap" },
		{ { "--eth", "--nic", "/dev/peerdma_nic0" }, 0, NULL },
		{ { "--eth", "--nic", "/dev/peerdma_nic0", "--kernel-device", "/dev/peerdma", "--cuda-device", "1" },
		  0, NULL },
		{ { "--eth", "--nic", "/dev/peerdma_nic0", "--to", "127.0.0.1:5555" }, 2, "--nic" },
		{ { "--eth", "--nic", "/dev/peerdma_nic0", "-w", "x", "--pcap-only" }, 2, "--pcap-only" },
		{ { "--eth", "--to", "127.0.0.1:5555", "--cuda-device", "1" }, 2, "--cuda-device" },
		{ { "--nic", "/dev/peerdma_nic0" }, 2, "--nic" },
		{ { "--eth", "--to", "127.0.0.1:5555", "-S", "65468" }, 2, "--packet-size" },
		/* 0: none, the default the help names */
		{ { "--eth", "--to", "127.0.0.1:5555", "--malformed", "0" }, 0, NULL },
		/* given at all, even at the default value, it needs --nic */
		{ { "--eth", "--to", "127.0.0.1:5555", "--cuda-device", "0" }, 2, "--cuda-device" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[12] = { (char *)"gen" };
		int argc = 1;
		struct call r;

		while (argc <= 10 && cases[i].args[argc - 1])
			argv[argc] = (char *)cases[i].args[argc - 1], argc++;
		call(&cmds[0], argc, argv, &r);
		if (r.status != cases[i].status)
			show(&cmds[0], argc, argv, "unexpected status", &r);
		if (r.status == 0 && r.err_len)
			show(&cmds[0], argc, argv, "status 0 with output on stderr", &r);
		if (r.status == 2) {
			check_one_line(&cmds[0], argc, argv, &r);
			if (!strstr(r.err, cases[i].names))
				show(&cmds[0], argc, argv, "the line does not name the option at fault", &r);
		}
	}
}

/* The tables above name every option each command's --help lists. */
static void test_tables_match(void **state)
{
	(void)state;
	for (size_t ci = 0; ci < NCMDS; ci++) {
		const struct cmdspec *c = &cmds[ci];
		char *argv[3] = { (char *)c->name, (char *)"--help", NULL };
		char buf[8192];
		size_t n;
		FILE *out = tmpfile();
		int saved;

		assert_non_null(out);
		fflush(stdout);
		saved = dup(STDOUT_FILENO);
		dup2(fileno(out), STDOUT_FILENO);
		int st = c->run(2, argv);
		fflush(stdout);
		dup2(saved, STDOUT_FILENO);
		close(saved);
		assert_int_equal(st, 0);
		rewind(out);
		n = fread(buf, 1, sizeof(buf) - 1, out);
		buf[n] = 0;
		fclose(out);
		/* every "--word" of the help is in the table (or is --help) */
		for (char *p = strstr(buf, "--"); p; p = strstr(p, "--")) {
			char w[64];
			size_t k = 0;
			int found = 0;

			p += 2;
			while (k < sizeof(w) - 1 && ((*p >= 'a' && *p <= 'z') || *p == '-'))
				w[k++] = *p++;
			w[k] = 0;
			if (!k || !strcmp(w, "help"))
				continue;
			for (const struct optspec *o = c->opts; o->lng; o++)
				found |= !strcmp(o->lng, w);
			if (!found)
				fail_msg("peerdma %s --help lists --%s, not in this test's table", c->name, w);
		}
		for (const struct optspec *o = c->opts; o->lng; o++) {
			char w[72];

			snprintf(w, sizeof(w), "--%s", o->lng);
			if (!strstr(buf, w))
				fail_msg("peerdma %s: --%s in the table, not in --help", c->name, o->lng);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tables_match),
		cmocka_unit_test(test_every_bad_value),
		cmocka_unit_test(test_every_good_value),
		cmocka_unit_test(test_fuzz_lists),
		cmocka_unit_test(test_gen_eth_combos),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
