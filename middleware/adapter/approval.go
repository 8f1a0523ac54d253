package adapter

import (
	"context"
	"time"

	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware"
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
	// Payload is kept with an approval record the call requests, opaque to
	// the store: Get returns it, List never does (the MCP bridge keeps
	// there the call's arguments, sealed, to resume it by id).
	Payload []byte
}

// WithApprovalMark marks the call of procedure made with ctx, in process:
// a bridge that turns its own requests into calls of another adapter (the
// MCP bridge calls Connect handlers in process) says so through the
// request's context, which only code in the same process can set, never
// through a header a remote caller could send. Calls of other procedures
// made with ctx, the handler's own calls among them, ignore the mark.
func WithApprovalMark(ctx context.Context, procedure string, m ApprovalMark) context.Context {
	return context.WithValue(ctx, seam.ApprovalMarkKey{}, seam.ApprovalMark{Procedure: procedure, Wait: m.Wait, Payload: m.Payload})
}

// Seal seals plain under eng's result key (middleware.WithResultKey;
// AES-GCM with a random nonce, the key's id kept with the bytes so keys
// rotate), bound to context: bytes sealed for one context never open for
// another. It fails on an engine without a result key. A bridge keeps
// with it what it must get back unchanged and unread from an untrusted
// party (the MCP bridge's request state).
func Seal(eng *middleware.Engine, plain []byte, context string) ([]byte, error) {
	return seam.Seal(eng, plain, context)
}

// Open opens what [Seal] sealed for the same context under any of eng's
// result keys, current or previous; tampered bytes, or bytes sealed for
// another context or under a key eng does not have, fail.
func Open(eng *middleware.Engine, sealed []byte, context string) ([]byte, error) {
	return seam.Open(eng, sealed, context)
}
