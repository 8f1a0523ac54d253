#!/bin/sh
# Runs the connectrpc/conformance server suite against agentsafe's adapters:
# the conformance server of ./server, served by connect-go handlers
# (Connect, gRPC, gRPC-Web) and by grpc-go, each with agentsafe governing
# every procedure and without it. For each run it prints total, passed and
# failed cases, then how many executions the engine governed and how many
# runtime retries it made (a run without a retry did not exercise them),
# then sorts the cases that fail with agentsafe into causes (./triage).
#
# Usage, from anywhere: interop/run.sh [-full]
#
# By default it runs the CI check, which fits five minutes on two cores
# not saturated by other work (README.md, "Run"):
#   - with agentsafe, every feature of config-connect.yaml and
#     config-grpc.yaml except TLS, whose cases repeat the clear-text ones
#     over a transport agentsafe never sees;
#   - without agentsafe, only the cases whose outcome without it the check
#     needs: those of known-failing.txt, which must fail, and those that
#     failed with agentsafe, to tell an agentsafe failure from the
#     harness's own. A server with neither is not run without agentsafe.
# -full runs the whole matrix, TLS and client certificates included (twice
# the cases), and every case without agentsafe too.
#
# Exit status: non-zero if any case fails that is not listed in
# known-failing.txt, unless it is a known race of known-races.txt failing
# with the message listed for it (a race that is not agentsafe's: see
# README.md, "A race at the deadline"), or if a run made no runtime retry.
# Nothing is rerun: a case that fails once fails the check. The runner
# enforces the other half of known-failing.txt's rule (every entry must
# fail without agentsafe): it fails a run in which a listed case passes.
# A failure without agentsafe means the harness itself is wrong, or that
# the machine was too busy for the suite's timing: on two cores loaded by
# other builds, a call of the Deadline Propagation suite (2 s timeout) has
# been seen to time out.
#
# Needs only Go: the runner is installed at the pinned version into .bin/
# (GOBIN), next to the server; logs go to out/. Both are ignored by git.
set -eu

conformance=connectrpc.com/conformance/cmd/connectconformance
version=v1.0.5

start=$(date +%s)
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/.bin
out=$here/out
full=false
case ${1-} in
-full) full=true ;;
"") ;;
*)
	echo "usage: $0 [-full]" >&2
	exit 2
	;;
esac

mkdir -p "$bin" "$out"
if [ ! -x "$bin/connectconformance" ] ||
	[ "$(go version -m "$bin/connectconformance" | awk '$1 == "mod" { print $3 }')" != "$version" ]; then
	echo "installing $conformance@$version" >&2
	GOBIN=$bin go install "$conformance@$version"
fi
(cd "$here" && go build -o "$bin/server" ./server && go build -o "$bin/triage" ./triage)
echo "built in $(($(date +%s) - start))s"

# config IMPL prints the path of the config for IMPL's runs.
config() {
	if $full; then
		echo "$here/config-$1.yaml"
		return
	fi
	{
		cat "$here/config-$1.yaml"
		printf '# CI subset (run.sh without -full): no TLS.\nexcludeCases:\n  - useTls: true\n'
	} >"$out/config-$1.yaml"
	echo "$out/config-$1.yaml"
}

# run IMPL MODE CONF LOG [RUNNER FLAGS...] runs the suite once against
# `server -impl IMPL` (with agentsafe when MODE is agentsafe), prints the
# run's row, and returns the runner's exit status.
run() {
	impl=$1 mode=$2 conf=$3 log=$4
	shift 4
	flags=
	if [ "$mode" = agentsafe ]; then
		events=$out/$impl-events.txt
		flags="-agentsafe -events $events"
		rm -f "$events"
	fi
	t0=$(date +%s)
	rc=0
	"$bin/connectconformance" --mode server --conf "$conf" -v "$@" -- \
		"$bin/server" -impl "$impl" $flags >"$log" 2>&1 || rc=$?
	awk -v run="$impl $mode" -v secs=$(($(date +%s) - t0)) '
		/^Total cases: / { total = $3 }
		/^[0-9]+ passed, [0-9]+ failed$/ { passed = $1; failed = $3 }
		/^\(Another [0-9]+ failed as expected/ { known = $2 }
		END { printf "%-22s %7d %7d %7d %6d %5ds\n", run, total, passed, failed, known, secs }
	' "$log"
	return $rc
}

status=0
echo "run                      total  passed  failed  known   time"
for impl in connect grpc; do
	conf=$(config "$impl")
	# The runner rejects patterns that match nothing: see known-failing.txt.
	known=
	if [ "$impl" = grpc ]; then
		known=$here/known-failing.txt
	fi
	set --
	if [ -n "$known" ]; then
		set -- --known-failing "@$known"
	fi

	# A failed run passes only if every failing case is a known race,
	# failing with its listed message (triage -check).
	if ! run "$impl" agentsafe "$conf" "$out/$impl-agentsafe.log" "$@"; then
		"$bin/triage" -check -races "$here/known-races.txt" "$out/$impl-agentsafe.log" || status=1
	fi

	# Without agentsafe: every case (-full), or the cases the check needs.
	base=$out/$impl.log
	if ! $full; then
		cases=$out/$impl-plain-cases.txt
		{
			if [ -n "$known" ]; then
				grep -v -e '^#' -e '^$' "$known"
			fi
			awk '/^FAILED: / {
				name = substr($0, 9)
				sub(/:$/, "", name)
				sub(/ was expected to fail but did not$/, "", name)
				print name
			}' "$out/$impl-agentsafe.log"
		} >"$cases"
		if [ ! -s "$cases" ]; then
			printf '%-22s   (not run: nothing failed with agentsafe, no known failure)\n' "$impl plain"
			: >"$base"
			continue
		fi
		set -- "$@" --run "@$cases"
	fi
	if ! run "$impl" plain "$conf" "$base" "$@"; then
		status=1
		echo "  FAILS WITHOUT AGENTSAFE: the harness is wrong, known-failing.txt is stale, or the machine was too" >&2
		echo "  busy for the suite's timing (a 2 s Deadline Propagation call timing out); see $base" >&2
	fi
done

# Each server process appended its engine's event counts, one line.
echo
for impl in connect grpc; do
	if [ ! -s "$out/$impl-events.txt" ]; then
		echo "$impl agentsafe: the server wrote no event counts to $out/$impl-events.txt" >&2
		status=1
		continue
	fi
	awk -v impl="$impl" '
		{ for (i = 1; i <= NF; i++) { split($i, kv, "="); n[kv[1]] += kv[2] } }
		END {
			printf "%s agentsafe: %d executions governed (%d completed, %d failed, %d cancelled), %d runtime retries\n",
				impl, n["capability.requested"], n["capability.completed"], n["capability.failed"],
				n["capability.cancelled"], n["capability.retried"]
			if (n["capability.retried"] == 0) {
				print "  NO RUNTIME RETRY: the run did not exercise retries (see server/agentsafe.go)"
				exit 1
			}
		}
	' "$out/$impl-events.txt" || status=1
done

for impl in connect grpc; do
	echo
	echo "== $impl server with agentsafe: causes of the failing cases =="
	"$bin/triage" -adapter "$impl" -base "$out/$impl.log" -races "$here/known-races.txt" "$out/$impl-agentsafe.log" \
		>"$out/$impl-triage.txt" || status=1
	cat "$out/$impl-triage.txt"
done

echo
echo "wall time: $(($(date +%s) - start))s; logs in $out"
exit $status
