package middleware

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// SideEffect says what a procedure does to the world. It is never inferred:
// the zero value, SideEffectUnspecified, is rejected when the engine is built.
type SideEffect uint8

// The side effects, from harmless to open-world.
const (
	SideEffectUnspecified SideEffect = iota
	SideEffectNone                   // computes an answer, touches nothing
	SideEffectRead                   // reads state, changes none
	SideEffectWrite                  // changes state the service owns
	SideEffectDestructive            // deletes or overwrites in a way that cannot be undone
	SideEffectExternal               // acts on a system outside the service (email, payment)
)

var sideEffectNames = [...]string{"unspecified", "none", "read", "write", "destructive", "external"}

func (s SideEffect) String() string {
	if int(s) < len(sideEffectNames) {
		return sideEffectNames[s]
	}
	return fmt.Sprintf("SideEffect(%d)", uint8(s))
}

// WriteLike reports whether s is write, destructive or external: the side
// effects that are never retried at run time unless declared idempotent.
func (s SideEffect) WriteLike() bool {
	return s == SideEffectWrite || s == SideEffectDestructive || s == SideEffectExternal
}

func (s SideEffect) valid() bool { return s > SideEffectUnspecified && s <= SideEffectExternal }

// Risk is informational: it travels on events and approval records. The zero
// value is RiskLow.
type Risk uint8

// The risk levels.
const (
	RiskLow Risk = iota
	RiskMedium
	RiskHigh
	RiskCritical
)

var riskNames = [...]string{"low", "medium", "high", "critical"}

func (r Risk) String() string {
	if int(r) < len(riskNames) {
		return riskNames[r]
	}
	return fmt.Sprintf("Risk(%d)", uint8(r))
}

func (r Risk) valid() bool { return r <= RiskCritical }

// Surface is where a call reaches a capability.
type Surface uint8

// The surfaces. A capability's Exposure lists those it is served on.
const (
	// SurfaceRPC: Connect, gRPC, gRPC-Web and Twirp.
	SurfaceRPC Surface = iota + 1
	// SurfaceHTTP: a net/http route.
	SurfaceHTTP
	// SurfaceMCP: a tool of an MCP bridge; never exposed unless listed.
	SurfaceMCP
)

var surfaceNames = [...]string{"", "rpc", "http", "mcp"}

func (s Surface) String() string {
	if int(s) < len(surfaceNames) && s > 0 {
		return surfaceNames[s]
	}
	return fmt.Sprintf("Surface(%d)", uint8(s))
}

func (s Surface) valid() bool { return s >= SurfaceRPC && s <= SurfaceMCP }

// Capability is the safety metadata of one procedure. Zero values mean the
// defaults listed on each field.
type Capability struct {
	// SideEffect is required; the zero value is invalid.
	SideEffect SideEffect
	// Risk defaults to RiskLow.
	Risk Risk
	// Description is for people and tool listings.
	Description string
	// Idempotent is a reviewable claim that repeating the call with the same
	// input and idempotency key is safe because the handler deduplicates. It
	// is required before a write-like capability may be retried.
	Idempotent bool
	// Timeout is the deadline of ONE attempt. Zero means the engine default
	// (30s unless [WithDefaults] says otherwise); negative is invalid.
	Timeout time.Duration
	// Retry configures runtime retries. The zero value never retries.
	Retry Retry
	// Approval gates every call behind a human decision.
	Approval Approval
	// ToolName overrides the name under which the procedure is listed as a
	// tool (MCP). Empty means one derived from the procedure.
	ToolName string
	// Streaming marks a streaming procedure. The engine sets it from the
	// method descriptor it knows; a net/http route in stream mode sets it
	// in its registry entry. It forbids Approval.Required.
	Streaming bool
	// Exposure lists the surfaces the capability is served on. Empty means
	// rpc and http; MCP is opt-in. A call on a surface not listed is
	// answered as if the procedure had no handler.
	Exposure []Surface
	// Dedup is the replay window for repeats without a caller
	// Idempotency-Key: a repeat of the same call (actor, procedure, input)
	// within the window after completion replays the stored result. Zero,
	// the default, turns it off; negative is invalid. It needs a result
	// store.
	Dedup time.Duration
	// Reconcile finds out whether an execution left in doubt (see
	// [WithResultStore]) had its effect, given the idempotency key its
	// handler saw (key, the same for every call with the caller's key):
	// Done stores and replays its result; not Done runs the call again
	// under the same key; an error keeps the key in doubt. It is asked by
	// the first repeat of a key in doubt, alone: other repeats meanwhile
	// are IDEMPOTENCY_IN_FLIGHT. After an approval was consumed, the key
	// its handler saw is the one derived from the approval: a repeat of a
	// call that needs an approval is reconciled only when it carries the
	// Agentsafe-Approval-Id of the approval the execution in doubt
	// consumed, and is IDEMPOTENCY_IN_DOUBT otherwise. Nil, the default: a
	// repeat of a key in doubt is IDEMPOTENCY_IN_DOUBT.
	Reconcile func(ctx context.Context, key string) (Reconciled, error)
	// Preview computes, from the server's current state, the effect a call
	// would have ("refund 420.00 EUR of order 77 to card ****1234"): its
	// Text is what approvers see first, and the approval is bound to the
	// digest of its State. It is called when an approval is requested and
	// again at resume, before the approval is consumed: a State whose
	// digest differs refuses the resume APPROVAL_STALE (nothing runs,
	// nothing is consumed). An error, a panic or a call that outlasts the
	// capability's Timeout fails closed with PREVIEW_UNAVAILABLE; a Text
	// over 4 KiB is an application bug (PREVIEW_UNAVAILABLE, not
	// retryable, and a warning). The handler finds the approved State in
	// [Execution].ApprovedState, to make its write conditional on it. Nil,
	// the default, binds approvals to the input alone. For a capability
	// declared by method options, see [WithPreview].
	Preview func(ctx context.Context, in PreviewInput) (Preview, error)
	// Inline declares that the handler honours its context — it returns
	// soon after the context ends, as database/sql, pgx and net/http
	// clients given the context do — so that unary attempts run on the
	// caller's goroutine, with no hand-off to an attempt goroutine. What
	// changes: an attempt is never abandoned, so the execution finalizes
	// when the handler returns, however late; a result returned after the
	// attempt's context ended is still discarded (TIMEOUT or CANCELLED) and
	// recorded at once, late, by a consumed approval or a caller's key, and
	// no [EventAbandonedResult] follows; an attempt that returns more than
	// [Defaults].OverrunGrace after its context ended emits
	// [EventDeadlineOverrun] and a rate-limited warning, so a handler that
	// breaks the promise is found. Retries, backoff, panics and
	// cancellation are as without it; streams are unaffected. The default,
	// false, gives every attempt a goroutine of its own, so that a handler
	// that ignores its context cannot hold the caller past its deadline.
	Inline bool
	// Budgets bound what the capability's calls may spend over rolling
	// windows, across instances (see [Budget]); they need a budget store
	// ([WithBudgetStore]). None by default.
	Budgets []Budget
}

