package approvalstore

import (
	"cmp"
	"errors"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// The rules every store applies, in Go for the memory store; the Redis
// store's scripts apply the same ones (and the shared contract tests in
// package conformance hold both to them).

// status is a record's status as of now: pending and approved records past
// their expiry read as expired, consumed ones past their lease without an
// outcome as in_doubt.
func status(r *store.ApprovalRecord, now time.Time) store.ApprovalStatus {
	switch r.Status {
	case store.ApprovalPending, store.ApprovalApproved:
		if !now.Before(r.ExpiresAt) {
			return store.ApprovalExpired
		}
	case store.ApprovalConsumed:
		if !now.Before(r.LeaseUntil) {
			return store.ApprovalInDoubt
		}
	}
	return r.Status
}

// quorum is the number of approvers q stands for: zero means 1.
func quorum(q int) int { return max(q, 1) }

// consumedApproval is what Consume returns of r.
func consumedApproval(r *store.ApprovalRecord) store.ConsumedApproval {
	a := store.ConsumedApproval{ID: r.ID, Type: r.Type, Approver: r.Approver, Comment: r.Comment, DecidedAt: r.DecidedAt}
	a.Approver.OnBehalfOf = slices.Clone(r.Approver.OnBehalfOf)
	return a
}

// addVote records d on a pending record at now: a rejection rejects, an
// approval approves at the quorum; the deciding vote is the record's
// Approver, Comment and DecidedAt.
func addVote(r *store.ApprovalRecord, d store.Decision, now time.Time) {
	v := store.Vote{Approver: d.Approver, Approve: d.Approve, Comment: d.Comment, At: now}
	v.Approver.OnBehalfOf = slices.Clone(d.Approver.OnBehalfOf)
	r.Votes = append(r.Votes, v)
	switch {
	case !d.Approve:
		r.Status = store.ApprovalRejected
	case len(r.Votes) >= quorum(r.Quorum): // every vote on a pending record is an approval
		r.Status = store.ApprovalApproved
	default:
		return
	}
	r.Approver, r.Comment, r.DecidedAt = v.Approver, v.Comment, v.At
	r.Approver.OnBehalfOf = slices.Clone(v.Approver.OnBehalfOf)
}

// takesOutcome reports whether a record whose stored status is stored
// takes the outcome o: a consumed record takes any, an in_doubt one a
// result (completed or failed); anything else keeps what it has.
func takesOutcome(stored store.ApprovalStatus, o store.Outcome) bool {
	switch stored {
	case store.ApprovalConsumed:
		return true
	case store.ApprovalInDoubt:
		return o.Status != store.ApprovalInDoubt
	}
	return false
}

// checkRequest is the contract's check of a request, and that its
// requester is valid UTF-8 (see validActor).
func checkRequest(req store.ApprovalRequest) error {
	if err := store.CheckRequest(req); err != nil {
		return err
	}
	if !validActor(req.Requester) {
		return errors.New("approvalstore: the requester's id, tenant, kind or OnBehalfOf chain is not valid UTF-8")
	}
	return nil
}

// inView reports whether r belongs to the audience and tenant f selects;
// the status is matched separately, as of a time.
func inView(r *store.ApprovalRecord, f store.ApprovalFilter) bool {
	return r.Audience == f.Audience && (f.AnyTenant || r.Requester.Tenant == f.Tenant)
}

func matches(r *store.ApprovalRecord, f store.ApprovalFilter, now time.Time) bool {
	return inView(r, f) && (f.Status == 0 || status(r, now) == f.Status)
}

// oldestFirst orders records by request time, then id.
func oldestFirst(a, b store.ApprovalRecord) int {
	return cmp.Or(a.RequestedAt.Compare(b.RequestedAt), cmp.Compare(a.ID, b.ID))
}

// listLimit is the number of records a List of f returns at most.
func listLimit(f store.ApprovalFilter) int {
	if f.Limit <= 0 {
		return defaultListLimit
	}
	return f.Limit
}

// oldest sorts rs oldest first and keeps the first n.
func oldest(rs []store.ApprovalRecord, n int) []store.ApprovalRecord {
	slices.SortFunc(rs, oldestFirst)
	if len(rs) > n {
		clear(rs[n:]) // let the dropped records go
		rs = rs[:n]
	}
	return rs
}

// retainUntil is when a record may be forgotten: its retention after the
// last moment it could matter.
func retainUntil(r *store.ApprovalRecord, retention time.Duration) time.Time {
	last := r.ExpiresAt
	if r.LeaseUntil.After(last) {
		last = r.LeaseUntil
	}
	return last.Add(retention)
}

// validActor reports whether every string of a is valid UTF-8. The Redis
// store keeps an actor's chain as JSON, which replaces invalid bytes, so
// two actors that differ only in them would compare equal: such actors
// are never bound to a record.
func validActor(a store.Actor) bool {
	invalid := func(s string) bool { return !utf8.ValidString(s) }
	return !invalid(a.ID) && !invalid(a.Tenant) && !invalid(a.Kind) && !slices.ContainsFunc(a.OnBehalfOf, invalid)
}
