#!/usr/bin/env bash
# Approval consumption on real PostgreSQL: agentsafepg's Consume against a
# bare UPDATE … RETURNING through pgx, in the same run.
#
# Starts a throwaway cluster (initdb in a temporary directory, the
# postmaster on a free loopback port, fsync off; as the postgres user when
# run as root, since initdb refuses root), runs TestPostgresConsumeRatio
# against it, and removes it. Needs Debian's postgresql package (or initdb
# and postgres on PATH).
set -euo pipefail
cd "$(dirname "$0")"

bin=$(dirname "$(command -v initdb 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as=()
if [ "$(id -u)" = 0 ]; then
	chown postgres "$dir"
	as=(runuser -u postgres --)
fi
stop() {
	"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap stop EXIT
"${as[@]}" "$bin/initdb" -D "$dir/data" -A trust -U agentsafe -E UTF8 --locale=C --no-sync >/dev/null
"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
	-o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null

export AGENTSAFE_BENCH_POSTGRES="postgres://agentsafe@127.0.0.1:$port/postgres?sslmode=disable"
if [ $# -gt 0 ]; then
	go test "$@" . # e.g. ./pg.sh -run '^$' -bench PostgresConsume -benchtime 2000x -count 6
else
	go test -run '^TestPostgresConsumeRatio$' -count=1 -v . | sed -n 's/^ *pg_test.go:[0-9]*: //p'
fi
