package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The race is rare and depends on the machine's load, so this checks only
// that the reproduction runs and reports, not what rate it finds; without
// a timer on the server, though, no call may fail.
func TestRunReports(t *testing.T) {
	for _, rht := range []time.Duration{20 * time.Millisecond, 0} {
		var b strings.Builder
		if err := run(64, 4, rht, 5*time.Millisecond, &b); err != nil {
			t.Fatal(err)
		}
		want := regexp.MustCompile(`^64 gRPC-Web client-stream calls over HTTP/1\.1, server ReadHeaderTimeout ` + regexp.QuoteMeta(rht.String()) +
			`: \d+ connections, \d+ closed by the server before their first request; \d+ calls failed \([\d.]+%\)\n`)
		if !want.MatchString(b.String()) {
			t.Errorf("run reported\n%s\nwant it to match %s", b.String(), want)
		}
		if rht == 0 && !strings.Contains(b.String(), "0 closed by the server before their first request; 0 calls failed") {
			t.Errorf("without a server timer, run reported\n%s", b.String())
		}
	}
}
