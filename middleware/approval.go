package middleware

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ApprovalStore is the seam between the engine and where approvals live.
// Implementations are in package approvalstore (memory, Redis); the
// conformance package checks any implementation against this contract.
//
// The contract, for every method:
//   - Expiry is decided with the store's own clock (Redis: TIME inside the
//     script), never the caller's.
//   - Every check-and-write is one atomic step: a failed check changes
//     nothing.
//   - Errors are the sentinel errors of this package (wrapped or not) for
//     decisions, and anything else for a store failure; the engine maps the
//     sentinels to codes in one place and every other error to
//     APPROVAL_UNAVAILABLE, failing closed.
type ApprovalStore interface {
	// Create stores a new pending record with req's id, stamped with the
	// store's clock (RequestedAt, ExpiresAt = RequestedAt + ExpiresIn). While
	// a pending, unexpired record for the same audience, procedure,
	// requester and digest exists, it returns that record instead. A
	// requester with too many pending records gets ErrTooManyPending.
	Create(ctx context.Context, req ApprovalRequest) (ApprovalRecord, error)
	// Get returns the record with id, or ErrApprovalNotFound. A pending or
	// approved record past its expiry reads as ApprovalExpired; a consumed
	// record past its lease without an outcome reads as ApprovalInDoubt.
	Get(ctx context.Context, id string) (ApprovalRecord, error)
	// Decide approves or rejects a pending, unexpired record. It executes
	// nothing. The approver must not be the requester, anyone in the
	// requester's OnBehalfOf chain, or in another tenant (ErrSelfApproval,
	// unless the store allows self-approval explicitly); a store's approver
	// policy may refuse with ErrApproverNotAllowed. Repeating the decision
	// already made, by the same approver, is a no-op that returns the record;
	// any other decision on a decided record is ErrNotPending.
	Decide(ctx context.Context, id string, d Decision) (ApprovalRecord, error)
	// Consume marks an approved record as used by one execution, checking in
	// one atomic step: it exists, has the same audience and requester (else
	// ErrApprovalNotFound: nothing is revealed to another actor), is
	// approved (ErrApprovalPending, ErrApprovalRejected), unexpired
	// (ErrApprovalExpired), unconsumed (ErrApprovalConsumed), for the same
	// procedure and approval type (ErrApprovalResumeMismatch) and the same
	// digest (ErrApprovalInputMismatch). Consuming again with the same
	// ExecutionID succeeds, so a lost reply can be retried. Exactly one of
	// any number of concurrent consumers wins.
	Consume(ctx context.Context, id string, req ConsumeRequest) (ApprovalRecord, error)
	// RecordOutcome writes how the consuming execution ended into the
	// record, if executionID is the one that consumed it (else
	// ErrApprovalNotFound).
	RecordOutcome(ctx context.Context, id, executionID string, outcome Code) error
	// List returns the records matching f, oldest request first.
	List(ctx context.Context, f ApprovalFilter) ([]ApprovalRecord, error)
}

// ApprovalStatus is where an approval record is in its life.
type ApprovalStatus uint8

// The life of an approval: pending → approved | rejected | expired |
// cancelled; approved → consumed → completed | failed, or in_doubt when the
// consuming execution recorded no outcome within its lease.
const (
	ApprovalPending ApprovalStatus = iota + 1
	ApprovalApproved
	ApprovalRejected
	ApprovalExpired
	ApprovalCancelled
	ApprovalConsumed
	ApprovalCompleted
	ApprovalFailed
	ApprovalInDoubt
)

var approvalStatusNames = [...]string{"", "pending", "approved", "rejected", "expired", "cancelled", "consumed", "completed", "failed", "in_doubt"}

func (s ApprovalStatus) String() string {
	if int(s) < len(approvalStatusNames) && s > 0 {
		return approvalStatusNames[s]
	}
	return "unknown"
}

// ParseApprovalStatus returns the status whose name is s.
func ParseApprovalStatus(s string) (ApprovalStatus, bool) {
	for i, name := range approvalStatusNames {
		if i > 0 && name == s {
			return ApprovalStatus(i), true
		}
	}
	return 0, false
}

// ApprovalRequest is what the engine asks a store to create.
type ApprovalRequest struct {
	// ID is the new record's id ("apr_" and 32 hex digits), made by the engine.
	ID string
	// Audience names the deployment the approval is for (see [WithAudience]);
	// a record is only ever consumed within its audience.
	Audience  string
	Procedure string
	// Type is the capability's approval type, for example "manager".
	Type      string
	Requester Actor
	// RequestedBy is the execution that asked for the approval.
	RequestedBy string
	// Digest is the input digest the approval binds.
	Digest string
	// View is a redacted human-readable view of the input, rendered by the
	// application (see [WithApprovalView]); never model-written text.
	View       string
	Reasons    []string
	SideEffect SideEffect
	Risk       Risk
	ExpiresIn  time.Duration
}

