#!/usr/bin/env bash
# The fault injector of the suite's storage-fault tests (tests/storage_faults.py): Toxiproxy
# (MIT), a TCP proxy whose "toxics" reset or stall the connections through it, between S3A and
# the suite's S3 server. Built from its pinned Go module into the cache the S3 server is built
# in (deploy/s3/seaweedfs.sh), outside the clone: about a minute once per machine.
#
#   deploy/s3/toxiproxy.sh build   # build unless the cache has it; prints the binary's path
#   deploy/s3/toxiproxy.sh path    # the binary's path (built or not)
set -euo pipefail

MODULE=github.com/Shopify/toxiproxy/v2
VERSION=v2.12.0
CACHE=${LOGMETRICS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/logmetrics}
BIN=$CACHE/toxiproxy-$VERSION/toxiproxy-server

case "${1:-build}" in
path)
	echo "$BIN"
	;;
build)
	if [ -x "$BIN" ]; then
		echo "$BIN"
		exit 0
	fi
	command -v go >/dev/null || { echo "toxiproxy.sh: Go is needed to build Toxiproxy" >&2; exit 1; }
	echo "building Toxiproxy $VERSION into $BIN (once per machine: about a minute)" >&2
	work=$(mktemp -d)
	trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
	(cd "$work" && GOBIN="$work/bin" go install -trimpath -ldflags "-s -w" "$MODULE/cmd/server@$VERSION")
	mkdir -p "$(dirname "$BIN")"
	mv "$work/bin/server" "$BIN"
	echo "$BIN"
	;;
*)
	echo "usage: $0 build|path" >&2
	exit 2
	;;
esac
