// Package store is the store SPI of agentsafe: the interfaces between the
// engine and where approvals (and stored results, and budgets) live, their
// records and their sentinel errors. It is a leaf — it imports nothing of
// the engine — so that a store implementation links only this package, as
// a database driver links only database/sql/driver. Applications use
// stores through package middleware (WithApprovalStore, Engine.Decide,
// Get, List; WithResultStore; WithBudgetStore, Engine.Budget);
// implementations are in approvalstore, resultstore and budgetstore
// (memory, Redis) and agentsafepg, and package conformance checks any
// implementation against the contract written here (RunStore,
// RunResultStore, RunBudgetStore).
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/agentsafe/agentsafe/internal/ids"
)

// Actor is who a call is for: it comes only from verified credentials,
// through the application's actor function (middleware.WithActor), never
// from a request body. middleware.Actor is this type.
type Actor struct {
	ID     string
	Tenant string
	// Kind says what the actor is, for example "agent", "user" or "service".
	Kind string
	// OnBehalfOf is the delegation chain, nearest first: the ids of those the
	// actor acts for. None of them may approve the actor's requests.
	OnBehalfOf []string
}

// ValidApprovalID reports whether s has the form of an approval id: "apr_"
// and 32 lowercase hex digits.
func ValidApprovalID(s string) bool { return ids.Valid("apr_", s) }

// NewApprovalID returns a fresh approval id: "apr_" and 128 random bits.
// The engine makes the ids of the records it asks a store to create.
func NewApprovalID() string { return ids.New("apr_") }

