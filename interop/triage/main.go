// Command triage sorts the failing cases of a connectconformance run with
// agentsafe into causes, each pointing at the adapter code responsible.
//
//	triage -adapter connect|grpc -base BASELINE.log [-races known-races.txt] [-tests N] AGENTSAFE.log
//	triage -check -races known-races.txt AGENTSAFE.log
//
// BASELINE.log is the runner's output for the same server and config
// without agentsafe. The cases that failed by a known race (-races: the
// case's name and its one message both listed) are named apart and sorted
// into no cause. With -check, triage only tells whether a run the runner
// failed failed by known races alone (exit 0) or not (exit 1): run.sh's
// check. A case can show several causes (an adapter that
// replaced a handler's details with its own showed two): each cause is
// counted once per case that shows it, and the combinations are listed so
// that their counts add up to the run's failing cases. A failure that
// matches no cause is listed in full: the rules below need a new entry.
//
// The causes are those the suite found in agentsafe before its adapters
// kept a handler's error unchanged; each now names the code that keeps
// the rule, so that a regression points there.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// cause is one reason a case fails with agentsafe.
type cause struct {
	id, title string
	// where names the code responsible, per adapter.
	where map[string]string
	// match reports whether a failing case shows the cause.
	match func(c failure) bool
}

var (
	reDetailCount = regexp.MustCompile(`actual error contain (\d+) details; expecting (\d+)`)
	// go-cmp's diffs put a no-break space after the -/+ at random, so
	// that no one parses them; these two lines are all that is read.
	reWantedType = regexp.MustCompile(`^[\s\x{a0}]*-[\s\x{a0}]+"([\w.]+)",$`)
	reGotType    = regexp.MustCompile(`^[\s\x{a0}]*\+[\s\x{a0}]+"([\w.]+)",$`)
)

const ourDetail = "agentsafe.v1.ErrorDetail"

var causes = []cause{
	{
		id:    "cardinality",
		title: "grpc-go answers a cardinality violation with INTERNAL; the suite expects UNIMPLEMENTED (fails without agentsafe too: known-failing.txt)",
		where: map[string]string{"grpc": "google.golang.org/grpc stream.go (*serverStream).RecvMsg, not agentsafe"},
		match: func(c failure) bool { return c.has("cardinality violation") },
	},
	{
		id:    "unknown-concealed",
		title: "a handler's own codes.Unknown status is concealed as INTERNAL \"the operation failed\"",
		where: map[string]string{
			"grpc":    "grpcadapter/server.go grpcStatus (a status error, codes.Unknown included, is gRPC's own) and wireError (adapter.HandlerError: passed unchanged)",
			"connect": "connectadapter/interceptor.go status (a *connect.Error is Connect's own) and wire.go wireError (adapter.HandlerError: passed unchanged)",
		},
		match: func(c failure) bool {
			return c.has(`{code: 13 (internal), message: "the operation failed"} does not match expected code 2 (unknown)`)
		},
	},
	{
		id:    "deadline-as-cancelled",
		title: "the caller's own deadline is answered CANCELLED at the moment it passes, racing the client's own deadline",
		where: map[string]string{
			"connect": "middleware/adapter/wire.go RPCCode (CANCELLED caused by the caller's deadline is DeadlineExceeded), written by connectadapter/wire.go wireError",
			"grpc":    "middleware/adapter/wire.go RPCCode (CANCELLED caused by the caller's deadline is DeadlineExceeded), written by grpcadapter/server.go wireError",
		},
		match: func(c failure) bool {
			return c.has(`message: "the caller cancelled the call"} does not match expected code 4`)
		},
	},
	{
		id:    "details-dropped",
		title: "the handler's own error details (RequestInfo, google.rpc.* and others) are dropped",
		where: map[string]string{
			"grpc":    "grpcadapter/server.go withoutRelayedDetail: drops only an agentsafe.v1.ErrorDetail from the handler's status",
			"connect": "connectadapter/wire.go ownError: copies every detail but an agentsafe.v1.ErrorDetail",
		},
		match: func(c failure) bool {
			if a, e, ok := c.detailCount(); ok && a < e {
				return true
			}
			for _, p := range c.detailDiffs() {
				if p[0] != ourDetail && p[1] == ourDetail {
					return true
				}
			}
			return false
		},
	},
	{
		id:    "detail-added-handler",
		title: "an agentsafe.v1.ErrorDetail is added to the error the handler returned on purpose; the suite compares details, and its Connect client cannot resolve the type of the detail's JSON \"debug\" form",
		where: detailAddedAt,
		match: func(c failure) bool { return detailAdded(c) && !frameworkRaised(c) },
	},
	{
		id:    "detail-added-framework",
		title: "an agentsafe.v1.ErrorDetail is added to an error the framework raised (unimplemented method, message over the receive limit, bad stream framing) while the handler read its stream",
		where: detailAddedAt,
		match: func(c failure) bool { return detailAdded(c) && frameworkRaised(c) },
	},
}

