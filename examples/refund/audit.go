package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
)

// audit keeps the events by execution, so the demo can print each call's
// trail after its result.
type audit struct {
	mu     sync.Mutex
	events []middleware.Event
}

func newAudit() *audit { return &audit{} }

func (a *audit) HandleEvent(_ context.Context, e middleware.Event) {
	a.mu.Lock()
	a.events = append(a.events, e)
	a.mu.Unlock()
}

// of returns the events of one execution.
func (a *audit) of(executionID string) []middleware.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []middleware.Event
	for _, e := range a.events {
		if e.ExecutionID == executionID {
			out = append(out, e)
		}
	}
	return out
}

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
		if e.Type == middleware.EventAbandonedResult {
			fmt.Fprintf(&b, " succeeded=%t", e.Succeeded)
		}
		fmt.Fprintln(w, b.String())
	}
}
