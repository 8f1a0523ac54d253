#!/usr/bin/env bash
# Approval consumption on real Redis against the redis-benchmark ceiling.
#
# Starts its own redis-server on a free loopback port (through the test
# helper), then alternates, five rounds at concurrency 1 and 64:
#   redis-benchmark running EVALSHA of a minimal check-then-write Lua script,
#   go-redis running the same script,
#   approvalstore.Redis.Consume,
# and prints ops/s, p50 and p99 and the ratios. Needs redis-server and
# redis-benchmark (Debian: apt-get install redis-server redis-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTSAFE_BENCH_REDIS=1 AGENTSAFE_REQUIRE_REDIS=1 \
	go test -run '^TestConsumeCeiling$' -count=1 -v ./approvalstore/ |
	sed -n 's/^ *redis_bench_test.go:[0-9]*: //p'
