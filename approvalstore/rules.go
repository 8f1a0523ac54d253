package approvalstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// The rules every store applies, in Go for the memory store; the Redis
// store's scripts apply the same ones (and the shared contract tests in
// package conformance hold both to them).

// status is a record's status as of now: pending and approved records past
// their expiry read as expired, consumed ones past their lease without an
// outcome as in_doubt.
func status(r *middleware.ApprovalRecord, now time.Time) middleware.ApprovalStatus {
	switch r.Status {
	case middleware.ApprovalPending, middleware.ApprovalApproved:
		if !now.Before(r.ExpiresAt) {
			return middleware.ApprovalExpired
		}
	case middleware.ApprovalConsumed:
		if !now.Before(r.LeaseUntil) {
			return middleware.ApprovalInDoubt
		}
	}
	return r.Status
}

// errAlreadyMine says a consume is a repeat by the execution that consumed
// the record: it succeeds without a write.
var errAlreadyMine = errors.New("consumed by this execution already")

// consumable applies Consume's checks in the order of SPEC §7: exists, same
// audience and requester (else not found: nothing is revealed), approved,
// unexpired, unconsumed, same procedure and approval type, same digest.
func consumable(r *middleware.ApprovalRecord, ok bool, req middleware.ConsumeRequest, now time.Time) error {
	if !ok || r.Audience != req.Audience || !sameActor(r.Requester, req.Actor) {
		return middleware.ErrApprovalNotFound
	}
	switch status(r, now) {
	case middleware.ApprovalApproved:
	case middleware.ApprovalPending:
		return middleware.ErrApprovalPending
	case middleware.ApprovalRejected, middleware.ApprovalCancelled:
		return middleware.ErrApprovalRejected
	case middleware.ApprovalExpired:
		return middleware.ErrApprovalExpired
	default: // consumed, completed, failed, in_doubt
		if r.ConsumedBy == req.ExecutionID {
			return errAlreadyMine
		}
		return middleware.ErrApprovalConsumed
	}
	if r.Procedure != req.Procedure || r.Type != req.Type {
		return middleware.ErrApprovalResumeMismatch
	}
	if r.Digest != req.Digest {
		return middleware.ErrApprovalInputMismatch
	}
	return nil
}

// sameActor compares the identity that owns a record: id and tenant.
func sameActor(a, b middleware.Actor) bool { return a.ID == b.ID && a.Tenant == b.Tenant }

// sameDecision reports whether d repeats the decision already recorded, by
// the same approver.
func sameDecision(r *middleware.ApprovalRecord, d middleware.Decision) bool {
	if r.DecidedAt.IsZero() || r.Approver.ID != d.Approver.ID {
		return false
	}
	approved := r.Status != middleware.ApprovalRejected
	return approved == d.Approve
}

func outcomeStatus(code middleware.Code) middleware.ApprovalStatus {
	if code == middleware.CodeOK {
		return middleware.ApprovalCompleted
	}
	return middleware.ApprovalFailed
}

func checkRequest(req middleware.ApprovalRequest) error {
	switch {
	case !middleware.ValidApprovalID(req.ID):
		return fmt.Errorf("approvalstore: malformed approval id %q", req.ID)
	case req.ExpiresIn <= 0:
		return fmt.Errorf("approvalstore: ExpiresIn must be positive (got %s)", req.ExpiresIn)
	case req.Requester.ID == "":
		return errors.New("approvalstore: an approval needs a requester")
	}
	return nil
}

func matches(r *middleware.ApprovalRecord, f middleware.ApprovalFilter, now time.Time) bool {
	return (f.Status == 0 || status(r, now) == f.Status) && (f.Audience == "" || r.Audience == f.Audience)
}

func limit(rs []middleware.ApprovalRecord, n int) []middleware.ApprovalRecord {
	if n <= 0 {
		n = defaultListLimit
	}
	if len(rs) > n {
		rs = rs[:n]
	}
	return rs
}

// retainUntil is when a record may be forgotten: its retention after the
// last moment it could matter.
func retainUntil(r *middleware.ApprovalRecord, retention time.Duration) time.Time {
	last := r.ExpiresAt
	if r.LeaseUntil.After(last) {
		last = r.LeaseUntil
	}
	return last.Add(retention)
}
