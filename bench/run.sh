#!/usr/bin/env bash
# Regenerates every figure of README.md in one run: the benchmarks, each
# in 10 rounds of one process each (so sub-benchmarks alternate), the scale and
# heap tests, the Redis consumption ceiling, benchstat's tables and the
# load-curve plot. Raw output and tables go to data/ (or $1); load.svg
# beside this file. Needs benchstat
# (go install golang.org/x/perf/cmd/benchstat@latest), redis-server and
# redis-benchmark. Takes about 10 minutes on 2 quiet cores.
set -euo pipefail
cd "$(dirname "$0")"
out=${1:-data}
count=${COUNT:-10}
mkdir -p "$out"
run() { echo "+ $*" >&2; "$@"; }

# rounds FILE PATTERN BENCHTIME [ENV...] appends $count rounds of the
# benchmarks PATTERN to FILE, one process per round, so that the
# sub-benchmarks compared take turns: within one process, -count repeats
# one sub-benchmark before the next, and a change of load between them
# would move the ratio. The test binary is built once.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/bench.test" .
rounds() {
	local file=$1 pattern=$2 benchtime=$3
	shift 3
	echo "+ $count rounds of $pattern ($benchtime)" >&2
	for _ in $(seq "$count"); do
		env "$@" "$bin/bench.test" -test.run '^$' -test.bench "$pattern" \
			-test.benchtime "$benchtime" -test.count 1 >>"$out/$file"
	done
}

# In process: the governed no-op read against the floor and failsafe-go
# (and, Inline, against failsafe-go's Get), one retry, the sink path (slog
# with its worker and with SinkInline, OTel) and allocations per event.
# The sinks at fewer calls per run: a run measures its queue's backlog too
# (see drained in events_test.go), which grows with the run's length.
: >"$out/engine.txt"
rounds engine.txt '^(BenchmarkGoverned|BenchmarkOneRetry)$' 200000x
rounds engine.txt '^(BenchmarkSlogSink|BenchmarkOTel|BenchmarkEventAllocs)$' 20000x
# Over loopback (Connect, gRPC, net/http) and net/http in process.
: >"$out/rpc.txt"
rounds rpc.txt '^(BenchmarkConnectUnary|BenchmarkGRPCUnary|BenchmarkNetHTTP|BenchmarkNetHTTPLoopback)$' 10000x
# The load curve: Connect bare vs governed at 1, 8, 64 and 256 callers.
: >"$out/load.txt"
rounds load.txt '^BenchmarkConnectLoad$' 3000x
# Strict audit under load: 64 callers against a sink that takes 5 ms a
# write, group commit (BatchAuditSink) vs one record a write.
: >"$out/audit.txt"
rounds audit.txt '^BenchmarkStrictAudit$' 3000x
# The tamper-evident trail: a governed call with a chained strict sink vs
# an unchained one (in process, and over Connect), and audit verify over
# a 200,000-record file.
: >"$out/chain.txt"
rounds chain.txt '^(BenchmarkAuditChain|BenchmarkAuditChainConnect)$' 10000x
run go test -run '^$' -bench '^BenchmarkAuditVerify$' -benchtime 3x -count 3 . >>"$out/chain.txt"
# 10,000 executions, 10,000 abandoned attempts, heap per in-flight call.
run go test -count=1 -run '^(TestScale|TestScaleAbandoned|TestHeapPerInFlightExecution)$' -v . >"$out/scale.txt"
# Approval consumption on real Redis.
run ./redis.sh >"$out/redis.txt"
# Budgets: a governed call with one budget on the memory store against the
# same call without (in process, and Connect over loopback); the Redis
# Reserve against go-redis running the least trim-sum-add script.
: >"$out/budgets.txt"
rounds budgets.txt '^BenchmarkBudget$' 200000x
rounds budgets.txt '^BenchmarkBudgetConnect$' 10000x
rounds budgets.txt '^BenchmarkReserve$' 4000x AGENTSAFE_REQUIRE_REDIS=1
# A resume with a preview against one without, alternating, memory and Redis.
AGENTSAFE_BENCH_PREVIEW=1 AGENTSAFE_REQUIRE_REDIS=1 run go test -count=1 -run '^TestPreviewTarget$' -v . |
	sed -n 's/^ *preview_test.go:[0-9]*: //p' >"$out/preview.txt"