// ApprovalStore is the seam between the engine and where approvals live.
// Implementations are in package approvalstore (memory, Redis); the
// conformance package checks any implementation against this contract.
//
// The contract, for every method:
//   - Expiry is decided with the store's own clock (Redis: TIME inside the
//     script), never the caller's.
//   - Every check-and-write is one atomic step: a failed check changes
//     nothing.
//   - "The same actor" means the whole actor: ID, Tenant, Kind and the
//     OnBehalfOf chain, exactly ([SameActor]).
//   - Errors are the sentinel errors of this package (wrapped or not) for
//     decisions, and anything else for a store failure; the engine maps the
//     sentinels to codes in one place and every other error to
//     APPROVAL_UNAVAILABLE, failing closed.
type ApprovalStore interface {
	// Create stores a new pending record with req's id, stamped with the
	// store's clock (RequestedAt, ExpiresAt = RequestedAt + ExpiresIn). While
	// a pending, unexpired record for the same audience, procedure, digest,
	// preview digest and the same (whole) requester exists, it returns that
	// record instead (a changed preview is a new request).
	// A requester (by audience, tenant and id) with too many pending records
	// gets ErrTooManyPending.
	Create(ctx context.Context, req ApprovalRequest) (ApprovalRecord, error)
	// Get returns the record with id, or ErrApprovalNotFound. A pending or
	// approved record past its expiry reads as ApprovalExpired; a consumed
	// record past its lease without an outcome reads as ApprovalInDoubt.
	Get(ctx context.Context, id string) (ApprovalRecord, error)
	// Decide records one approver's vote on a pending, unexpired record of
	// d.Audience (another audience's record is ErrApprovalNotFound). It
	// executes nothing. The approver must pass [CheckApprover] against the
	// requester (ErrSelfApproval, ErrApproverNotAllowed; unless the store
	// allows self-approval explicitly) and, when the record has votes
	// already, be distinct from every earlier voter: no principal (ID or
	// OnBehalfOf entry) in common with any of them, so that no person is
	// counted twice through two delegates (else [ErrAlreadyVoted], which
	// is an ErrSelfApproval; [CheckVoter]). A store's approver policy may
	// refuse with ErrApproverNotAllowed.
	//
	// A rejection rejects the record at once. An approval is counted; the
	// record becomes approved when Quorum distinct approvers have voted
	// (Quorum 1, the default, approves at the first vote). Approver, Comment
	// and DecidedAt of the record are those of the vote that decided it.
	// Each vote is one atomic step.
	//
	// The same vote repeated by the same approver is a no-op: it returns the
	// record and changed = false. Any other vote on a record that is no
	// longer pending is ErrNotPending (ErrApprovalExpired when it expired
	// undecided).
	Decide(ctx context.Context, id string, d Decision) (rec ApprovalRecord, changed bool, err error)
	// Consume marks an approved record as used by one execution, checking in
	// one atomic step: it exists, has the same audience and the same whole
	// actor as requester (else ErrApprovalNotFound: nothing is revealed to
	// another actor), is approved (ErrApprovalPending, ErrApprovalRejected),
	// unexpired (ErrApprovalExpired), unconsumed (ErrApprovalConsumed), for
	// the same procedure, approval type and quorum (ErrApprovalResumeMismatch),
	// the same digest (ErrApprovalInputMismatch) and, when the request has a
	// PreviewDigest, the same preview digest (ErrApprovalStale; a record
	// without one is stale too). Consuming again with
	// the same ExecutionID succeeds, so a lost reply can be retried. Exactly
	// one of any number of concurrent consumers wins. It returns only what
	// the execution needs, in one round trip.
	Consume(ctx context.Context, id string, req ConsumeRequest) (ConsumedApproval, error)
	// Release undoes a consumption by executionID that has no outcome yet,
	// atomically: the record is approved again, as if never consumed, so an
	// approval is not burnt when the engine knows nothing ran. For any other
	// record (unknown, consumed by another execution, an outcome recorded,
	// never consumed) it is a no-op that returns nil.
	Release(ctx context.Context, id, executionID string) error
	// RecordOutcome writes how the consuming execution ended into the
	// record, if executionID is the one that consumed it (else
	// ErrApprovalNotFound). A consumed record takes any outcome; an in_doubt
	// one (recorded so, or past its lease) takes a completed or failed
	// outcome, late or not; a completed or failed record keeps its outcome
	// (a no-op that returns nil). The zero Outcome is refused.
	RecordOutcome(ctx context.Context, id, executionID string, o Outcome) error
	// List returns the records matching f, oldest request first. The filter
	// is applied inside List, before the limit: records of another audience
	// or tenant never take a place in the result.
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
	// Audience names the deployment the approval is for (middleware.WithAudience);
	// a record is only ever consumed within its audience.
	Audience  string
	Procedure string
	// Type is the capability's approval type, for example "manager".
	Type string
	// Quorum is how many distinct approvers must approve; zero means 1.
	Quorum    int
	Requester Actor
	// RequestedBy is the execution that asked for the approval.
	RequestedBy string
	// Digest is the input digest the approval binds.
	Digest string
	// View is a redacted human-readable view of the input, rendered by the
	// application (middleware.WithApprovalView); never model-written text.
	View string

	// PreviewText is the effect the call would have, as the capability's
	// preview computed it from the server's state when the approval was
	// requested (at most 4 KiB of plain text): what approvers see first.
	// Empty for a capability without a preview.
	PreviewText string
	// PreviewDigest binds the approval to the state the preview was
	// computed from: "sha256:" and 64 hex digits (domain-tagged). A resume
	// whose preview computes another digest is stale (see Consume). Empty
	// for a capability without a preview.
	PreviewDigest string

	Reasons    []string
	SideEffect string // the capability's, by name: "write"
	Risk       string // by name: "high"
	ExpiresIn  time.Duration
	// Payload is opaque to the store: bytes the engine keeps with the record
	// (the sealed arguments of a call to resume over MCP). Get returns it;
	// List never does.
	Payload []byte
}

// ApprovalRecord is an approval as a store keeps it.
type ApprovalRecord struct {
	ApprovalRequest
	Status      ApprovalStatus
	RequestedAt time.Time
	ExpiresAt   time.Time
	// Votes are the approvals counted so far, oldest first, and the
	// rejection that ended the record, if any.
	Votes []Vote
	// Approver, Comment and DecidedAt are those of the vote that decided
	// the record (approved at the quorum, or rejected); zero while pending.
	Approver  Actor
	Comment   string
	DecidedAt time.Time
	// ConsumedBy is the execution that consumed the approval.
	ConsumedBy string
	ConsumedAt time.Time
	// LeaseUntil is when a consumed record without an outcome turns in_doubt.
	LeaseUntil time.Time
	// Outcome is how the consuming execution ended; the zero value means
	// none is recorded.
	Outcome Outcome
}

// Vote is one approver's verdict on a record.
type Vote struct {
	Approver Actor
	Approve  bool
	Comment  string
	At       time.Time
}

