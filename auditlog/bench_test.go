package auditlog_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/middleware"
)

// BenchmarkRecord: one record through the sink to io.Discard.
func BenchmarkRecord(b *testing.B) {
	s, err := auditlog.New(io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := middleware.Event{Type: middleware.EventStarted, Time: time.Now(), ExecutionID: "exe_0123456789abcdef0123456789abcdef",
		Procedure: "/bench.v1.Orders/GetOrder", SideEffect: middleware.SideEffectRead, Attempt: 1}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Record(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
}
