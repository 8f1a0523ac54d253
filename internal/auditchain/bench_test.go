package auditchain

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// BenchmarkVerifyFile verifies a trail of 100,000 records of a typical
// shape, reporting records/s.
func BenchmarkVerifyFile(b *testing.B) {
	const n = 100_000
	path := filepath.Join(b.TempDir(), "trail.jsonl")
	w := NewWriter(Config{}, time.Now())
	var out bytes.Buffer
	e := middleware.Event{Type: middleware.EventCompleted, Time: time.Now(), ExecutionID: "exe_0123456789abcdef0123456789abcdef",
		Procedure: "/orders.v1.OrderService/RefundOrder", Actor: middleware.ActorRef{ID: "agent-7", Tenant: "acme"},
		InputDigest: "hmac-sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", SideEffect: middleware.SideEffectExternal,
		Risk: middleware.RiskHigh, Attempts: 1, Duration: 1234 * time.Microsecond, ApprovalID: "apr_0123456789abcdef0123456789abcdef"}
	for range n {
		ss := w.Seal(nil, []Record{FromEvent(e)}, true)
		out.Write(w.Lines())
		w.Commit(ss)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(out.Len()))
	b.ResetTimer()
	start := cpuTime()
	for b.Loop() {
		v := NewVerifier(nil, nil)
		if err := VerifyFile(path, v); err != nil {
			b.Fatal(err)
		}
		if r := v.Finish(); r.Tampered() || r.Records != n+n/DefaultEvery {
			b.Fatalf("%+v", r)
		}
	}
	b.ReportMetric(float64(n+n/DefaultEvery)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/float64(n+n/DefaultEvery), "cpu-ns/record")
}

// cpuTime is the process's user and system CPU time: wall time on a
// shared machine says little.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendString: a record's strings as RFC 8785 writes them, eight
// bytes at a time (words) against a byte at a time (bytes: the path for
// a string that is not valid UTF-8).
func BenchmarkAppendString(b *testing.B) {
	s := "/orders.v1.OrderService/RefundOrder exe_0123456789abcdef0123456789abcdef hmac-sha256:0123456789abcdef"
	var buf []byte
	b.Run("words", func(b *testing.B) {
		for b.Loop() {
			buf = appendString(buf[:0], s)
		}
	})
	b.Run("bytes", func(b *testing.B) {
		for b.Loop() {
			buf = appendStringSlow(buf[:0], s)
		}
	})
}
