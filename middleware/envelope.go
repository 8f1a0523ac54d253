package middleware

import "time"

// Status is how an execution ended, as the caller sees it.
type Status uint8

// The statuses of an envelope.
const (
	StatusCompleted Status = iota + 1
	StatusFailed
	StatusCancelled
	StatusApprovalRequired
)

var statusNames = [...]string{"", "completed", "failed", "cancelled", "approval_required"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// parseStatus returns the status whose wire name is s.
func parseStatus(s string) (Status, bool) {
	for i, name := range statusNames {
		if i > 0 && name == s {
			return Status(i), true
		}
	}
	return 0, false
}

// Envelope is the single result of one execution. The engine builds it once,
// in one place; adapters write it to the wire and ship a function that reads
// it back.
type Envelope struct {
	ExecutionID string
	Procedure   string
	Status      Status
	// Error is nil when Status is StatusCompleted.
	Error      *EnvelopeError
	Attempts   int
	Duration   time.Duration
	ApprovalID string
	// ApprovalURL and ExpiresAt tell the caller of an APPROVAL_REQUIRED or
	// APPROVAL_PENDING call where a person can decide the approval, and
	// until when (see WithApprovalURL); empty when unknown.
	ApprovalURL string
	ExpiresAt   time.Time
	// Replayed marks the stored result of an earlier execution (whose id
	// ExecutionID is), replayed for a repeat with the same Idempotency-Key
	// or within a dedup window: nothing ran.
	Replayed bool
	// RetryAfter is, on BUDGET_EXCEEDED, how long until enough of the
	// budget's window frees for the call to fit; zero when unknown (the
	// amount never fits). Adapters write it as Retry-After (HTTP) and
	// google.rpc.RetryInfo (Connect, gRPC).
	RetryAfter time.Duration
}

// EnvelopeError is the part of a failure the caller may see.
type EnvelopeError struct {
	Code    Code
	Message string
	// Retryable means safe for the caller to re-invoke: the code is
	// retryable AND the capability is none/read or declared idempotent. A
	// timed-out payment reports false: re-invoking it would run it again
	// under a new idempotency key.
	Retryable bool
}

// Status returns the envelope status of an execution that ended with c:
// completed for CodeOK, cancelled for TIMEOUT and CANCELLED,
// approval_required for APPROVAL_REQUIRED, failed for the rest. Client
// helpers use it to rebuild an envelope from the code on the wire.
func (c Code) Status() Status {
	switch c {
	case CodeOK:
		return StatusCompleted
	case CodeTimeout, CodeCancelled:
		return StatusCancelled
	case CodeApprovalRequired:
		return StatusApprovalRequired
	}
	return StatusFailed
}
