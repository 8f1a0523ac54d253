#!/bin/sh
# Regenerates interop/internal/gen from the .proto files of
# connectrpc.com/conformance at the version run.sh tests against:
#
#   connectrpc/conformance/v1/service.proto        -> protoc-gen-go, -connect-go, -go-grpc
#   connectrpc/conformance/v1/config.proto         -> protoc-gen-go
#   connectrpc/conformance/v1/server_compat.proto  -> protoc-gen-go
#
# (client_compat.proto and suite.proto are the runner's business, not a
# server's.) The conformance module keeps its own generated code internal,
# so a server under test generates its own.
#
# Usage, from anywhere: interop/generate.sh
#
# Needs only Go. The plugins and buf are installed at pinned versions into
# the same cache directory proto/generate.sh uses (AGENTSAFE_PROTOGEN_BIN
# overrides it); the module comes from the Go module proxy or cache. After
# that, generation uses no network, and running it twice gives identical
# output.
set -eu

conformance=connectrpc.com/conformance@v1.0.5

here=$(cd "$(dirname "$0")" && pwd)
bin=${AGENTSAFE_PROTOGEN_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/agentsafe-protogen/bin}

# tool NAME PACKAGE VERSION installs PACKAGE@VERSION as $bin/NAME unless that
# version is already there.
tool() {
	if [ -x "$bin/$1" ] &&
		[ "$(go version -m "$bin/$1" | awk '$1 == "mod" { print $3 }')" = "$3" ]; then
		return 0
	fi
	echo "installing $2@$3" >&2
	GOBIN=$bin go install "$2@$3"
}

mkdir -p "$bin"
tool buf github.com/bufbuild/buf/cmd/buf v1.75.0
tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go v1.36.12
tool protoc-gen-connect-go connectrpc.com/connect/cmd/protoc-gen-connect-go v1.21.1
tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2

# The module cache is read-only and the module's own buf.yaml names a
# remote module, so the three files are copied into a scratch module of
# their own. Paths inside it are the import paths, which is all the
# generated code records.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Outside any module, so that no go.mod or go.sum is touched.
moddir=$(cd "$scratch" && go mod download -json "$conformance" |
	awk -F'"' '$2 == "Dir" { print $4 }')
[ -n "$moddir" ] || { echo "generate.sh: cannot locate $conformance" >&2; exit 1; }
mkdir -p "$scratch/connectrpc/conformance/v1"
for f in service config server_compat; do
	cp "$moddir/proto/connectrpc/conformance/v1/$f.proto" "$scratch/connectrpc/conformance/v1/"
done
printf 'version: v2\n' >"$scratch/buf.yaml"

cd "$here"
# Remove the previous output first, so that nothing stale survives.
rm -rf internal/gen
PATH="$bin:$PATH" buf generate --template buf.gen.yaml "$scratch"
