#!/usr/bin/env bash
# Regenerates every figure of README.md in one run: the benchmarks, each
# -count 6 (sub-benchmarks alternate within each count), the scale and
# heap tests, the Redis consumption ceiling, benchstat's tables and the
# load-curve plot. Raw output and tables go to data/ (or $1); load.svg
# beside this file. Needs benchstat
# (go install golang.org/x/perf/cmd/benchstat@latest), redis-server and
# redis-benchmark. Takes about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")"
out=${1:-data}
count=${COUNT:-6}
mkdir -p "$out"
run() { echo "+ $*" >&2; "$@"; }

# In process: the governed no-op read against the floor and failsafe-go,
# one retry, the sink path (slog, OTel) and allocations per event.
run go test -run '^$' -bench '^(BenchmarkGoverned|BenchmarkOneRetry|BenchmarkSlogSink|BenchmarkOTel|BenchmarkEventAllocs)$' \
	-benchtime 20000x -count "$count" . >"$out/engine.txt"
# Over loopback (Connect, gRPC, net/http) and net/http in process.
run go test -run '^$' -bench '^(BenchmarkConnectUnary|BenchmarkGRPCUnary|BenchmarkNetHTTP|BenchmarkNetHTTPLoopback)$' \
	-benchtime 2000x -count "$count" . >"$out/rpc.txt"
# The load curve: Connect bare vs governed at 1, 8, 64 and 256 callers.
run go test -run '^$' -bench '^BenchmarkConnectLoad$' -benchtime 3000x -count "$count" . >"$out/load.txt"
# 10,000 executions, 10,000 abandoned attempts, heap per in-flight call.
run go test -count=1 -run '^(TestScale|TestScaleAbandoned|TestHeapPerInFlightExecution)$' -v . >"$out/scale.txt"
# Approval consumption on real Redis.
run ./redis.sh >"$out/redis.txt"

{
	echo '## Governed vs floor, failsafe-go Get and GetAsync'
	benchstat -col '/impl@(floor agentsafe)' -filter 'BenchmarkGoverned' "$out/engine.txt"
	benchstat -col '/impl@(failsafe-go agentsafe)' -filter 'BenchmarkGoverned' "$out/engine.txt"
	benchstat -col '/impl@(failsafe-go-async agentsafe)' -filter 'BenchmarkGoverned' "$out/engine.txt"
	echo '## One retry, slog sink, OTel'
	benchstat -col '/impl@(failsafe-go agentsafe)' -filter 'BenchmarkOneRetry OR BenchmarkSlogSink OR BenchmarkOTel' "$out/engine.txt"
	echo '## Allocations per event'
	benchstat -col '/sink@(none one)' -filter 'BenchmarkEventAllocs' "$out/engine.txt"
	echo '## Connect and gRPC over loopback'
	benchstat -col '/server@(bare agentsafe)' -filter 'BenchmarkConnectUnary' "$out/rpc.txt"
	benchstat -col '/impl@(bare agentsafe)' -filter 'BenchmarkGRPCUnary' "$out/rpc.txt"
	benchstat -col '/impl@(go-grpc-middleware agentsafe)' -filter 'BenchmarkGRPCUnary' "$out/rpc.txt"
	echo '## net/http'
	benchstat -col '/impl@(bare agentsafe)' -filter 'BenchmarkNetHTTP OR BenchmarkNetHTTPLoopback' "$out/rpc.txt"
	echo '## Load curve'
	benchstat -col '/server@(bare agentsafe)' "$out/load.txt"
} >"$out/benchstat.txt" 2>&1
run go run ./cmd/loadplot "$out/load.txt" load.svg >"$out/load.md"
echo "done: $out/benchstat.txt, $out/load.md, $out/scale.txt, $out/redis.txt, load.svg" >&2
