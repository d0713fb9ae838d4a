#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The package as a user gets it: build the wheel from python/pyproject.toml
with setuptools (Debian's python3-setuptools, python3-wheel; no network, no
pip), unpack it into an empty folder and use it from there, in a fresh
interpreter that cannot see the source tree: it imports, finds the library
($PEERDMA_LIBRARY), opens a session, subscribes, and closes.

usage: wheel_check.py WORKDIR   (prints "wheel: N passed, N failed")"""
import os
import shutil
import subprocess
import sys
import zipfile

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
work = os.path.abspath(sys.argv[1])
shutil.rmtree(work, ignore_errors=True)
# setuptools writes build/ and *.egg-info next to pyproject.toml: build from
# a copy so the source tree stays clean.
tree = os.path.join(work, "src")
shutil.copytree(SRC, tree, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.egg-info", "build", "dist"))
dist = os.path.join(work, "dist")
os.makedirs(dist)
build = subprocess.run([sys.executable, "-c",
                        "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))", dist],
                       cwd=tree, capture_output=True, text=True)
passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, detail)


check(build.returncode == 0, "setuptools builds the wheel", build.stderr[-2000:])
whl = build.stdout.strip().splitlines()[-1] if build.returncode == 0 else ""
check(whl.endswith("-py3-none-any.whl"), "a pure-Python wheel", whl)
if whl:
    site = os.path.join(work, "site")
    with zipfile.ZipFile(os.path.join(dist, whl)) as z:
        names = z.namelist()
        z.extractall(site)
    check(any(n.endswith("peerdma/_dlpack.py") for n in names), "the wheel holds the package", names)
    check(not any(n.endswith((".so", ".c")) for n in names), "nothing compiled in it", names)
    smoke = r'''
import os, peerdma
assert os.path.dirname(peerdma.__file__).startswith(os.environ["SITE"]), peerdma.__file__
with peerdma.Session(port=0) as s:
    assert s.port > 0
    sub = s.subscribe()
    s.start()
    try:
        sub.next(timeout=0)
    except peerdma.Timeout:
        pass
print("ok", peerdma.__version__, peerdma.library_path())
'''
    env = dict(os.environ, PYTHONPATH=site, SITE=site, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", smoke], cwd=work, env=env, capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.startswith("ok"), "the unpacked wheel imports and opens a session",
          r.stdout + r.stderr[-2000:])
print("wheel: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
