#!/usr/bin/env bash
# A real S3-compatible server for the suite's object-storage tests and the S3 benchmark:
# SeaweedFS (Apache-2.0), built from its pinned Go module into a cache outside the clone, so a
# machine builds it once (a few minutes of 2 cores; docs/development.md) and every later clone
# starts it in seconds. Needs Go (1.26 or later) and the Go module proxy.
#
#   deploy/s3/seaweedfs.sh build   # build unless the cache has it; prints the binary's path
#   deploy/s3/seaweedfs.sh path    # the binary's path (built or not)
set -euo pipefail

MODULE=github.com/seaweedfs/seaweedfs
VERSION=v0.0.0-20261109003541-7506e5f91cd6   # SeaweedFS 4.53
CACHE=${LOGMETRICS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/logmetrics}
BIN=$CACHE/seaweedfs-$VERSION/weed

case "${1:-build}" in
path)
	echo "$BIN"
	;;
build)
	if [ -x "$BIN" ]; then
		echo "$BIN"
		exit 0
	fi
	command -v go >/dev/null || { echo "seaweedfs.sh: Go is needed to build SeaweedFS" >&2; exit 1; }
	echo "building SeaweedFS $VERSION into $BIN (once per machine: a few minutes)" >&2
	work=$(mktemp -d)
	trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
	source=$(cd "$work" && go mod download -json "$MODULE@$VERSION" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
	# Its go.mod has replace directives, so `go install module@version` refuses it: build the
	# module as the main module instead, from a writable copy.
	cp -r "$source" "$work/src"
	chmod -R u+w "$work/src"
	mkdir -p "$(dirname "$BIN")"
	(cd "$work/src" && go build -trimpath -ldflags "-s -w" -o "$BIN.partial" ./weed)
	mv "$BIN.partial" "$BIN"
	echo "$BIN"
	;;
*)
	echo "usage: $0 build|path" >&2
	exit 2
	;;
esac
