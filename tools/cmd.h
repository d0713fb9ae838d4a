/* SPDX-License-Identifier: MIT */
/* The peerdma command: one file per subcommand (cmd_NAME.c), each exporting
 * int pdma_cmd_NAME(int argc, char **argv) with argv[0] the subcommand name.
 * Return the process exit status: 0 success, 1 failure, 2 usage error (one
 * line on stderr naming the option: tools/opt.h).
 *
 * pdma_cmd_NAME_check parses and checks the arguments exactly as NAME does and
 * runs nothing: 0 (also after --help) or 2 with that one line. It is what
 * tests/unit/test_cli_opts.c runs over generated argument lists. */
#ifndef PDMA_TOOLS_CMD_H
#define PDMA_TOOLS_CMD_H

int pdma_cmd_demo(int argc, char **argv);
int pdma_cmd_gen(int argc, char **argv);
int pdma_cmd_ingest(int argc, char **argv);
int pdma_cmd_record(int argc, char **argv);
int pdma_cmd_forward(int argc, char **argv);
int pdma_cmd_consume(int argc, char **argv);
int pdma_cmd_bench(int argc, char **argv);
int pdma_cmd_info(int argc, char **argv);
int pdma_cmd_deframe(int argc, char **argv);

/* SIGINT and SIGTERM to handler (tools/stop.c), overriding an ignore the
 * process inherited (a background job of a script). The commands that run
 * until stopped (ingest, record, forward, gen, consume) call it right after
 * their options are read: a stop during their setup, which takes up to
 * seconds, is then neither fatal nor lost. */
void pdma_cmd_catch_stop(void (*handler)(int));

int pdma_cmd_demo_check(int argc, char **argv);
int pdma_cmd_gen_check(int argc, char **argv);
int pdma_cmd_ingest_check(int argc, char **argv);
int pdma_cmd_record_check(int argc, char **argv);
int pdma_cmd_forward_check(int argc, char **argv);
int pdma_cmd_consume_check(int argc, char **argv);
int pdma_cmd_bench_check(int argc, char **argv);
int pdma_cmd_info_check(int argc, char **argv);
int pdma_cmd_deframe_check(int argc, char **argv);

#endif
