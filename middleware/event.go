package middleware

import (
	"context"
	"time"
)

// EventType names an audit event.
type EventType string

// The event types. Every execution emits EventRequested first and exactly one
// of EventCompleted, EventFailed or EventCancelled as its final event (an
// EventAbandonedResult may follow it, when an attempt left running returns).
// EventApproved and EventRejected are not part of an execution's run: they
// are emitted by [Engine.Decide] and carry the ExecutionID of the execution
// that requested the approval.
const (
	EventRequested         EventType = "capability.requested"
	EventApprovalRequested EventType = "capability.approval_requested"
	// EventApprovalVote is one approver's vote on a record that needs a
	// quorum of several; EventApproved follows once, at the last vote
	// needed.
	EventApprovalVote     EventType = "capability.approval_vote"
	EventApproved         EventType = "capability.approved"
	EventRejected         EventType = "capability.rejected"
	EventApprovalConsumed EventType = "capability.approval_consumed"
	EventApprovalDenied   EventType = "capability.approval_denied"
	// EventBudgetExceeded reports a call that would take a budget past
	// its limit (Budget, Amount, Spent, Limit; RetryAfter for a deny
	// budget): refused, or sent to the approval gate.
	EventBudgetExceeded EventType = "capability.budget_exceeded"
	EventStarted        EventType = "capability.started"
	EventRetried        EventType = "capability.retried"
	// EventAbandonedResult reports that an attempt abandoned at its deadline
	// returned after all, and whether it succeeded: an effect may have landed
	// after the caller was told TIMEOUT. An attempt that returns its
	// context's error stopped because it was told to and is not reported.
	EventAbandonedResult EventType = "capability.abandoned_result"
	// EventDeadlineOverrun reports that an attempt of an Inline capability
	// returned more than [Defaults].OverrunGrace after its context ended:
	// its handler did not honour its context, and held the caller for
	// Duration past the attempt's end. It precedes the final event.
	EventDeadlineOverrun EventType = "capability.deadline_overrun"
	// EventReplayed is the final event of an execution answered with a
	// stored result (its ReplayOf names the execution that produced it):
	// nothing ran.
	EventReplayed  EventType = "capability.replayed"
	EventCompleted EventType = "capability.completed"
	EventFailed    EventType = "capability.failed"
	EventCancelled EventType = "capability.cancelled"

	// EventApprovalStale reports a resume refused because the capability's
	// preview, computed again, differs from the approved one: the state
	// the approval was given for has changed. Nothing was consumed.
	EventApprovalStale EventType = "capability.approval_stale"
)

// Final reports whether t ends an execution.
func (t EventType) Final() bool {
	return t == EventCompleted || t == EventFailed || t == EventCancelled || t == EventReplayed
}

// Event is one audit record. It never carries a request or response payload:
// only ids, the input digest, codes and counts. Fields a type does not use
// are zero.
type Event struct {
	Type        EventType
	Time        time.Time
	ExecutionID string
	Procedure   string
	Actor       ActorRef
	// InputDigest is keyed (HMAC) when the engine has a digest key.
	InputDigest string
	SideEffect  SideEffect
	Risk        Risk
	// Attempt is the attempt an event is about (started, retried,
	// deadline_overrun, abandoned_result); Attempts the count on final
	// events.
	Attempt           int
	Attempts          int
	PreviousErrorCode Code
	Code              Code
	Retryable         bool
	// Duration is the execution's on final events, on approved and
	// rejected how long the record waited for the decision (store clock),
	// and on deadline_overrun how long after its context ended the
	// attempt returned (the overrun).
	Duration   time.Duration
	ApprovalID string
	Approver   ActorRef
	Comment    string
	// Reason says why an approval was requested or denied.
	Reason string
	// Succeeded, on abandoned_result, says whether the late attempt succeeded:
	// an effect may have landed after the caller was told TIMEOUT.
	Succeeded bool
	// Error is the redacted text of the underlying error.
	Error string
	// Stack is the handler's stack when it panicked.
	Stack string
	// ReplayOf, on capability.replayed, is the execution whose stored
	// result was replayed.
	ReplayOf string
	// Budget names a budget, with the call's Amount, what the window has
	// Spent (on started with the call's reservation, on budget_exceeded
	// without it) and its Limit: on capability.budget_exceeded, and on
	// capability.started the budget nearest its limit (the largest share
	// spent).
	Budget               string
	Amount, Spent, Limit int64
	// RetryAfter, on budget_exceeded, is when enough of the window frees.
	RetryAfter time.Duration
}

// ActorRef identifies an actor on events without its delegation chain.
type ActorRef struct {
	ID     string
	Tenant string
}

// EventSink receives events. Each sink gets them through a bounded queue
// and a worker of its own ([WithEventSink]): in order within one
// execution, and never at the cost of the execution or of another sink. A
// sink that panics, or whose call overruns its bound ([SinkTimeout]),
// loses events, which are counted ([Engine.Stats]); it never breaks or
// stalls an execution. [NewSlogSink] logs them; package agentsafeotel
// traces them.
type EventSink interface {
	HandleEvent(ctx context.Context, e Event)
}

// EventSinkFunc adapts a function to [EventSink].
type EventSinkFunc func(ctx context.Context, e Event)

// HandleEvent calls f.
func (f EventSinkFunc) HandleEvent(ctx context.Context, e Event) { f(ctx, e) }