// Outcome is how the execution that consumed an approval ended, as
// recorded in its record. The zero value means no outcome.
type Outcome struct {
	// Status is ApprovalCompleted, ApprovalFailed or ApprovalInDoubt (an
	// attempt that may still be running was abandoned); zero means none.
	Status ApprovalStatus
	// Code is the name of the execution's final code: "OK" when
	// completed, "TIMEOUT", and so on.
	Code string
	// Late marks the result of an attempt that returned after its
	// execution had finalized, replacing an in_doubt outcome.
	Late bool
	// At is when the store recorded it (its own clock); stores set it.
	At time.Time
}

// Decision is an approver's vote on a pending record.
type Decision struct {
	Approve  bool
	Approver Actor
	Comment  string
	// Audience is the deployment deciding; a record of another audience is
	// not found. middleware.Engine.Decide sets it to the engine's.
	Audience string
}

// ConsumeRequest is what a resumed call presents to consume an approval.
type ConsumeRequest struct {
	Audience  string
	Procedure string
	Type      string
	// Quorum is the capability's approval quorum; zero means 1.
	Quorum int
	// Actor is the whole actor of the resumed call.
	Actor       Actor
	Digest      string
	ExecutionID string
	// PreviewDigest is the digest of the state the capability's preview
	// computed at resume; empty when the capability has no preview, and
	// then the record's is not compared.
	PreviewDigest string
	// Lease is how long the execution may run before a record it consumed
	// without an outcome is reported in_doubt.
	Lease time.Duration
}

// ConsumedApproval is the approval an execution consumed: what its handler
// sees through middleware.ExecutionFromContext, and what a store's Consume returns.
type ConsumedApproval struct {
	ID   string
	Type string
	// Approver, Comment and DecidedAt are those of the deciding vote.
	Approver  Actor
	Comment   string
	DecidedAt time.Time
}

// ApprovalFilter selects records for [ApprovalStore.List]. Audience and
// Tenant match exactly (the empty string is a tenant like any other) unless
// AnyTenant is set; stores apply them before the limit.
type ApprovalFilter struct {
	Audience string
	Tenant   string
	// AnyTenant lists every tenant's records, for operators.
	AnyTenant bool
	// Status selects one status (as of now); zero means any.
	Status ApprovalStatus
	// Limit caps the result; zero means 100.
	Limit int
}

// The sentinel errors of approval decisions. Stores return them (wrapped or
// not); the engine maps each to its code in one place.
var (
	ErrApprovalNotFound       = errors.New("agentsafe: approval not found")
	ErrApprovalPending        = errors.New("agentsafe: approval not decided yet")
	ErrApprovalRejected       = errors.New("agentsafe: approval rejected")
	ErrApprovalExpired        = errors.New("agentsafe: approval expired")
	ErrApprovalConsumed       = errors.New("agentsafe: approval already consumed")
	ErrApprovalInputMismatch  = errors.New("agentsafe: input differs from the approved input")
	ErrApprovalResumeMismatch = errors.New("agentsafe: approval is for another procedure or approval type")
	// ErrApprovalStale: the preview computed at resume differs from the
	// approved one: the state the approval was given for has changed.
	ErrApprovalStale = errors.New("agentsafe: the state the approval was given for has changed")
	// ErrNotPending: a decision on a record that is no longer pending.
	ErrNotPending = errors.New("agentsafe: approval is not pending")
	// ErrSelfApproval: the approver shares a principal (its ID or an
	// OnBehalfOf entry) with the requester, or, under a quorum, with an
	// earlier voter ([ErrAlreadyVoted], which is an ErrSelfApproval too).
	ErrSelfApproval = errors.New("agentsafe: approver may not decide their own request")
	// ErrAlreadyVoted: under a quorum, the approver shares a principal
	// with an earlier voter, so that party has voted already, directly or
	// through another delegate: a person's vote counts once. errors.Is
	// reports it as ErrSelfApproval too, so code that refuses that one
	// refuses this one.
	ErrAlreadyVoted error = alreadyVoted{}
	// ErrApproverNotAllowed: the approver has no id, an id or chain that
	// is not valid UTF-8, is in another tenant, or the store's approver
	// policy refused.
	ErrApproverNotAllowed = errors.New("agentsafe: approver not allowed to decide this approval")
	// ErrTooManyPending: the requester has too many pending approvals.
	ErrTooManyPending = errors.New("agentsafe: too many pending approvals for this actor")
)

