#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Host side of the guest NIC test (tests/vm/pdtest/nic.c), python3 stdlib only.

QEMU's `-netdev dgram,local=127.0.0.1:GUEST_PORT,remote=127.0.0.1:PORT` turns
each Ethernet frame into one UDP datagram: this helper binds PORT (what the
guest NIC transmits arrives here) and sends frames to GUEST_PORT.

The guest drives it with control frames (Ethertype 0x88B5, payload
"PDNIC <command> <args>"), transmitted through peerdma_e1000 from GPU pages:
  READY                       the guest's receive side is attached; answered
                              READY-OK (and --on-ready starts its command)
  START                       answered START-OK (and --on-start starts its
                              command): the guest sends it once READY-OK came
                              back, i.e. past QEMU's 1 s receive stall after
                              each RCTL write, so nothing sent is lost to it
  SEND FIRST COUNT SIZE SEED  COUNT data frames, sequence FIRST.. (SIZE 0:
                              sizes vary over 64..1514)
  ODD SEED                    a runt, a 1514-byte frame, three oversize ones,
                              then a marker frame
  STREAM SEED SIZE US         data frames every US microseconds until STOP
  STOP                        answered STOPPED N (frames the stream sent)
  TXCHECK SEED                answered TXCHECK OK BAD: the 0x88B7 frames of
                              SEED the guest sent, checked byte for byte
                              against frame_bytes()
  RUN NAME                    start the command --run NAME=CMD names, not
                              answered (the guest's receiver may be a program
                              under test that must see only its own frames)
  WAIT NAME                   answered DONE NAME RC once that command ended
  SNAPSHOT NAME               copy --gpumem (the guest's GPU memory) to
                              SNAP_DIR/NAME.bin, answered SNAPSHOT-OK NAME
                              (tests/vm/nic-system.sh: between runs that
                              reuse the same GPU memory)
A guest may repeat a command whose answer got lost (QEMU drops what arrives
while the guest NIC does not receive): STOP and TXCHECK answer the same again.
Data frames (0x88B6 host->guest, 0x88B7 guest->host): frame_bytes() below,
mirrored by nic.c's frame_byte().

--capture FILE writes every IPv4 frame the guest transmits (gen --eth --nic in
tests/vm/nic-system.sh) to a pcap, for tests/vm/nic-check.py tx.

--on-ready 'CMD' / --on-start 'CMD' run CMD through the shell on the first
READY / START ({guest_port} and {port} replaced), for a generator of one's own
(`peerdma gen --eth --to 127.0.0.1:{guest_port} ...`: QEMU takes datagrams from
any sender); the helper keeps answering control frames. While the guest NIC has
no free descriptor QEMU stops reading its socket, and what overflows that
socket's buffer (net.core.rmem_default: about 90 1-KiB frames) is dropped by
the host: a generator must be paced to what the guest consumes.
"""
import argparse
import os
import select
import shutil
import struct
import socket
import subprocess
import sys
import time

GUEST_MAC = bytes.fromhex("525400123456")
HOST_MAC = bytes.fromhex("525400000002")
ET_CTL, ET_DATA, ET_TX = 0x88B5, 0x88B6, 0x88B7


def frame_bytes(dst, src, ethertype, seq, seed, size):
    """header, seq (BE32), seed (BE32), then a pattern of (seed, seq, offset)"""
    head = dst + src + ethertype.to_bytes(2, "big") + seq.to_bytes(4, "big") + seed.to_bytes(4, "big")
    body = bytes(((seed * 131 + seq * 7 + i * 13 + (i >> 8)) & 0xFF) for i in range(len(head), size))
    return head + body


def vary_size(seq):
    return 64 + (seq * 97) % 1451


def ctl(text):
    payload = b"PDNIC " + text.encode()
    frame = GUEST_MAC + HOST_MAC + ET_CTL.to_bytes(2, "big") + payload
    return frame + bytes(max(0, 60 - len(frame)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="QEMU's remote port (bound here)")
    ap.add_argument("--guest-port", type=int, required=True, help="QEMU's local port")
    ap.add_argument("--timeout", type=float, default=900, help="exit after this many seconds")
    ap.add_argument("--on-ready", help="shell command to start on the first READY")
    ap.add_argument("--on-start", help="shell command to start on the first START")
    ap.add_argument("--log", help="append a line per event here (default stderr)")
    ap.add_argument("--run", action="append", default=[], metavar="NAME=CMD",
                    help="a command RUN NAME starts ({guest_port}, {port} replaced)")
    ap.add_argument("--gpumem", help="the guest's GPU memory file (SNAPSHOT)")
    ap.add_argument("--snap-dir", default=".", help="where SNAPSHOT copies it")
    ap.add_argument("--capture", help="write every IPv4 frame the guest transmits to this pcap")
    a = ap.parse_args()

    logf = open(a.log, "a", buffering=1) if a.log else sys.stderr

    def log(msg):
        print(f"nic-host: {msg}", file=logf)

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    s.bind(("127.0.0.1", a.port))
    dest = ("127.0.0.1", a.guest_port)
    children = {}  # command word -> its process
    stream = None  # [seed, size, interval_s, next_seq, next_time]
    tx = {}  # seed -> [ok, bad]
    stopped = 0
    cap = None
    if a.capture:  # pcap, link type Ethernet: what the guest NIC sent
        cap = open(a.capture, "wb")
        cap.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        cap.flush()
    runs = dict(r.split("=", 1) for r in a.run)
    started = {}  # RUN NAME -> its process
    end = time.monotonic() + a.timeout

    def send(frame):
        s.sendto(frame, dest)

    while time.monotonic() < end:
        wait = 0.5
        if stream:
            wait = max(0.0, stream[4] - time.monotonic())
        r, _, _ = select.select([s], [], [], wait)
        if stream and time.monotonic() >= stream[4]:
            seed, size, iv, seq, _ = stream
            send(frame_bytes(GUEST_MAC, HOST_MAC, ET_DATA, seq, seed, size))
            stream[3] = seq + 1
            stream[4] = time.monotonic() + iv
        if not r:
            continue
        data = s.recv(65536)
        if len(data) < 14:
            log(f"short frame {len(data)}")
            continue
        et = int.from_bytes(data[12:14], "big")
        if et == ET_TX:
            seq = int.from_bytes(data[14:18], "big")
            seed = int.from_bytes(data[18:22], "big")
            want = frame_bytes(data[0:6], data[6:12], ET_TX, seq, seed, len(data))
            t = tx.setdefault(seed, [0, 0])
            if data == want:
                t[0] += 1
            else:
                t[1] += 1
                bad = next((i for i in range(len(data)) if data[i] != want[i]), -1)
                log(f"TX frame seq {seq} len {len(data)}: byte {bad} differs")
            continue
        if et == 0x0800 and cap:
            t = time.time()
            cap.write(struct.pack("<IIII", int(t), int(t % 1 * 1e6), len(data), len(data)) + data)
            cap.flush()
            continue
        if et != ET_CTL or not data[14:].startswith(b"PDNIC "):
            log(f"ignored frame: ethertype {et:#x}, {len(data)} bytes")
            continue
        words = data[20:].rstrip(b"\0").decode(errors="replace").split()
        if not words:
            continue
        cmd, args = words[0], [int(w) for w in words[1:] if w.isdigit()]
        log(" ".join(words))
        if cmd in ("READY", "START"):
            send(ctl(cmd + "-OK"))
            start = a.on_ready if cmd == "READY" else a.on_start
            if start and cmd not in children:
                c = start.format(guest_port=a.guest_port, port=a.port)
                log(f"starting: {c}")
                children[cmd] = subprocess.Popen(c, shell=True)
        elif cmd == "SEND" and len(args) == 4:
            first, count, size, seed = args
            for seq in range(first, first + count):
                send(frame_bytes(GUEST_MAC, HOST_MAC, ET_DATA, seq, seed, size or vary_size(seq)))
        elif cmd == "ODD" and len(args) == 1:
            seed = args[0]
            send(frame_bytes(GUEST_MAC, HOST_MAC, ET_DATA, 1, seed, 20))    # runt: padded to 60
            send(frame_bytes(GUEST_MAC, HOST_MAC, ET_DATA, 2, seed, 1514))  # largest without LPE
            for i, size in enumerate((1600, 3000, 9000)):                   # oversize: dropped
                send(frame_bytes(GUEST_MAC, HOST_MAC, ET_DATA, 3 + i, seed, size))
            send(frame_bytes(GUEST_MAC, HOST_MAC, ET_DATA, 6, seed, 100))   # marker
        elif cmd == "STREAM" and len(args) == 3:
            stream = [args[0], args[1], args[2] / 1e6, 0, time.monotonic()]
        elif cmd == "STOP":
            if stream:
                stopped = stream[3]
            stream = None
            send(ctl(f"STOPPED {stopped}"))
        elif cmd == "TXCHECK" and len(args) == 1:
            t = tx.get(args[0], [0, 0])
            send(ctl(f"TXCHECK {t[0]} {t[1]}"))
        elif cmd == "RUN" and len(words) == 2 and words[1] in runs:
            if words[1] not in started:  # a repeated RUN starts nothing
                c = runs[words[1]].format(guest_port=a.guest_port, port=a.port)
                log(f"starting {words[1]}: {c}")
                started[words[1]] = subprocess.Popen(c, shell=True)
        elif cmd == "WAIT" and len(words) == 2 and words[1] in started:
            rc = started[words[1]].poll()
            if rc is not None:  # else the guest asks again
                send(ctl(f"DONE {words[1]} {rc}"))
        elif cmd == "SNAPSHOT" and len(words) == 2 and a.gpumem and words[1].isidentifier():
            shutil.copyfile(a.gpumem, os.path.join(a.snap_dir, words[1] + ".bin"))
            send(ctl(f"SNAPSHOT-OK {words[1]}"))
        elif cmd == "BYE":
            break
    log(f"done: TX frames checked {sum(t[0] for t in tx.values())}, bad {sum(t[1] for t in tx.values())}")
    for child in list(children.values()) + list(started.values()):
        child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