// Exposed reports whether the capability is served on s.
func (c Capability) Exposed(s Surface) bool {
	if len(c.Exposure) == 0 {
		return s == SurfaceRPC || s == SurfaceHTTP
	}
	return slices.Contains(c.Exposure, s)
}

// Retry configures runtime retries of one capability.
type Retry struct {
	// MaxRetries is the number of runtime re-attempts AFTER the first run:
	// 1 means at most 2 runs of the handler. (gRPC's maxAttempts counts the
	// first run; this does not.) Zero, the default, never retries. A
	// write-like capability may only set it when Idempotent is true.
	MaxRetries int
	// Backoff is the base of the exponential backoff: Backoff·2^(n−1) is
	// waited before re-attempt n. Zero means 250ms; negative is invalid.
	Backoff time.Duration
	// RetryOn may veto a retry the engine would otherwise make, by returning
	// false. A panic in it counts as a veto. Nil vetoes nothing.
	RetryOn func(*Error) bool
}

// Approval gates a capability behind a human decision.
type Approval struct {
	// Required makes every call wait for an approval.
	Required bool
	// Type, for example "manager", is shown to approvers and bound into the
	// approval record.
	Type string
	// ExpiresIn is the lifetime of a pending or approved record, counted from
	// the request. Zero means 15 minutes; negative is invalid.
	ExpiresIn time.Duration
	// Quorum is how many distinct approvers must approve before the call
	// may run: none of them sharing a principal (ID or OnBehalfOf entry)
	// with the requester, and no two sharing one with each other, so two
	// delegates of one person count once. One rejection rejects. Zero
	// means 1; negative is invalid. It is bound into the record, like Type.
	Quorum int
}

// Hints are the tool-listing hints (MCP tool annotations) derived from a
// capability, so that what a listing promises never drifts from what the
// engine enforces.
type Hints struct {
	ReadOnly    bool // side effect none or read
	Destructive bool // side effect destructive
	Idempotent  bool // declared idempotent
	OpenWorld   bool // side effect external
}

// Hints derives the tool-listing hints of c.
func (c Capability) Hints() Hints {
	return Hints{
		ReadOnly:    c.SideEffect == SideEffectNone || c.SideEffect == SideEffectRead,
		Destructive: c.SideEffect == SideEffectDestructive,
		Idempotent:  c.Idempotent,
		OpenWorld:   c.SideEffect == SideEffectExternal,
	}
}

// retryAllowed is the retry-safety rule of the design note, checked at build
// time by validation and again at run time by the engine.
func (c Capability) retryAllowed() bool {
	if c.Retry.MaxRetries <= 0 {
		return false
	}
	return !c.SideEffect.WriteLike() || c.Idempotent
}
