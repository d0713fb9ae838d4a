#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Host-side checks of the NIC system run (tests/vm/run, guest step "nic_ingest").

`peerdma gen --eth` on the host sent frames through QEMU's dgram netdev to the
guest's e1000; peerdma_e1000 wrote them into GPU memory (gpusim: the ivshmem
BAR, whose bytes the host reads in the gpumem file) that libpeerdma registered
and peerdma.ko pinned; `peerdma ingest --path nic` deframed them. This script
compares what ingest reported with what gen injected, and what lies in the
GPU memory with what gen sent, byte for byte. One line per check ("ok - ..."
or "not ok - ..."), exit status 1 if any failed.

  full:   every stream's received, lost, duplicated and reordered counts are
          gen's; every malformed frame gen injected was skipped under its
          reason (oversize ones the NIC itself dropped: the driver's rx_long);
          the NIC missed nothing; every receive buffer that holds a frame
          holds one gen sent, whole, and as many buffers hold one as frames
          can still be there.
  revoke: ingest stopped because the memory was revoked; the frames that
          landed are exactly the ones the driver completed before the
          quiesce (no byte landed after it: the rest of the region is zero).
  tx:     the frames `peerdma gen --eth --nic` in the guest built in GPU
          memory and the NIC transmitted are, in order and byte for byte,
          the frames the same gen command writes on the host (--pcap-only).
"""
import argparse
import json
import struct
import sys

GPUSIM_VA_BASE = 0x200000000000

fails = 0


def check(cond, what):
    global fails
    print(("ok - " if cond else "not ok - ") + what)
    if not cond:
        fails += 1


def pcap_frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack_from("<I", data, 0)[0]
    end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off, frames = 24, []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack_from(end + "IIII", data, off)
        frames.append(data[off + 16 : off + 16 + incl])
        off += 16 + incl
    return frames


def region(gpumem, nic):
    start = nic["region_dev_addr"] - GPUSIM_VA_BASE
    with open(gpumem, "rb") as f:
        f.seek(start)
        return f.read(nic["region_bytes"])


def buffers(reg, nic):
    o, bs = nic["bufs_offset"], nic["buf_size"]
    return [reg[o + i * bs : o + (i + 1) * bs] for i in range(nic["nbufs"])]


def full(a, gen, ing):
    nic = ing["nic"]
    streams = {s["stream_id"]: s for s in ing["streams"]}
    for g in gen["streams"]:
        s = streams.get(g["stream_id"])
        if s is None:
            check(False, f"stream {g['stream_id']:#x}: received by ingest")
            continue
        want = (gen["packets_per_stream"] - g["lost"], g["lost"], g["duplicated"], g["reordered"])
        got = (s["received"], s["lost"], s["duplicated"], s["reordered"])
        check(got == want, f"stream {g['stream_id']:#x}: received/lost/dup/reordered {got} == gen's {want}")
        check(s["malformed"] == 0, f"stream {g['stream_id']:#x}: no malformed datagrams ({s['malformed']})")
    check(len(streams) == len(gen["streams"]), f"ingest saw {len(streams)} streams, gen sent {len(gen['streams'])}")
    inj = gen["eth"]["malformed"]
    sk = dict(nic["frames"]["skipped"])
    # frames longer than a receive buffer never reach memory: the NIC drops them
    sk["oversize"] = sk.get("oversize", 0) + nic["driver"].get("rx_long", 0)
    kinds = sorted(set(inj) | set(sk))
    check(all(inj.get(k, 0) == sk.get(k, 0) for k in kinds),
          f"malformed frames skipped by reason {sk} == injected {inj}")
    check(nic["driver"]["rx_missed"] == 0, f"the NIC missed no frame ({nic['driver']['rx_missed']})")
    sent = set(pcap_frames(a.pcap))
    reg = region(a.gpumem, nic)
    held = [b for b in buffers(reg, nic) if any(b)]
    bad = 0
    lengths = sorted({len(f) for f in sent})
    for b in held:
        # the NIC writes the frame at the buffer's start (padded to 60 bytes,
        # maybe with its FCS after it); bytes past it are an older frame's
        if not any(b[:n] in sent for n in lengths if n <= len(b)):
            bad += 1
    landed = nic["driver"]["rx_frames"]
    want = min(landed, nic["nbufs"])
    check(len(held) == want and bad == 0,
          f"GPU memory (host's ivshmem file): {len(held)} receive buffers hold frames ({want} expected), "
          f"each byte for byte one gen sent ({bad} not)")


def revoke(a, gen, ing):
    nic = ing["nic"]
    check(nic["revoked"] and nic["revoke_event"],
          "ingest reports the receive memory revoked, and libpeerdma's PDMA_MR_REVOKED reached it")
    check(nic["driver"]["quiesces"] >= 1, f"the driver's quiesce ran ({nic['driver']['quiesces']})")
    reg = region(a.gpumem, nic)
    held = [b for b in buffers(reg, nic) if any(b)]
    landed = nic["driver"]["rx_frames"]
    check(landed < nic["nbufs"], f"the revoke came before the buffers wrapped ({landed} < {nic['nbufs']})")
    check(len(held) == landed,
          f"after the quiesce nothing landed: {len(held)} buffers hold frames, the driver completed {landed} "
          f"(gen sent {gen['eth']['frames']})")
    ring_end = nic["bufs_offset"] + nic["nbufs"] * nic["buf_size"]
    check(not any(reg[ring_end:]), "the region past the buffers is untouched")


def tx(a):
    want, got = pcap_frames(a.pcap), pcap_frames(a.capture)
    bad = next((i for i in range(min(len(want), len(got))) if want[i] != got[i]), None)
    check(len(got) == len(want) and bad is None and len(want) > 0,
          f"TX from GPU memory: the host received {len(got)} frames, gen's {len(want)}, "
          + ("every byte equal" if bad is None else f"frame {bad} differs"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["full", "revoke", "tx"])
    ap.add_argument("--gen-json")
    ap.add_argument("--ingest-json")
    ap.add_argument("--gpumem")
    ap.add_argument("--pcap")
    ap.add_argument("--capture")
    a = ap.parse_args()
    if a.mode == "tx":
        tx(a)
        return 1 if fails else 0
    with open(a.gen_json) as f:
        gen = json.load(f)
    with open(a.ingest_json) as f:
        ing = json.load(f)
    {"full": full, "revoke": revoke}[a.mode](a, gen, ing)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
