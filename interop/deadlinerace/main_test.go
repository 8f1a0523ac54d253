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
// that the reproduction runs and reports, not what rate it finds.
func TestRunReports(t *testing.T) {
	for _, http1 := range []bool{false, true} {
		var b strings.Builder
		if err := run(16, 4, 20*time.Millisecond, http1, &b); err != nil {
			t.Fatal(err)
		}
		proto := map[bool]string{false: `HTTP/2`, true: `HTTP/1\.1`}[http1]
		want := regexp.MustCompile(`^16 calls over ` + proto + ` with a 20ms deadline: \d+ got the server's error headers, \d+ of them a cut JSON body \([\d.]+% of the calls\)\n` +
			`  relative to the client's deadline, the server answered at .+\n` +
			`  and the client had the headers in hand at .+\n`)
		if !want.MatchString(b.String()) {
			t.Errorf("run reported\n%s\nwant it to match %s", b.String(), want)
		}
	}
}
