package main

import (
	"fmt"
	"io"
	"strings"

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
		if e.Type == middleware.EventAbandonedResult {
			fmt.Fprintf(&b, " succeeded=%t", e.Succeeded)
		}
		fmt.Fprintln(w, b.String())
	}
}
