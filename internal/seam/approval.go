package seam

import "time"

// ApprovalMarkKey is the context key of an in-process caller's
// ApprovalMark (adapter.WithApprovalMark).
type ApprovalMarkKey struct{}

// ApprovalMark is what an in-process caller (the MCP bridge) asks of the
// approval gate for one call of Procedure; calls of other procedures made
// with the same context ignore it.
type ApprovalMark struct {
	Procedure string
	// Wait bounds how long the gate waits for the decision on a pending
	// approval the call presents; zero: no wait.
	Wait time.Duration
	// Payload is kept, sealed, with an approval record the call requests.
	Payload []byte
}
