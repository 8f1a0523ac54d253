package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/internal/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers())
}

// testdata/agentsafe.log holds failures copied from real runs before the
// adapters kept a handler's error unchanged (go-cmp's no-break spaces
// included) and one that no rule knows; testdata/base.log the one of them
// that fails without agentsafe too.

func TestCauses(t *testing.T) {
	failing, err := parseFile("testdata/agentsafe.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string // a part of the case's name
		want []string
	}{
		{"PROTOCOL_GRPC/Codec:CODEC_PROTO/Compression:COMPRESSION_GZIP/TLS:false/unary/unknown", []string{"unknown-concealed", "details-dropped", "detail-added-handler"}},
		// grpcadapter replaces the handler's details with its own ...
		{"PROTOCOL_GRPC/Codec:CODEC_PROTO/Compression:COMPRESSION_GZIP/TLS:false/unary/unavailable", []string{"details-dropped", "detail-added-handler"}},
		// ... connectadapter appends its own.
		{"PROTOCOL_CONNECT/Codec:CODEC_JSON/Compression:COMPRESSION_GZIP/TLS:false/unary/unavailable", []string{"detail-added-handler"}},
		{"gRPC Unexpected Requests/", []string{"cardinality"}},
		{"/unimplemented", []string{"detail-added-framework"}},
		{"Server Message Size/", []string{"detail-added-framework"}},
		{"Timeouts/", []string{"deadline-as-cancelled", "detail-added-handler"}},
		{"/unary/success", nil},
	} {
		i := slices.IndexFunc(failing, func(f failure) bool { return strings.Contains(f.name, tc.name) })
		if i < 0 {
			t.Errorf("%s: not in the log", tc.name)
			continue
		}
		var got []string
		for _, c := range causes {
			if c.match(failing[i]) {
				got = append(got, c.id)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: causes %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReport(t *testing.T) {
	failing, err := parseFile("testdata/agentsafe.log")
	if err != nil {
		t.Fatal(err)
	}
	base, err := parseFile("testdata/base.log")
	if err != nil {
		t.Fatal(err)
	}
	failsWithout := make(map[string]bool)
	for _, f := range base {
		failsWithout[f.name] = true
	}
	var b strings.Builder
	if n := report(&b, "grpc", 3, failing, failsWithout, nil); n != 1 {
		t.Errorf("report found %d unclassified failures, want 1", n)
	}
	out := b.String()
	for _, s := range []string{
		"8 cases fail with agentsafe, 1 of which fail without it too",
		"by combination of causes (adds up to 8)",
		"    1  UNCLASSIFIED\n",
		"UNCLASSIFIED: Basic/",
		"at: grpcadapter/server.go withoutRelayedDetail",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
}