// ApprovalRecord is an approval as a store keeps it.
type ApprovalRecord struct {
	ApprovalRequest
	Status      ApprovalStatus
	RequestedAt time.Time
	ExpiresAt   time.Time
	Approver    Actor
	Comment     string
	DecidedAt   time.Time
	// ConsumedBy is the execution that consumed the approval.
	ConsumedBy string
	ConsumedAt time.Time
	// LeaseUntil is when a consumed record without an outcome turns in_doubt.
	LeaseUntil time.Time
	// Outcome is the consuming execution's final code, once recorded.
	Outcome   Code
	OutcomeAt time.Time
}

// Decision is an approver's verdict on a pending record.
type Decision struct {
	Approve  bool
	Approver Actor
	Comment  string
}

// ConsumeRequest is what a resumed call presents to consume an approval.
type ConsumeRequest struct {
	Audience    string
	Procedure   string
	Type        string
	Actor       Actor
	Digest      string
	ExecutionID string
	// Lease is how long the execution may run before a record it consumed
	// without an outcome is reported in_doubt.
	Lease time.Duration
}

// ApprovalFilter selects records for [ApprovalStore.List]. Zero fields
// match everything.
type ApprovalFilter struct {
	Status   ApprovalStatus
	Audience string
	// Limit caps the result; zero means 100.
	Limit int
}

// The sentinel errors of approval decisions. Stores return them (wrapped or
// not); the engine maps each to its [Code] in one place.
var (
	ErrApprovalNotFound       = errors.New("agentsafe: approval not found")
	ErrApprovalPending        = errors.New("agentsafe: approval not decided yet")
	ErrApprovalRejected       = errors.New("agentsafe: approval rejected")
	ErrApprovalExpired        = errors.New("agentsafe: approval expired")
	ErrApprovalConsumed       = errors.New("agentsafe: approval already consumed")
	ErrApprovalInputMismatch  = errors.New("agentsafe: input differs from the approved input")
	ErrApprovalResumeMismatch = errors.New("agentsafe: approval is for another procedure or approval type")
	// ErrNotPending: a decision on a record that is no longer pending.
	ErrNotPending = errors.New("agentsafe: approval is not pending")
	// ErrSelfApproval: the approver is the requester, in its delegation
	// chain, or in another tenant.
	ErrSelfApproval = errors.New("agentsafe: approver may not decide their own request")
	// ErrApproverNotAllowed: the store's approver policy refused.
	ErrApproverNotAllowed = errors.New("agentsafe: approver not allowed to decide this approval")
	// ErrTooManyPending: the requester has too many pending approvals.
	ErrTooManyPending = errors.New("agentsafe: too many pending approvals for this actor")
)

// approvalCodes is the one place sentinel errors become codes.
var approvalCodes = []struct {
	err  error
	code Code
}{
	{ErrApprovalNotFound, CodeApprovalNotFound},
	{ErrApprovalPending, CodeApprovalPending},
	{ErrApprovalRejected, CodeApprovalRejected},
	{ErrApprovalExpired, CodeApprovalExpired},
	{ErrApprovalConsumed, CodeApprovalConsumed},
	{ErrApprovalInputMismatch, CodeApprovalInputMismatch},
	{ErrApprovalResumeMismatch, CodeApprovalResumeMismatch},
	{ErrTooManyPending, CodeResourceExhausted},
}

// ApprovalCode returns the code an approval-store error stands for:
// CodeApprovalUnavailable for anything that is not one of the sentinels.
func ApprovalCode(err error) Code {
	for _, m := range approvalCodes {
		if errors.Is(err, m.err) {
			return m.code
		}
	}
	return CodeApprovalUnavailable
}

// CheckApprover is the approver rule stores apply in Decide: the approver
// must have an id, must be in the requester's tenant (ErrApproverNotAllowed)
// and, unless allowSelf, must not be the requester or anyone in the
// requester's OnBehalfOf chain, nor act on behalf of any of them
// (ErrSelfApproval).
func CheckApprover(requester, approver Actor, allowSelf bool) error {
	if approver.ID == "" {
		return fmt.Errorf("%w: the approver has no id", ErrApproverNotAllowed)
	}
	if approver.Tenant != requester.Tenant {
		return fmt.Errorf("%w: the approver is in tenant %q, the request in %q", ErrApproverNotAllowed, approver.Tenant, requester.Tenant)
	}
	if allowSelf {
		return nil
	}
	if approver.ID == requester.ID {
		return fmt.Errorf("%w: %s requested it", ErrSelfApproval, approver.ID)
	}
	if slices.Contains(requester.OnBehalfOf, approver.ID) {
		return fmt.Errorf("%w: the requester acts on behalf of %s", ErrSelfApproval, approver.ID)
	}
	// Nor through delegation: an approver acting for the requester, or for
	// someone the requester acts for, is that party approving.
	for _, id := range approver.OnBehalfOf {
		if id == requester.ID || slices.Contains(requester.OnBehalfOf, id) {
			return fmt.Errorf("%w: the approver acts on behalf of %s", ErrSelfApproval, id)
		}
	}
	return nil
}