// CheckApprover is the approver rule stores apply in Decide: the approver
// must have an id, an id and OnBehalfOf chain of valid UTF-8 (so that no
// store's encoding can make two approvers one, or one approver two), and
// must be in the requester's tenant (ErrApproverNotAllowed)
// and, unless allowSelf, must not be the requester or anyone in the
// requester's OnBehalfOf chain, nor act on behalf of any of them: no
// principal in common with the requester ([SharedPrincipal];
// ErrSelfApproval).
func CheckApprover(requester, approver Actor, allowSelf bool) error {
	if approver.ID == "" {
		return fmt.Errorf("%w: the approver has no id", ErrApproverNotAllowed)
	}
	invalid := func(id string) bool { return !utf8.ValidString(id) }
	if invalid(approver.ID) || slices.ContainsFunc(approver.OnBehalfOf, invalid) {
		return fmt.Errorf("%w: the approver's id or OnBehalfOf chain is not valid UTF-8", ErrApproverNotAllowed)
	}
	if approver.Tenant != requester.Tenant {
		return fmt.Errorf("%w: the approver is in tenant %q, the request in %q", ErrApproverNotAllowed, approver.Tenant, requester.Tenant)
	}
	if allowSelf {
		return nil
	}
	// The requester's principals and the approver's must be disjoint: an
	// approver who is the requester, is in its chain, or acts for either
	// is that party approving.
	if p, ok := SharedPrincipal(requester, approver); ok {
		return fmt.Errorf("%w: %s is a principal of the request and of the approver", ErrSelfApproval, p)
	}
	return nil
}

// SharedPrincipal returns a principal a and b have in common, and whether
// they have one. An actor's principals are its ID and every entry of its
// OnBehalfOf chain; two actors with disjoint principal sets are two
// parties, two that share one are that party twice (two assistants that
// both act for carol are carol once).
func SharedPrincipal(a, b Actor) (string, bool) {
	held := func(p string) bool { return p == b.ID || slices.Contains(b.OnBehalfOf, p) }
	if held(a.ID) {
		return a.ID, true
	}
	if i := slices.IndexFunc(a.OnBehalfOf, held); i >= 0 {
		return a.OnBehalfOf[i], true
	}
	return "", false
}

// SameActor reports whether a and b are the same whole actor: ID, Tenant,
// Kind and the OnBehalfOf chain, in order. A session acting for bob is
// never the session acting for alice.
func SameActor(a, b Actor) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.Kind == b.Kind && slices.Equal(a.OnBehalfOf, b.OnBehalfOf)
}

// alreadyVoted is ErrAlreadyVoted: its own error, that unwraps to
// ErrSelfApproval.
type alreadyVoted struct{}

func (alreadyVoted) Error() string { return "agentsafe: this party has voted already" }
func (alreadyVoted) Unwrap() error { return ErrSelfApproval }

// ErrConsumedByCaller is what [CheckConsume] returns for a Consume repeated
// by the execution that consumed the record: Consume is idempotent per
// execution, so the store answers it as the first Consume did, without a
// write. It never reaches the engine.
var ErrConsumedByCaller = errors.New("agentsafe: approval consumed by this execution already")

// CheckConsume applies Consume's checks to r, whose status as of the
// store's clock is status, in the contract's order: same audience and
// whole actor (else ErrApprovalNotFound: nothing is revealed), approved,
// unexpired, unconsumed (or [ErrConsumedByCaller]), same procedure,
// approval type and quorum (zero counted as 1), same digest, and — when
// req has a PreviewDigest — the same preview digest ([ErrApprovalStale]: a
// record without one is stale too, failing closed). A store that
// checks in a script or a statement applies the same order there and may
// use it to name why nothing changed.
func CheckConsume(r *ApprovalRecord, status ApprovalStatus, req ConsumeRequest) error {
	if r.Audience != req.Audience || !SameActor(r.Requester, req.Actor) {
		return ErrApprovalNotFound
	}
	switch status {
	case ApprovalApproved:
	case ApprovalPending:
		return ErrApprovalPending
	case ApprovalRejected, ApprovalCancelled:
		return ErrApprovalRejected
	case ApprovalExpired:
		return ErrApprovalExpired
	default: // consumed, completed, failed, in_doubt
		if r.ConsumedBy == req.ExecutionID {
			return ErrConsumedByCaller
		}
		return ErrApprovalConsumed
	}
	if r.Procedure != req.Procedure || r.Type != req.Type || max(r.Quorum, 1) != max(req.Quorum, 1) {
		return ErrApprovalResumeMismatch
	}
	if r.Digest != req.Digest {
		return ErrApprovalInputMismatch
	}
	if Stale(r.PreviewDigest, req.PreviewDigest) {
		return ErrApprovalStale
	}
	return nil
}

