# shellcheck shell=bash
# Sourced by the end-to-end tests whose checks are Python (tests/record/
# sigmf_check.py and friends): sets py to a python3 with numpy and jsonschema,
# Debian's (scripts/install-deps test), since a python3 earlier in PATH
# (pyenv's) may lack them; without one the test fails, naming itself ($1).
py=
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import numpy, jsonschema' 2>/dev/null; then
		py=$p
		break
	fi
done
[ -n "$py" ] || { echo "$1: no python3 with numpy and jsonschema (scripts/install-deps test)"; exit 1; }
