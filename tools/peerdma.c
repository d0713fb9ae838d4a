// SPDX-License-Identifier: MIT
/* peerdma: the command-line front end. Dispatches to one subcommand. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
} cmds[] = {
	{ "demo", pdma_cmd_demo, "run the whole path on the simulated device (no hardware)" },
	{ "gen", pdma_cmd_gen, "send VITA-49 packets over UDP (rate, streams, loss injection, pcap)" },
	{ "ingest", pdma_cmd_ingest, "receive VITA-49 streams into registered rings and deframe" },
	{ "record", pdma_cmd_record, "receive like ingest, write each stream to a SigMF recording" },
	{ "forward", pdma_cmd_forward, "receive like ingest, send the blocks to consumers over UCX" },
	{ "consume", pdma_cmd_consume, "read a forwarder's blocks over UCX (SigMF with --dir)" },
	{ "deframe", pdma_cmd_deframe, "deframe a capture of Ethernet frames on the CPU (frame rings)" },
	{ "bench", pdma_cmd_bench, "run a benchmark and print a table (JSON with --json)" },
	{ "info", pdma_cmd_info, "GPUs, GPUDirect attributes, BAR1, IOMMU, PCIe paths" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: peerdma COMMAND [OPTIONS]   (peerdma COMMAND --help for options)\n\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].help);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "peerdma: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