// Stale reports whether a record whose preview digest is recorded is stale
// for a resume whose preview computed resumed: the resume has a preview
// digest (its capability has a preview) and the record's differs from it
// (or the record has none). A resume without a preview digest is never
// stale.
func Stale(recorded, resumed string) bool {
	return resumed != "" && recorded != resumed
}

// CheckRequest refuses an approval request Create must not store: a
// malformed id, an expiry that is not in the future, no requester, a
// negative quorum.
func CheckRequest(req ApprovalRequest) error {
	switch {
	case !ValidApprovalID(req.ID):
		return fmt.Errorf("agentsafe: malformed approval id %q", req.ID)
	case req.ExpiresIn <= 0:
		return fmt.Errorf("agentsafe: ExpiresIn must be positive (got %s)", req.ExpiresIn)
	case req.Requester.ID == "":
		return errors.New("agentsafe: an approval needs a requester")
	case req.Quorum < 0:
		return fmt.Errorf("agentsafe: Quorum must not be negative (got %d)", req.Quorum)
	}
	return nil
}

// ErrRepeatedVote is what [CheckVote] returns for a vote the record
// already holds (the same whole approver, the same verdict): Decide answers
// it with the record unchanged and no error. It never reaches the engine.
var ErrRepeatedVote = errors.New("agentsafe: the same vote again")

// CheckVote applies Decide's checks after the approver's own (the
// requester rule and the policy, which the store runs first) to r, whose
// status as of the store's clock is status, in the contract's order: same
// audience (else ErrApprovalNotFound), not a repeat ([ErrRepeatedVote]),
// pending and unexpired, and a voter distinct from every earlier one
// ([CheckVoter]). A store that checks in a script or a statement applies
// the same order there and may use it to name why nothing changed.
func CheckVote(r *ApprovalRecord, status ApprovalStatus, d Decision, allowSelf bool) error {
	if r.Audience != d.Audience {
		return ErrApprovalNotFound
	}
	if slices.ContainsFunc(r.Votes, func(v Vote) bool { return v.Approve == d.Approve && SameActor(v.Approver, d.Approver) }) {
		return ErrRepeatedVote
	}
	switch {
	case status == ApprovalExpired && r.DecidedAt.IsZero():
		return ErrApprovalExpired
	case status != ApprovalPending:
		return fmt.Errorf("%w: it is %s", ErrNotPending, status)
	}
	return CheckVoter(*r, d.Approver, allowSelf)
}

// CheckOutcome refuses what is not an outcome for RecordOutcome: the zero
// Outcome, or a status other than completed, failed or in_doubt.
func CheckOutcome(o Outcome) error {
	switch o.Status {
	case ApprovalCompleted, ApprovalFailed, ApprovalInDoubt:
		return nil
	case 0:
		return errors.New("agentsafe: RecordOutcome needs an outcome (the zero Outcome means none)")
	}
	return fmt.Errorf("agentsafe: %s is not an outcome for RecordOutcome (completed, failed or in_doubt)", o.Status)
}

// CheckVoter is the rule for a further vote on a record under a quorum:
// the approver passes [CheckApprover] against the requester, and is
// distinct from every earlier voter: their principal sets (ID and
// OnBehalfOf chain, [SharedPrincipal]) are disjoint. A voter who shares a
// principal with an earlier one is that party voting again, directly or
// through another delegate, and is refused ([ErrAlreadyVoted], an
// ErrSelfApproval), whichever verdict it brings: the approver learns that
// the vote did not count, where a silent no-op would read as counted, and
// one party never both approves and rejects. A repeat of the approver's
// own earlier vote is for the store to treat as a no-op before calling it
// ([CheckVote]).
func CheckVoter(rec ApprovalRecord, approver Actor, allowSelf bool) error {
	if err := CheckApprover(rec.Requester, approver, allowSelf); err != nil {
		return err
	}
	for _, v := range rec.Votes {
		if p, ok := SharedPrincipal(v.Approver, approver); ok {
			return fmt.Errorf("%w: %s voted as %s", ErrAlreadyVoted, p, v.Approver.ID)
		}
	}
	return nil
}
