package middleware

import "fmt"

// Code classifies how an execution ended. The set is closed; adapters map
// each code to their framework's status in one table.
type Code uint8

// The codes of an execution's outcome. The zero value, CodeOK, means success.
const (
	CodeOK Code = iota
	// CodeTimeout: an attempt's own timeout fired. Runtime-retryable.
	CodeTimeout
	// CodeCancelled: the caller left (cancelled, or its own deadline passed).
	CodeCancelled
	// CodeExecutionFailed: the handler failed or panicked. Retryable as the
	// classifier says.
	CodeExecutionFailed
	// CodeResourceExhausted: too many abandoned attempts for this capability.
	CodeResourceExhausted
	// CodeUnauthenticated: the actor function failed, or no actor where an
	// approval needs one.
	CodeUnauthenticated
	// CodeApprovalRequired: an approval is needed; the envelope carries the
	// new approval id.
	CodeApprovalRequired
	// CodeApprovalPending: the approval is not decided yet. Retryable.
	CodeApprovalPending
	CodeApprovalRejected
	CodeApprovalExpired
	CodeApprovalConsumed
	// CodeApprovalNotFound: an unknown id, or one that belongs to another
	// actor (no state is revealed to them).
	CodeApprovalNotFound
	// CodeApprovalInputMismatch: the input digest differs from the approved one.
	CodeApprovalInputMismatch
	// CodeApprovalResumeMismatch: another procedure, or changed approval metadata.
	CodeApprovalResumeMismatch
	// CodeApprovalUnavailable: the approval store failed; nothing ran. Retryable.
	CodeApprovalUnavailable
	// CodeCapabilityNotFound: strict mode and an ungoverned procedure.
	CodeCapabilityNotFound
	// CodeInvalidArgument: a malformed agentsafe header, or an input a gated
	// or keyed call cannot bind.
	CodeInvalidArgument
	// CodeAuditUnavailable: the strict audit sink failed; nothing ran.
	// Retryable.
	CodeAuditUnavailable
	// CodeIdempotencyInFlight: the caller's Idempotency-Key is claimed by a
	// running execution. Retryable.
	CodeIdempotencyInFlight
	// CodeIdempotencyKeyReused: the caller's Idempotency-Key came back with
	// another input.
	CodeIdempotencyKeyReused
	// CodeIdempotencyInDoubt: the key's earlier execution may have run and
	// was not reconciled.
	CodeIdempotencyInDoubt
	// CodeIdempotencyUnavailable: the result store failed; nothing ran.
	// Retryable.
	CodeIdempotencyUnavailable
	// CodePolicyDenied: a policy denied the call.
	CodePolicyDenied
	// CodePolicyUnavailable: a policy errored or panicked; nothing ran.
	// Retryable.
	CodePolicyUnavailable
	// CodeIdempotencyQuotaExceeded: the results the actor's keys keep are
	// at their quota (WithResultQuota); nothing ran.
	CodeIdempotencyQuotaExceeded
	// CodeBudgetExceeded: the call would take a budget past its limit;
	// nothing ran. The envelope carries RetryAfter.
	CodeBudgetExceeded
	// CodeBudgetUnavailable: the budget store failed; nothing ran.
	// Retryable.
	CodeBudgetUnavailable
	// CodeApprovalStale: the capability's preview of the effect, computed
	// again at resume, differs from the one approved (the state changed);
	// nothing ran and nothing was consumed.
	CodeApprovalStale
	// CodePreviewUnavailable: the capability's preview function failed;
	// nothing was requested or ran. Retryable, unless the preview was
	// oversize (an application bug).
	CodePreviewUnavailable
	numCodes
)

var codeNames = [numCodes]string{
	CodeOK:                       "OK",
	CodeTimeout:                  "TIMEOUT",
	CodeCancelled:                "CANCELLED",
	CodeExecutionFailed:          "EXECUTION_FAILED",
	CodeResourceExhausted:        "RESOURCE_EXHAUSTED",
	CodeUnauthenticated:          "UNAUTHENTICATED",
	CodeApprovalRequired:         "APPROVAL_REQUIRED",
	CodeApprovalPending:          "APPROVAL_PENDING",
	CodeApprovalRejected:         "APPROVAL_REJECTED",
	CodeApprovalExpired:          "APPROVAL_EXPIRED",
	CodeApprovalConsumed:         "APPROVAL_CONSUMED",
	CodeApprovalNotFound:         "APPROVAL_NOT_FOUND",
	CodeApprovalInputMismatch:    "APPROVAL_INPUT_MISMATCH",
	CodeApprovalResumeMismatch:   "APPROVAL_RESUME_MISMATCH",
	CodeApprovalUnavailable:      "APPROVAL_UNAVAILABLE",
	CodeCapabilityNotFound:       "CAPABILITY_NOT_FOUND",
	CodeInvalidArgument:          "INVALID_ARGUMENT",
	CodeAuditUnavailable:         "AUDIT_UNAVAILABLE",
	CodeIdempotencyInFlight:      "IDEMPOTENCY_IN_FLIGHT",
	CodeIdempotencyKeyReused:     "IDEMPOTENCY_KEY_REUSED",
	CodeIdempotencyInDoubt:       "IDEMPOTENCY_IN_DOUBT",
	CodeIdempotencyUnavailable:   "IDEMPOTENCY_UNAVAILABLE",
	CodePolicyDenied:             "POLICY_DENIED",
	CodePolicyUnavailable:        "POLICY_UNAVAILABLE",
	CodeIdempotencyQuotaExceeded: "IDEMPOTENCY_QUOTA_EXCEEDED",
	CodeBudgetExceeded:           "BUDGET_EXCEEDED",
	CodeBudgetUnavailable:        "BUDGET_UNAVAILABLE",
	CodeApprovalStale:            "APPROVAL_STALE",
	CodePreviewUnavailable:       "PREVIEW_UNAVAILABLE",
}

// String returns the code's wire name, for example "TIMEOUT".
func (c Code) String() string {
	if c < numCodes {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// parseCode returns the code whose wire name is s.
func parseCode(s string) (Code, bool) {
	for c, name := range codeNames {
		if name == s {
			return Code(c), true
		}
	}
	return 0, false
}

// retryable reports whether the code is worth another attempt by its nature;
// for CodeExecutionFailed the classifier decides instead.
func (c Code) retryable() bool {
	switch c {
	case CodeTimeout, CodeApprovalPending, CodeApprovalUnavailable, CodeAuditUnavailable,
		CodeIdempotencyInFlight, CodeIdempotencyUnavailable, CodePolicyUnavailable, CodeBudgetUnavailable, CodePreviewUnavailable:
		return true
	}
	return false
}

// MarshalText encodes the code as its wire name.
func (c Code) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText decodes a wire name.
func (c *Code) UnmarshalText(b []byte) error {
	v, ok := parseCode(string(b))
	if !ok {
		return fmt.Errorf("agentsafe: unknown code %q", b)
	}
	*c = v
	return nil
}