var detailAddedAt = map[string]string{
	"connect": "middleware/adapter/execute.go CarriesDetail (false for Connect's own errors, as connectadapter/interceptor.go status recognizes them, and for CANCELLED), read by connectadapter/wire.go wireError",
	"grpc":    "middleware/adapter/execute.go CarriesDetail (false for gRPC's own errors, as grpcadapter/server.go grpcStatus recognizes them, and for CANCELLED), read by grpcadapter/server.go wireError",
}

func detailAdded(c failure) bool {
	if c.has(`could not be resolved`) && c.has(ourDetail) {
		return true
	}
	if a, e, ok := c.detailCount(); ok && a > e {
		return true
	}
	for _, p := range c.detailDiffs() {
		if p[1] == ourDetail {
			return true
		}
	}
	return false
}

// frameworkRaised reports whether the case's error comes from the
// framework rather than from the conformance handler: the generated
// Unimplemented stub, or a stream's Receive failing on a message over the
// limit or on framing the protocol does not allow.
func frameworkRaised(c failure) bool {
	return c.test() == "unimplemented" && c.suite() == "Basic" ||
		c.suite() == "Server Message Size" ||
		strings.HasSuffix(c.suite(), " Unexpected Requests")
}

// failure is one failing case of a run: its name and what the runner
// printed about it.
type failure struct {
	name  string
	lines []string
	known bool // reported as failing as expected (known-failing.txt)
}

func (c failure) has(s string) bool {
	for _, l := range c.lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func (c failure) suite() string { return strings.SplitN(c.name, "/", 2)[0] }

// test is the case's name without its suite and permutation components.
func (c failure) test() string {
	parts := strings.Split(c.name, "/")
	i := 1
	for i < len(parts) && (strings.Contains(parts[i], ":") || strings.HasPrefix(parts[i], "(")) {
		i++
	}
	return strings.Join(parts[i:], "/")
}

func (c failure) detailCount() (actual, expected int, ok bool) {
	for _, l := range c.lines {
		if m := reDetailCount.FindStringSubmatch(l); m != nil {
			actual, _ = strconv.Atoi(m[1])
			expected, _ = strconv.Atoi(m[2])
			return actual, expected, true
		}
	}
	return 0, 0, false
}

// detailDiffs returns, for every mismatching detail, the wanted and the
// actual type names, from the runner's diff of the two Any messages.
func (c failure) detailDiffs() [][2]string {
	var out [][2]string
	var wanted string
	for _, l := range c.lines {
		if m := reWantedType.FindStringSubmatch(l); m != nil {
			wanted = m[1]
		}
		if m := reGotType.FindStringSubmatch(l); m != nil && wanted != "" {
			out = append(out, [2]string{wanted, m[1]})
			wanted = ""
		}
	}
	return out
}

// parse reads the failing cases of a runner log, expected ones included.
func parse(r io.Reader) ([]failure, error) {
	var out []failure
	var cur *failure
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "FAILED: "):
			name := strings.TrimSuffix(strings.TrimPrefix(l, "FAILED: "), ":")
			var extra []string
			if n, ok := strings.CutSuffix(name, " was expected to fail but did not"); ok {
				name, extra = n, []string{"expected to fail but did not"}
			}
			out = append(out, failure{name: name, lines: extra})
			cur = &out[len(out)-1]
		case strings.HasPrefix(l, "INFO: ") && strings.HasSuffix(l, " failed (as expected):"):
			name := strings.TrimSuffix(strings.TrimPrefix(l, "INFO: "), " failed (as expected):")
			out = append(out, failure{name: name, known: true})
			cur = &out[len(out)-1]
		case strings.HasPrefix(l, "\t") && cur != nil:
			cur.lines = append(cur.lines, strings.TrimPrefix(l, "\t"))
		default:
			cur = nil
		}
	}
	return out, sc.Err()
}

