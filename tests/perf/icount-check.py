#!/usr/bin/env python3
"""Instruction-count guard of the registration hit path (issue 15).

Runs reg_icount (tests/perf/reg_icount.c) under valgrind --tool=callgrind,
reads the instructions of each measured loop from the dump its client request
wrote (the "totals:" line), divides by the loop's operations and compares each
path with tests/perf/icount-baseline.json:

  more than 20% above the baseline   FAIL (exit 1), both numbers printed
  more than 20% below                a note that the baseline could be lowered
                                     (exit 0)

Instruction counts are deterministic for one binary, but depend on the
compiler, its flags and the C library: the baseline names the build it was
measured with (tests/run-all's valgrind step: gcc 12.2, Debug, Debian 12's
glibc 2.36), and a build that differs is skipped (exit 77), not compared.

Updating the baseline (after a change that makes a path cheaper, or one whose
cost is accepted), from the build of tests/run-all's valgrind step
(`tests/run-all --only 5` configures build-valgrind):

  cd build-valgrind && PDMA_ICOUNT_UPDATE=1 ctest -R reg_icount.callgrind -V

which rewrites tests/perf/icount-baseline.json with this build's counts.
Closing line: "reg_icount: N passed, N failed, N skipped" (one per path).
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

TOLERANCE = 0.20
OPS = 20000


def glibc_version():
    name, ver = platform.libc_ver()
    return f"{name} {ver}".strip()


def run_callgrind(program, ops, tmp):
    out = os.path.join(tmp, "callgrind.out")
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--dump-instr=no",
           "--dump-line=no", f"--callgrind-out-file={out}", program, "--ops", str(ops)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited with {p.returncode}")
    measured = dict(re.findall(r"^measured (\S+) (\d+)$", p.stdout, re.M))
    counts = {}
    # One dump per CALLGRIND_DUMP_STATS_AT (out.1, out.2, ...), plus the one at
    # exit (nothing collected by then).
    for f in glob.glob(out + "*"):
        text = open(f, encoding="utf-8", errors="replace").read()
        d = re.search(r"^desc: Trigger: Client Request: (\S+)$", text, re.M)
        t = re.search(r"^totals: (\d+)", text, re.M) or re.search(r"^summary: (\d+)", text, re.M)
        if d and t:
            counts[d.group(1)] = int(t.group(1))
    per_op = {}
    for name, n in measured.items():
        if name not in counts:
            raise SystemExit(f"FAIL: no callgrind dump for {name}")
        per_op[name] = counts[name] / int(n)
    if not per_op:
        raise SystemExit("FAIL: reg_icount measured nothing")
    return per_op


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", required=True)
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--build-type", required=True)
    ap.add_argument("--flags", default="")
    ap.add_argument("--update", action="store_true",
                    help="write this build's counts as the baseline (also PDMA_ICOUNT_UPDATE=1)")
    a = ap.parse_args()
    update = a.update or os.environ.get("PDMA_ICOUNT_UPDATE") == "1"
    if not shutil.which("valgrind"):
        print("skipped: valgrind not found")
        return 77
    build = {"compiler": a.compiler, "build_type": a.build_type, "flags": a.flags.strip(),
             "libc": glibc_version(), "machine": platform.machine()}

    base = None
    if not update:
        with open(a.baseline, encoding="utf-8") as f:
            base = json.load(f)
        if base["build"] != build:
            print(f"skipped: the baseline was measured with {base['build']}, this build is {build}:"
                  " instruction counts of different builds are not comparable")
            return 77

    with tempfile.TemporaryDirectory(prefix="icount.") as tmp:
        per_op = run_callgrind(a.program, OPS, tmp)

    if update:
        vg = subprocess.run(["valgrind", "--version"], stdout=subprocess.PIPE, text=True).stdout
        doc = {
            "about": "instructions per operation of tests/perf/reg_icount.c under callgrind; "
                     "checked by tests/perf/icount-check.py (fails above +20%)",
            "build": build,
            "ops": OPS,
            "measured": datetime.date.today().isoformat() + ", " + vg.strip(),
            "instructions_per_op": {k: round(v, 1) for k, v in sorted(per_op.items())},
        }
        with open(a.baseline, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        for k, v in sorted(per_op.items()):
            print(f"{k}: {v:.1f} instructions per op (written to {a.baseline})")
        print(f"reg_icount: {len(per_op)} passed, 0 failed, 0 skipped")
        return 0

    passed = failed = 0
    want = base["instructions_per_op"]
    for name in sorted(set(want) | set(per_op)):
        if name not in per_op or name not in want:
            print(f"not ok {name}: in {'the baseline' if name in want else 'reg_icount'} only")
            failed += 1
            continue
        now, ref = per_op[name], want[name]
        ratio = now / ref
        line = f"{name}: {now:.1f} instructions per op, baseline {ref:.1f} ({(ratio - 1) * 100:+.1f}%)"
        if ratio > 1 + TOLERANCE:
            print(f"not ok {line}: more than {TOLERANCE:.0%} above the baseline")
            failed += 1
            continue
        print(f"ok {line}")
        if ratio < 1 - TOLERANCE:
            print(f"  note: {name} is more than {TOLERANCE:.0%} cheaper than the baseline; lower it:"
                  " cd build-valgrind && PDMA_ICOUNT_UPDATE=1 ctest -R reg_icount.callgrind -V")
        passed += 1
    print(f"reg_icount: {passed} passed, {failed} failed, 0 skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