{
	echo '## Governed vs floor, failsafe-go Get and GetAsync'
	benchstat -col '/impl@(floor agentsafe)' -filter '.name:Governed' "$out/engine.txt"
	benchstat -col '/impl@(failsafe-go agentsafe)' -filter '.name:Governed' "$out/engine.txt"
	benchstat -col '/impl@(failsafe-go-async agentsafe)' -filter '.name:Governed' "$out/engine.txt"
	echo '## Inline: governed vs failsafe-go Get; slog with SinkInline; OTel'
	benchstat -col '/impl@(failsafe-go agentsafe-inline)' -filter '.name:(Governed OR OTel)' "$out/engine.txt"
	benchstat -col '/impl@(failsafe-go agentsafe-sinkinline agentsafe-inline)' -filter '.name:SlogSink' "$out/engine.txt"
	echo '## One retry, slog sink, OTel'
	benchstat -col '/impl@(failsafe-go agentsafe)' -filter '.name:(OneRetry OR SlogSink OR OTel)' "$out/engine.txt"
	echo '## Allocations per event'
	benchstat -col '/sink@(none one)' -filter '.name:EventAllocs' "$out/engine.txt"
	echo '## Connect and gRPC over loopback'
	benchstat -col '/server@(bare agentsafe agentsafe-inline)' -filter '.name:ConnectUnary' "$out/rpc.txt"
	benchstat -col '/impl@(bare agentsafe agentsafe-inline)' -filter '.name:GRPCUnary' "$out/rpc.txt"
	benchstat -col '/impl@(go-grpc-middleware agentsafe agentsafe-inline)' -filter '.name:GRPCUnary' "$out/rpc.txt"
	echo '## net/http'
	benchstat -col '/impl@(bare agentsafe agentsafe-inline)' -filter '.name:(NetHTTP OR NetHTTPLoopback)' "$out/rpc.txt"
	benchstat -col '/impl@(timeouthandler agentsafe agentsafe-inline)' -filter '.name:NetHTTP' "$out/rpc.txt"
	echo '## Budgets'
	benchstat -col '/impl@(none budget)' -filter '.name:(Budget OR BudgetConnect)' "$out/budgets.txt"
	benchstat -col '/impl@(script reserve)' -filter '.name:Reserve' "$out/budgets.txt"
	echo '## Load curve'
	benchstat -col '/server@(bare agentsafe)' "$out/load.txt"
	echo '## Strict audit under load'
	benchstat -col '/sink@(record batch)' "$out/audit.txt"
	echo '## The chained trail'
	benchstat -col '/sink@(unchained chained)' -filter '.name:(AuditChain OR AuditChainConnect)' "$out/chain.txt"
	benchstat -filter '.name:AuditVerify' "$out/chain.txt"
} >"$out/benchstat.txt" 2>&1
# Every ratio against its goal: medians of the runs, wall time (ns/op)
# and the process's CPU time (cpu-ns/op).
ratios() {
	local file=$1 num=$2 den=$3 label=$4 goal=$5
	go run ./cmd/ratio "$out/$file" ns/op "$num" "$den" "$label, time" "$goal"
	go run ./cmd/ratio "$out/$file" cpu-ns/op "$num" "$den" "$label, CPU" "$goal"
}
{
	echo '| figure | agentsafe / peer (medians) | ratio | goal | |'
	echo '|---|---|---|---|---|'
	ratios engine.txt BenchmarkGoverned/impl=agentsafe BenchmarkGoverned/impl=floor 'governed no-op read / floor' '<=1.1'
	ratios engine.txt BenchmarkGoverned/impl=agentsafe BenchmarkGoverned/impl=failsafe-go 'governed no-op read / failsafe-go Get' '<=1.0'
	ratios engine.txt BenchmarkGoverned/impl=agentsafe BenchmarkGoverned/impl=failsafe-go-async 'governed no-op read / failsafe-go GetAsync' '<=0.5'
	ratios engine.txt BenchmarkGoverned/impl=agentsafe-inline BenchmarkGoverned/impl=failsafe-go 'Inline governed no-op read / failsafe-go Get' '<=1.0'
	ratios engine.txt BenchmarkOneRetry/impl=agentsafe BenchmarkOneRetry/impl=failsafe-go 'one retry / failsafe-go' '-'
	ratios engine.txt BenchmarkSlogSink/impl=agentsafe BenchmarkSlogSink/impl=failsafe-go 'slog sink / failsafe-go listeners logging the same' '<=1.3'
	ratios engine.txt BenchmarkSlogSink/impl=agentsafe-sinkinline BenchmarkSlogSink/impl=failsafe-go 'slog sink with SinkInline / failsafe-go listeners logging the same' '<=1.3'
	ratios engine.txt BenchmarkSlogSink/impl=agentsafe-inline BenchmarkSlogSink/impl=failsafe-go 'slog sink with SinkInline, Inline capability / failsafe-go listeners logging the same' '<=1.3'
	ratios engine.txt BenchmarkOTel/impl=agentsafe BenchmarkOTel/impl=failsafe-go 'agentsafeotel / failsafe-go hand-written spans+metrics' '<=1.5'
	ratios engine.txt BenchmarkOTel/impl=agentsafe-inline BenchmarkOTel/impl=failsafe-go 'agentsafeotel, Inline capability / failsafe-go hand-written spans+metrics' '<=1.5'
	ratios rpc.txt BenchmarkConnectUnary/server=agentsafe BenchmarkConnectUnary/server=bare 'Connect unary, loopback / bare' '<=1.1'
	ratios rpc.txt BenchmarkConnectUnary/server=agentsafe-inline BenchmarkConnectUnary/server=bare 'Connect unary, loopback, Inline / bare' '<=1.05'
	ratios rpc.txt BenchmarkGRPCUnary/impl=agentsafe BenchmarkGRPCUnary/impl=bare 'gRPC unary, loopback / bare' '-'
	ratios rpc.txt BenchmarkGRPCUnary/impl=agentsafe BenchmarkGRPCUnary/impl=go-grpc-middleware 'gRPC unary, loopback / go-grpc-middleware retry+timeout' '-'
	ratios rpc.txt BenchmarkGRPCUnary/impl=agentsafe-inline BenchmarkGRPCUnary/impl=bare 'gRPC unary, loopback, Inline / bare' '<=1.2'
	ratios rpc.txt BenchmarkGRPCUnary/impl=agentsafe-inline BenchmarkGRPCUnary/impl=go-grpc-middleware 'gRPC unary, loopback, Inline / go-grpc-middleware retry+timeout' '<=1.0'
	ratios rpc.txt BenchmarkNetHTTP/body=1KiB/impl=agentsafe BenchmarkNetHTTP/body=1KiB/impl=bare 'net/http in process, 1 KiB / bare' '-'
	ratios rpc.txt BenchmarkNetHTTP/body=64KiB/impl=agentsafe BenchmarkNetHTTP/body=64KiB/impl=bare 'net/http in process, 64 KiB / bare' '-'
	ratios rpc.txt BenchmarkNetHTTP/body=1KiB/impl=agentsafe-inline BenchmarkNetHTTP/body=1KiB/impl=bare 'net/http in process, Inline, 1 KiB / bare' '<=2'
	ratios rpc.txt BenchmarkNetHTTP/body=64KiB/impl=agentsafe-inline BenchmarkNetHTTP/body=64KiB/impl=bare 'net/http in process, Inline, 64 KiB / bare' '<=2'
	ratios rpc.txt BenchmarkNetHTTP/body=1KiB/impl=agentsafe BenchmarkNetHTTP/body=1KiB/impl=timeouthandler 'net/http in process, 1 KiB / http.TimeoutHandler + go-retry' '<=1.0'
	ratios rpc.txt BenchmarkNetHTTP/body=64KiB/impl=agentsafe BenchmarkNetHTTP/body=64KiB/impl=timeouthandler 'net/http in process, 64 KiB / http.TimeoutHandler + go-retry' '<=1.0'
	ratios rpc.txt BenchmarkNetHTTPLoopback/body=1KiB/impl=agentsafe BenchmarkNetHTTPLoopback/body=1KiB/impl=bare 'net/http loopback, 1 KiB / bare' '<=1.1'
	ratios rpc.txt BenchmarkNetHTTPLoopback/body=64KiB/impl=agentsafe BenchmarkNetHTTPLoopback/body=64KiB/impl=bare 'net/http loopback, 64 KiB / bare' '<=1.1'
	ratios rpc.txt BenchmarkNetHTTPLoopback/body=1KiB/impl=agentsafe-inline BenchmarkNetHTTPLoopback/body=1KiB/impl=bare 'net/http loopback, Inline, 1 KiB / bare' '-'
	ratios rpc.txt BenchmarkNetHTTPLoopback/body=64KiB/impl=agentsafe-inline BenchmarkNetHTTPLoopback/body=64KiB/impl=bare 'net/http loopback, Inline, 64 KiB / bare' '-'
	ratios budgets.txt BenchmarkBudget/impl=budget BenchmarkBudget/impl=none 'governed no-op write in process, one budget (memory) / none' '<=1.15'
	ratios budgets.txt BenchmarkBudgetConnect/impl=budget BenchmarkBudgetConnect/impl=none 'governed Connect call, one budget (memory) / none' '<=1.15'
	go run ./cmd/ratio "$out/budgets.txt" ops/s BenchmarkReserve/c=1/impl=reserve BenchmarkReserve/c=1/impl=script 'Redis Reserve / window script, c=1, ops/s' '>=0.8'
	go run ./cmd/ratio "$out/budgets.txt" ops/s BenchmarkReserve/c=64/impl=reserve BenchmarkReserve/c=64/impl=script 'Redis Reserve / window script, c=64, ops/s' '>=0.8'
	ratios chain.txt BenchmarkAuditChain/sink=chained BenchmarkAuditChain/sink=unchained 'governed call, chained strict JSON Lines sink / unchained, in process' '<=1.1'
	ratios chain.txt BenchmarkAuditChainConnect/sink=chained BenchmarkAuditChainConnect/sink=unchained 'governed Connect call, chained strict sink / unchained, loopback' '<=1.1'
} >"$out/ratios.md"
run go run ./cmd/loadplot "$out/load.txt" load.svg >"$out/load.md"
echo "done: $out/ratios.md, $out/benchstat.txt, $out/load.md, $out/audit.txt, $out/chain.txt, $out/scale.txt, $out/redis.txt, $out/preview.txt, load.svg" >&2
