/* SPDX-License-Identifier: MIT */
/*
 * Strict option values for the peerdma subcommands: one parser for every
 * number, address and choice, so no command accepts "-5" by wrapping it
 * (strtoull does), "nan" for a rate, an empty string or "12abc".
 *
 * Every error is exactly one line on stderr that names the option, the value
 * and what is allowed, e.g.
 *   peerdma gen: invalid value '-5' for --packets: want an integer in 1..281474976710656
 * and the command then exits 2. Unknown options and missing values are
 * reported by getopt_long itself, also in one line, under the command's name.
 */
#ifndef PDMA_TOOLS_OPT_H
#define PDMA_TOOLS_OPT_H

#include <getopt.h>
#include <stdint.h>

struct pdma_opt {
	const char *cmd;               /* "peerdma gen": every message's prefix */
	const struct option *longopts; /* the command's table, { 0 }-terminated */
	const char *shortopts;
	const char *name;              /* the option just returned, as "--port" */
	char name_buf[40];
};

/* Start parsing argv (argv[0] the subcommand's name): resets getopt fully,
 * so a command may be parsed any number of times in one process. */
void pdma_opt_init(struct pdma_opt *o, const char *cmd, const struct option *longopts,
		   const char *shortopts);
/* The next option's val (o->name and optarg set), -1 after the last, or '?'
 * when getopt_long has printed its one-line error (unknown option, missing
 * value, ambiguous abbreviation, a value given to a flag). */
int pdma_opt_next(struct pdma_opt *o, int argc, char **argv);

/* The current option's value (optarg) checked and converted. Each returns 0,
 * or -EINVAL after printing the one line. Integers are decimal, or hex with
 * 0x; no sign, no spaces, nothing after the digits. */
/* The integer syntax alone, quietly: 0 or -EINVAL. */
int pdma_opt_parse_u64(const char *s, uint64_t *v);
int pdma_opt_u64(const struct pdma_opt *o, uint64_t min, uint64_t max, uint64_t *v);
int pdma_opt_u32(const struct pdma_opt *o, uint32_t min, uint32_t max, uint32_t *v);
/* A finite number in [min, max]; min excluded when min_open. */
int pdma_opt_double(const struct pdma_opt *o, double min, double max, int min_open, double *v);
/* A non-empty string (a file name, ...). */
int pdma_opt_str(const struct pdma_opt *o, const char **v);
/* A dotted-quad IPv4 address (inet_pton's form). */
int pdma_opt_ipv4(const struct pdma_opt *o, const char **v);
/* A MAC address, aa:bb:cc:dd:ee:ff (hex digits either case). */
int pdma_opt_mac(const struct pdma_opt *o, uint8_t mac[6]);
/* IPv4:PORT, port 1..65535: the address into host (a dotted quad). */
int pdma_opt_ipv4_port(const struct pdma_opt *o, char host[16], uint16_t *port);
/* One of names[] (NULL-terminated): *idx gets its index. */
int pdma_opt_choice(const struct pdma_opt *o, const char *const *names, int *idx);
/* Any other error about the current value: "invalid value 'V' for --NAME: why". */
int pdma_opt_bad(const struct pdma_opt *o, const char *why_fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* After the last option of a command that takes no other arguments: 0, or
 * 2 after naming the first word that is not an option. */
int pdma_opt_end(const struct pdma_opt *o, int argc, char **argv);
/* An error that is not about one value (options that conflict, an extra
 * argument): one line, "peerdma CMD: " + the message. Returns 2, the exit status. */
int pdma_opt_fail(const struct pdma_opt *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* PDMA_TOOLS_OPT_H */
