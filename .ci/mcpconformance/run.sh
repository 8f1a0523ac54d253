#!/bin/sh
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance,
# pinned below; it needs node 22 or later) against the refund demo's /mcp,
# and fails on any failed check of a scenario that applies to it.
# scenarios.txt lists every scenario of the suite: which apply, and why
# the others do not (they call the suite's own fixture tools, prompts and
# resources, or capabilities the bridge does not declare).
#
# Usage, from anywhere: .ci/mcpconformance/run.sh
#
# Needs Go and npm. When the machine's node is older than 22, node 22 is
# installed from the npm registry next to the suite, into .node/ (ignored
# by git, reused by later runs); the suite's results and logs go to out/.
# About half a minute the first time (npm), a few seconds after.
set -eu

version=0.1.16
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=$here/.node
out=$here/out
suite=$cache/node_modules/@modelcontextprotocol/conformance

if ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
node=node
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
packages=""
if [ "$major" -lt 22 ]; then
	node=$cache/node_modules/.bin/node
	[ -x "$node" ] || packages="node@22"
fi
if ! grep -qs "\"version\": \"$version\"" "$suite/package.json"; then
	packages="$packages @modelcontextprotocol/conformance@$version"
fi
if [ -n "$packages" ]; then
	echo "installing $packages" >&2
	mkdir -p "$cache"
	# shellcheck disable=SC2086 # one word per package
	npm install --prefix "$cache" --no-audit --no-fund --loglevel=error $packages
fi
echo "node $("$node" --version), conformance $version"

mkdir -p "$out"
(cd "$root" && go build -o "$out/refund" ./examples/refund)
cd "$root" && go vet ./.ci/mcpconformance && go run ./.ci/mcpconformance -node "$node" -suite "$suite/dist/index.js" \
	-demo "$out/refund" -list "$here/scenarios.txt" -out "$out/run"
