package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
)

// print writes one line per event: ids, codes and counts, never payloads.
func print(w io.Writer, events []middleware.Event) {
	for _, e := range events {
		var b strings.Builder
		fmt.Fprintf(&b, "     %-30s", e.Type)
		if e.Attempt > 0 {
			fmt.Fprintf(&b, " attempt=%d", e.Attempt)
		}
		if e.PreviousErrorCode != middleware.CodeOK {
			fmt.Fprintf(&b, " previous=%s", e.PreviousErrorCode)
		}
		if e.Type.Final() {
			fmt.Fprintf(&b, " attempts=%d", e.Attempts)
		}
		if e.Code != middleware.CodeOK {
			fmt.Fprintf(&b, " code=%s retryable=%t", e.Code, e.Retryable)
		}
		if e.ApprovalID != "" {
			fmt.Fprintf(&b, " approval=%s", e.ApprovalID)
		}
		if e.Approver.ID != "" {
			fmt.Fprintf(&b, " approver=%s", e.Approver.ID)
		}
		if e.ReplayOf != "" {
			fmt.Fprintf(&b, " replayOf=%s", e.ReplayOf)
		}
		if e.Type == middleware.EventAbandonedResult {
			fmt.Fprintf(&b, " succeeded=%t", e.Succeeded)
		}
		if e.Budget != "" {
			fmt.Fprintf(&b, " budget=%s amount=%d spent=%d limit=%d", e.Budget, e.Amount, e.Spent, e.Limit)
		}
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, " retryAfter=%s", e.RetryAfter)
		}
		fmt.Fprintln(w, b.String())
	}
}

// replayLog remembers which execution replayed which stored result. A
// replay answers with the envelope of the execution that produced the
// result (its id included); the repeat is an execution of its own, whose
// capability.replayed event names the original in ReplayOf.
type replayLog struct {
	mu      sync.Mutex
	of      map[string]string // original execution → the last that replayed it
	changed chan struct{}     // closed, and replaced, when a replay arrives
}

func (l *replayLog) HandleEvent(_ context.Context, e middleware.Event) {
	if e.Type != middleware.EventReplayed {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.of == nil {
		l.of = map[string]string{}
	}
	l.of[e.ReplayOf] = e.ExecutionID
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// wait returns the execution that replayed original's result, waiting for
// its event (sinks are delivered asynchronously).
func (l *replayLog) wait(ctx context.Context, original string) (string, error) {
	for {
		l.mu.Lock()
		id, ok := l.of[original]
		if !ok && l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.mu.Unlock()
		if ok {
			return id, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", fmt.Errorf("no replay of %s: %w", original, context.Cause(ctx))
		}
	}
}
