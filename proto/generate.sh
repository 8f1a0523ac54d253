#!/bin/sh
# Regenerates the committed Go code for agentsafe's protobuf sources:
#
#   proto/agentsafe/v1/*.proto        -> protoc-gen-go
#   internal/testproto/testv1/*.proto -> protoc-gen-go, -connect-go, -twirp, -go-grpc
#   examples/proto/orders/v1/*.proto  -> the same, into examples/internal/gen
#
# Usage, from anywhere: proto/generate.sh
#
# Needs only Go. It installs buf and the plugins at pinned versions into a
# cache directory of its own (AGENTSAFE_PROTOGEN_BIN overrides it), so tools
# of other versions on PATH do not matter. Once they are installed (the first
# run builds buf, about 3 minutes), generation uses no network. Running it
# twice gives identical output.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
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
tool protoc-gen-twirp github.com/twitchtv/twirp/protoc-gen-twirp v8.1.3+incompatible
tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2

cd "$root"
# Remove the previous output first, so that nothing stale survives a renamed
# or deleted .proto file.
find proto internal/testproto examples/internal/gen -type f \
	\( -name '*.pb.go' -o -name '*.connect.go' -o -name '*.twirp.go' \) -exec rm -f {} +
PATH="$bin:$PATH" buf generate --config proto/buf.yaml --template proto/buf.gen.yaml .
