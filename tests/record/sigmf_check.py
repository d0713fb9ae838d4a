#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the SigMF recordings of `peerdma record` against what `peerdma gen
--pcap` sent:
 - each .sigmf-meta validates against the SigMF metadata rules (below: the
   required fields and types of the specification's sigmf-schema.json, v1.2,
   restated here because no Debian package ships that schema and CI has no
   network; PEERDMA_SIGMF_SCHEMA=path/to/sigmf-schema.json validates against
   the specification's own file as well) with Debian's python3-jsonschema;
 - the .sigmf-data read back (numpy, ci16_le) is, sample for sample, every
   payload gen sent for the stream, in time order, once (duplicates and
   reordering undone), and equals pdma_gen_sample (ingest/gen/gen.h);
 - there is one capture per run of consecutive packets gen sent: a new one
   exactly after each packet gen lost, with core:sample_start its place in
   the data, core:global_index its absolute sample index and core:datetime
   that index's UTC time.
With --digests FILE (lines "NAME.sigmf-data SHA256"), the data files are
not read: the SHA-256 of the bytes they must hold is compared instead (the
QEMU guest's recordings, tests/vm/nic-system.sh, whose metadata reach the
host through the guest log, their data as a digest).
With --streams ID,ID only those of gen's streams are checked (a consumer of
peerdma forward that asked for them: tests/forward/), and no other stream
may have a recording in DIR.
usage: sigmf_check.py DIR PREFIX PCAP SAMPLE_RATE [--digests FILE] [--streams IDS]"""
import datetime
import hashlib
import json
import os
import sys

import jsonschema
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "public"))
from gen_sent import data_packets  # noqa: E402

U64 = {"type": "integer", "minimum": 0, "maximum": 2**64 - 1}
SEGMENT = {"type": "object", "required": ["core:sample_start"],
           "properties": {"core:sample_start": U64}}
# The specification's rules for the fields a recording may carry (SigMF 1.2:
# sigmf-spec.md and sigmf-schema.json): global, captures and annotations
# required and nothing else at the top; core:datatype and core:version
# required; captures and annotations are segments with core:sample_start.
SIGMF_RULES = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["global", "captures", "annotations"],
    "additionalProperties": False,
    "properties": {
        "global": {
            "type": "object",
            "required": ["core:datatype", "core:version"],
            "properties": {
                "core:datatype": {"type": "string",
                                  "pattern": "^(c|r)(f32|f64|i32|i16|u32|u16|i8|u8)(_le|_be)?$"},
                "core:version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
                "core:sample_rate": {"type": "number", "minimum": 1, "maximum": 1e12},
                "core:num_channels": {"type": "integer", "minimum": 1},
                "core:recorder": {"type": "string"},
                "core:description": {"type": "string"},
            },
        },
        "captures": {"type": "array", "items": {**SEGMENT, "properties": {
            "core:sample_start": U64,
            "core:global_index": U64,
            # RFC 3339, UTC ('Z') only
            "core:datetime": {"type": "string",
                              "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$"},
            "core:frequency": {"type": "number", "minimum": -1e12, "maximum": 1e12},
        }}},
        "annotations": {"type": "array", "items": SEGMENT},
    },
}


def utc(g, rate):
    sec, rem = divmod(g, rate)
    t = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=sec)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + ".%09dZ" % (rem * 10**9 // rate)


def gen_sample(sid, s):
    """pdma_gen_sample as int16 I, Q for absolute sample indices s."""
    s = s.astype(np.uint64)
    i = ((s * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)).astype(np.uint32) ^ np.uint32(
        (sid * 40503) & 0xFFFFFFFF)
    w = (i & np.uint32(0xFFFF0000)) | ((s + np.uint64(sid)) & np.uint64(0xFFFF)).astype(np.uint32)
    return (w >> np.uint32(16)).astype(np.uint16).view(np.int16), (w & np.uint32(0xFFFF)).astype(
        np.uint16).view(np.int16)


def check_stream(d, prefix, sid, pkts, rate, validators, digests=None):
    base = os.path.join(d, "%s-%#x" % (prefix, sid))
    with open(base + ".sigmf-meta") as f:
        meta = json.load(f)
    for v in validators:
        v.validate(meta)
    g = meta["global"]
    assert g["core:datatype"] == "ci16_le", g
    assert g["core:sample_rate"] == rate, g  # gen's context packet says this rate
    idx = sorted(pkts)
    spp = len(pkts[idx[0]]) // 4
    # what gen sent, once per packet, in time order; payload big-endian I/Q
    want = np.frombuffer(b"".join(pkts[p] for p in idx), dtype=">i2").reshape(-1, 2)
    if digests is not None:
        name = os.path.basename(base) + ".sigmf-data"
        if hashlib.sha256(want.astype("<i2").tobytes()).hexdigest() != digests.get(name):
            return False, "%s: its SHA-256 is not that of gen's %d samples" % (name, len(want))
        data = want  # the digest says the file holds exactly these
    else:
        data = np.fromfile(base + ".sigmf-data", dtype="<i2").reshape(-1, 2)
    if data.shape != want.shape:
        return False, "%d samples recorded, gen sent %d" % (len(data), len(want))
    if not np.array_equal(data, want):
        bad = int(np.argmax(np.any(data != want, axis=1)))
        return False, "sample %d differs from gen's: %s != %s" % (bad, data[bad], want[bad])
    s = np.concatenate([np.arange(p * spp, (p + 1) * spp, dtype=np.uint64) for p in idx])
    i, q = gen_sample(sid, s)
    if not (np.array_equal(data[:, 0], i) and np.array_equal(data[:, 1], q)):
        return False, "data differ from pdma_gen_sample"
    # one capture per run of consecutive packets
    caps, start = [], 0
    for k, p in enumerate(idx):
        if k == 0 or p != idx[k - 1] + 1:
            caps.append({"core:sample_start": start, "core:global_index": p * spp,
                         "core:datetime": utc(p * spp, rate)})
        start += spp
    got = [{k: c[k] for k in ("core:sample_start", "core:global_index", "core:datetime")}
           for c in meta["captures"]]
    if got != caps:
        diff = [(a, b) for a, b in zip(got, caps) if a != b][:2]
        return False, "captures differ from gen's gaps (%d vs %d): %s" % (len(got), len(caps), diff)
    return True, "%d samples equal gen's, %d captures exactly at its %d gaps" % (
        len(data), len(caps), len(caps) - 1)


def main():
    d, prefix, pcap, rate = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    digests, only = None, None
    opts = sys.argv[5:]
    while len(opts) >= 2 and opts[0] in ("--digests", "--streams"):
        if opts[0] == "--digests":
            with open(opts[1]) as f:
                digests = dict(line.split() for line in f if line.strip())
        else:
            only = {int(x, 0) for x in opts[1].split(",")}
        opts = opts[2:]
    if opts:
        sys.exit(__doc__)
    validators = [jsonschema.Draft202012Validator(SIGMF_RULES)]
    spec = os.environ.get("PEERDMA_SIGMF_SCHEMA")
    if spec:
        with open(spec) as f:
            schema = json.load(f)
        validators.append(jsonschema.validators.validator_for(schema)(schema))
    print("metadata validated against: the SigMF specification's rules (restated here)%s" %
          (", " + spec if spec else "; PEERDMA_SIGMF_SCHEMA unset"))
    sent = {}
    for sid, tsi, frac, payload in data_packets(pcap):
        sent.setdefault(sid, {})[(tsi * rate + frac) // (len(payload) // 4)] = payload
    bad = 0 if sent else 1
    if only is not None:
        missing = only - set(sent)
        if missing:
            print("streams %s: gen sent none" % sorted(missing))
            bad = 1
        for sid in sorted(set(sent) - only):
            if os.path.exists(os.path.join(d, "%s-%#x.sigmf-meta" % (prefix, sid))):
                print("stream %#x: recorded, but not asked for" % sid)
                bad = 1
        sent = {k: v for k, v in sent.items() if k in only}
    for sid, pkts in sorted(sent.items()):
        try:
            ok, msg = check_stream(d, prefix, sid, pkts, rate, validators, digests)
        except (OSError, AssertionError, jsonschema.ValidationError) as e:
            msg, ok = "%s: %s" % (type(e).__name__, str(e).splitlines()[0]), False
        print("stream %#x: %s" % (sid, msg))
        bad |= not ok
    sys.exit(bad)


if __name__ == "__main__":
    main()
