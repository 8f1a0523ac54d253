package middleware

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// guardedSink bounds one sink: each call runs on its own goroutine so a
// panic is recovered and a call that outlives the bound is left behind
// without stalling the execution. While a sink has overdue calls, events to
// it are dropped rather than piling up more stuck goroutines.
type guardedSink struct {
	sink    EventSink
	bound   time.Duration
	overdue atomic.Int32
	dropped atomic.Uint64
}

const maxOverdueCalls = 1

const (
	sinkRunning int32 = iota
	sinkReturned
	sinkOverdue
)

func (g *guardedSink) deliver(ctx context.Context, ev Event) {
	if g.overdue.Load() >= maxOverdueCalls {
		g.dropped.Add(1)
		return
	}
	var state atomic.Int32
	done := make(chan struct{})
	go func() {
		defer func() {
			_ = recover() // a panicking sink loses its event, nothing more
			if state.Swap(sinkReturned) == sinkOverdue {
				g.overdue.Add(-1)
			}
			close(done)
		}()
		g.sink.HandleEvent(ctx, ev)
	}()
	t := time.NewTimer(g.bound)
	select {
	case <-done:
		t.Stop()
	case <-t.C:
		if state.CompareAndSwap(sinkRunning, sinkOverdue) {
			g.overdue.Add(1)
			g.dropped.Add(1)
		}
	}
}

// NewSlogSink returns a sink that logs each event on logger (slog.Default()
// when nil): final failures at Warn, everything else at Info. Only the
// fields an event uses are logged.
func NewSlogSink(logger *slog.Logger) EventSink {
	if logger == nil {
		logger = slog.Default()
	}
	return slogSink{logger}
}

type slogSink struct{ l *slog.Logger }

func (s slogSink) HandleEvent(ctx context.Context, e Event) {
	level := slog.LevelInfo
	if e.Type == EventFailed || e.Type == EventAbandonedResult {
		level = slog.LevelWarn
	}
	if !s.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	add := func(cond bool, a slog.Attr) {
		if cond {
			attrs = append(attrs, a)
		}
	}
	attrs = append(attrs, slog.String("execution_id", e.ExecutionID), slog.String("procedure", e.Procedure))
	add(e.Actor.ID != "", slog.String("actor", e.Actor.ID))
	add(e.Actor.Tenant != "", slog.String("tenant", e.Actor.Tenant))
	add(e.InputDigest != "", slog.String("input_digest", e.InputDigest))
	add(e.SideEffect != SideEffectUnspecified, slog.String("side_effect", e.SideEffect.String()))
	add(e.Attempt > 0, slog.Int("attempt", e.Attempt))
	add(e.Attempts > 0, slog.Int("attempts", e.Attempts))
	add(e.PreviousErrorCode != CodeOK, slog.String("previous_error_code", e.PreviousErrorCode.String()))
	add(e.Code != CodeOK, slog.String("code", e.Code.String()))
	add(e.Code != CodeOK, slog.Bool("retryable", e.Retryable))
	add(e.Type.Final() || e.Duration > 0, slog.Duration("duration", e.Duration))
	add(e.ApprovalID != "", slog.String("approval_id", e.ApprovalID))
	add(e.Approver.ID != "", slog.String("approver", e.Approver.ID))
	add(e.Comment != "", slog.String("comment", e.Comment))
	add(e.Reason != "", slog.String("reason", e.Reason))
	add(e.Type == EventAbandonedResult, slog.Bool("succeeded", e.Succeeded))
	add(e.Error != "", slog.String("error", e.Error))
	add(e.Stack != "", slog.String("stack", e.Stack))
	s.l.LogAttrs(ctx, level, string(e.Type), attrs...)
}
