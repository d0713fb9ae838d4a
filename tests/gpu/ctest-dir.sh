# Sourced by the GPU-machine scripts (tests/gpu/run-h100.sh,
# bench/ingest/run-gpu.sh). ctest files name the build machine's absolute
# paths; ctest_dir BUILD SRC makes the source path resolve here (a link to
# SRC when it does not) and prints the build directory to run ctest in.
ctest_dir() {
	local bsrc
	bsrc=$(sed -nE 's/^# Source directory: (.*)/\1/p' "$1/CTestTestfile.cmake")
	if [ -n "$bsrc" ] && [ "$bsrc" != "$2" ] && [ ! -e "$bsrc" ]; then
		mkdir -p "$(dirname "$bsrc")" && ln -s "$2" "$bsrc"
	fi
	sed -nE 's/^# Build directory: (.*)/\1/p' "$1/CTestTestfile.cmake"
}