func main() {
	adapter := flag.String("adapter", "", "the adapter under test: connect or grpc (selects the code pointers)")
	base := flag.String("base", "", "the runner's log of the same server without agentsafe")
	racesFile := flag.String("races", "", "the known races (known-races.txt): cases that may fail with the message listed for them")
	checkOnly := flag.Bool("check", false, "with -races: exit 0 if every failing case is a known race, 1 if not")
	show := flag.Int("tests", 12, "how many test cases to name per cause")
	flag.Parse()
	usage := func() {
		fmt.Fprintln(os.Stderr, "usage: triage -adapter connect|grpc -base BASELINE.log [-races known-races.txt] [-tests N] AGENTSAFE.log")
		fmt.Fprintln(os.Stderr, "       triage -check -races known-races.txt AGENTSAFE.log")
		os.Exit(2)
	}
	if flag.NArg() != 1 {
		usage()
	}
	rs := races{}
	if *racesFile != "" {
		var err error
		if rs, err = parseRacesFile(*racesFile); err != nil {
			fmt.Fprintln(os.Stderr, "triage:", err)
			os.Exit(1)
		}
	}
	if *checkOnly {
		if *racesFile == "" {
			usage()
		}
		failing, err := parseFile(flag.Arg(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, "triage:", err)
			os.Exit(1)
		}
		if !check(os.Stdout, rs, failing) {
			os.Exit(1)
		}
		return
	}
	if *base == "" || (*adapter != "connect" && *adapter != "grpc") {
		usage()
	}
	baseFailures, err := parseFile(*base)
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage:", err)
		os.Exit(1)
	}
	failing, err := parseFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage:", err)
		os.Exit(1)
	}
	failsWithout := make(map[string]bool)
	for _, f := range baseFailures {
		failsWithout[f.name] = true
	}
	if unclassified := report(os.Stdout, *adapter, *show, failing, failsWithout, rs); unclassified > 0 {
		os.Exit(1)
	}
}

func parseFile(path string) ([]failure, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parse(f)
}

// report writes the causes of the failing cases, the known races of rs
// apart, and returns how many matched none.
func report(w io.Writer, adapter string, show int, failing []failure, failsWithout map[string]bool, rs races) int {
	counts := make(map[string]int)
	suites := make(map[string]map[string]int)
	combos := make(map[string]int)
	var unclassified []failure
	both := 0
	for _, f := range failing {
		if failsWithout[f.name] {
			both++
		}
	}
	known, failing := rs.split(failing)
	for _, f := range failing {
		var ids []string
		for _, c := range causes {
			if c.match(f) {
				ids = append(ids, c.id)
				counts[c.id]++
				if suites[c.id] == nil {
					suites[c.id] = make(map[string]int)
				}
				suites[c.id][f.suite()+": "+f.test()]++
			}
		}
		if len(ids) == 0 {
			unclassified = append(unclassified, f)
			ids = []string{"UNCLASSIFIED"}
		}
		combos[strings.Join(ids, " + ")]++
	}
	fmt.Fprintf(w, "%d cases fail with agentsafe, %d of which fail without it too (known-failing.txt)\n", len(failing)+len(known), both)
	if len(known) > 0 {
		fmt.Fprintf(w, "\n%5d  by a known race, not agentsafe's (known-races.txt; README.md, \"A race at the deadline\"):\n", len(known))
		for _, f := range known {
			fmt.Fprintf(w, "       %s: %s\n", f.name, rs[f.name])
		}
	}
	for _, c := range causes {
		if counts[c.id] == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%5d  [%s] %s\n", counts[c.id], c.id, c.title)
		fmt.Fprintf(w, "       at: %s\n", c.where[adapter])
		tests := slices.Sorted(maps.Keys(suites[c.id]))
		for i, t := range tests {
			if i == show {
				fmt.Fprintf(w, "       ... and %d more test cases\n", len(tests)-show)
				break
			}
			fmt.Fprintf(w, "       %4d  %s\n", suites[c.id][t], t)
		}
	}
	fmt.Fprintf(w, "\nby combination of causes (adds up to %d):\n", len(failing))
	for _, k := range slices.Sorted(maps.Keys(combos)) {
		fmt.Fprintf(w, "%5d  %s\n", combos[k], k)
	}
	for _, f := range unclassified {
		fmt.Fprintf(w, "\nUNCLASSIFIED: %s\n\t%s\n", f.name, strings.Join(f.lines, "\n\t"))
	}
	return len(unclassified)
}
