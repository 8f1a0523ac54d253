package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// testdata/races.log holds, from a run of the Timeouts cases, the known
// race as runs show it (copied from one) and three failures that must not
// pass for it: a listed case failing with another message, or with the
// race's message and another, and the race's message on a case that is not
// listed (HTTP/1.1).

const raceMessage = "connect error JSON: unexpected end of JSON input"

func TestKnownRacesListExactlyTheConnectHTTP2UnaryTimeouts(t *testing.T) {
	rs, err := parseRacesFile("../known-races.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := make(races)
	for _, codec := range []string{"CODEC_PROTO", "CODEC_JSON"} {
		for _, compression := range []string{"COMPRESSION_IDENTITY", "COMPRESSION_GZIP"} {
			for _, tls := range []string{"false", "true"} {
				name := fmt.Sprintf("Timeouts/HTTPVersion:2/Protocol:PROTOCOL_CONNECT/Codec:%s/Compression:%s/TLS:%s/unary", codec, compression, tls)
				want[name] = raceMessage
			}
		}
	}
	if !maps.Equal(rs, want) {
		t.Errorf("known-races.txt lists\n%s\nwant\n%s", dump(rs), dump(want))
	}
}

func dump(rs races) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(rs)) {
		fmt.Fprintf(&b, "\t%s: %s\n", name, rs[name])
	}
	return b.String()
}

func TestParseRacesReportsEveryProblem(t *testing.T) {
	_, err := parseRaces(strings.NewReader(`# comment
Timeouts/a/unary
message:
message: m
Timeouts/b/unary
Timeouts/b/unary
Timeouts/*/unary
`))
	if err == nil {
		t.Fatal("parseRaces accepted a list with four problems")
	}
	for _, s := range []string{
		`line 2: case "Timeouts/a/unary" comes before any "message:" line`,
		"line 3: empty message",
		`line 6: case "Timeouts/b/unary" is listed twice`,
		`line 7: "Timeouts/*/unary" is a pattern`,
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("parseRaces error lacks %q:\n%v", s, err)
		}
	}
}

// raceFixtures returns the real known-races.txt and the failures of
// testdata/races.log.
func raceFixtures(t *testing.T) (races, []failure) {
	t.Helper()
	rs, err := parseRacesFile("../known-races.txt")
	if err != nil {
		t.Fatal(err)
	}
	failing, err := parseFile("testdata/races.log")
	if err != nil {
		t.Fatal(err)
	}
	return rs, failing
}

func TestKnownRaceNeedsItsNameAndItsMessage(t *testing.T) {
	rs, failing := raceFixtures(t)
	known, other := rs.split(failing)
	var names []string
	for _, f := range known {
		names = append(names, f.name)
	}
	if want := []string{"Timeouts/HTTPVersion:2/Protocol:PROTOCOL_CONNECT/Codec:CODEC_PROTO/Compression:COMPRESSION_IDENTITY/TLS:false/unary"}; !slices.Equal(names, want) {
		t.Errorf("known races %q, want %q", names, want)
	}
	if len(other) != 3 {
		t.Errorf("%d other failures, want 3 (another message, another message too, a case not listed)", len(other))
	}
}

func TestCheck(t *testing.T) {
	rs, failing := raceFixtures(t)
	expected := failure{name: "gRPC Unexpected Requests/HTTPVersion:2/TLS:false/unary/no-request", lines: []string{"cardinality"}, known: true}
	for _, tc := range []struct {
		name    string
		failing []failure
		ok      bool
		say     string
	}{
		{"a known race alone passes", failing[:1], true, "known race (known-races.txt), not a failure: Timeouts/HTTPVersion:2/"},
		{"a known failure of the runner's own does not count", []failure{failing[0], expected}, true, ""},
		{"any other failure fails", failing, false, "3 failing case(s) not on known-races.txt"},
		{"a failed run without a failing case fails", nil, false, "no case did"},
		{"a failed run with only the runner's expected failures fails", []failure{expected}, false, "no case did"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if ok := check(&b, rs, tc.failing); ok != tc.ok {
				t.Errorf("check = %v, want %v:\n%s", ok, tc.ok, b.String())
			}
			if !strings.Contains(b.String(), tc.say) {
				t.Errorf("check wrote %q, want it to say %q", b.String(), tc.say)
			}
		})
	}
}

func TestReportNamesKnownRacesApart(t *testing.T) {
	rs, failing := raceFixtures(t)
	var b strings.Builder
	// The three other failures are agentsafe's to explain: no cause of
	// agentsafe's may claim the race's message.
	if n := report(&b, "connect", 12, failing, nil, rs); n != 3 {
		t.Errorf("report found %d unclassified failures, want 3:\n%s", n, b.String())
	}
	for _, s := range []string{
		"4 cases fail with agentsafe",
		"    1  by a known race, not agentsafe's",
		"by combination of causes (adds up to 3)",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
}
