package adapter

import (
	"context"
	"time"

	"github.com/agentsafe/agentsafe/internal/seam"
)

// ApprovalMark is what an in-process caller asks of the approval gate for
// one call (see [WithApprovalMark]).
type ApprovalMark struct {
	// Wait bounds how long the gate waits for the decision when the call
	// presents an approval that is still pending: it first checks that the
	// approval could be consumed by this call once approved (the same
	// whole actor, else APPROVAL_NOT_FOUND; the same procedure and
	// approval metadata; the same input, else APPROVAL_INPUT_MISMATCH),
	// then waits, never past the approval's expiry nor the call's context,
	// and consumes it as soon as it is approved. Still undecided at the end
	// is APPROVAL_PENDING; the call's context ending is CANCELLED, and
	// nothing is consumed. A decision made through the same engine ends
	// the wait at once; one made by another instance sharing the store is
	// seen within a second. Zero (the default) does not wait.
	Wait time.Duration
}

// WithApprovalMark marks the call of procedure made with ctx, in process:
// a bridge that turns its own requests into calls of another adapter (the
// MCP bridge calls Connect handlers in process) says so through the
// request's context, which only code in the same process can set, never
// through a header a remote caller could send. Calls of other procedures
// made with ctx, the handler's own calls among them, ignore the mark.
func WithApprovalMark(ctx context.Context, procedure string, m ApprovalMark) context.Context {
	return context.WithValue(ctx, seam.ApprovalMarkKey{}, seam.ApprovalMark{Procedure: procedure, Wait: m.Wait})
}
