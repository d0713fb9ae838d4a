/* SPDX-License-Identifier: MIT */
/*
 * Frames from a capture file: the records of a classic pcap file of
 * Ethernet frames (link type 1; microsecond or nanosecond, either byte
 * order), such as `peerdma gen --eth --pcap` or tcpdump writes, as a frame
 * ring (deframe/frame.h) for the CPU deframer: a CPU-only run of the
 * frame-ring path over what a NIC would have received (`peerdma deframe`).
 *
 * Single-threaded: one reader per file.
 */
#ifndef PDMA_INGEST_RX_PCAP_FRAMES_H
#define PDMA_INGEST_RX_PCAP_FRAMES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "deframe/frame.h"

struct pdma_pcap_in {
	FILE *f;
	bool swap;        /* the file's byte order is not the host's */
	uint64_t records;
	uint64_t cut;     /* records captured shorter than the frame (snaplen) */
};

/* Read the file header: 0, -EPROTO (not a pcap file), -EPROTONOSUPPORT
 * (not Ethernet) or -EIO. */
int pdma_pcap_in_open(struct pdma_pcap_in *p, FILE *f);
/*
 * Up to max frames into one region: frame i at region + fr[i].off, each at a
 * multiple of slot bytes (a NIC's receive buffers); flags 0 (no NIC vouched
 * for a checksum). A record longer than slot is kept as its first slot
 * bytes with its whole length (the deframer counts it oversize without
 * reading past what is there, as long as slot is at least its frame limit).
 * Returns the frames read (0 at the end) or -EIO / -EPROTO on a broken file.
 */
int pdma_pcap_in_frames(struct pdma_pcap_in *p, uint8_t *region, uint32_t slot, struct pdma_frame *fr,
			uint32_t max);

#endif /* PDMA_INGEST_RX_PCAP_FRAMES_H */
