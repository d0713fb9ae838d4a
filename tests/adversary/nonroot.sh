#!/bin/sh
# Runs the adversary (argument 1, then its options) as an unprivileged user:
# as root, under setpriv as nobody from a private copy of the binary (the build
# tree may not be readable by nobody); as another user, directly.
set -eu
bin=$1
shift
if [ "$(id -u)" != 0 ]; then
	exec "$bin" "$@"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$bin" "$dir/adversary"
chmod 755 "$dir" "$dir/adversary"
cd "$dir"
setpriv --reuid=nobody --regid=nogroup --clear-groups "$dir/adversary" "$@"
