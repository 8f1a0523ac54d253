package middleware

import (
	"context"

	"github.com/agentsafe/agentsafe/internal/ids"
)

// Actor is who a call is for. It comes only from verified credentials,
// through the function given with [WithActor], never from a request body.
type Actor struct {
	ID     string
	Tenant string
	// Kind says what the actor is, for example "agent", "user" or "service".
	Kind string
	// OnBehalfOf is the delegation chain, nearest first: the ids of those the
	// actor acts for. None of them may approve the actor's requests.
	OnBehalfOf []string
}

// Ref returns the actor's id and tenant, as events carry them.
func (a Actor) Ref() ActorRef { return ActorRef{ID: a.ID, Tenant: a.Tenant} }

// ActorFunc returns the actor of a call from its context, where the
// application's authentication put it. An error fails the call closed with
// CodeUnauthenticated.
type ActorFunc func(ctx context.Context) (Actor, error)

// Execution is what a handler may know about the execution it runs in.
type Execution struct {
	// ID is the execution's id: the same for every attempt of it.
	ID string
	// IdempotencyKey is stable across runtime retries of one execution and
	// unique across executions. Pass it to the system where the effect lives.
	IdempotencyKey string
	// Attempt numbers the attempt running this handler, from 1.
	Attempt   int
	Procedure string
	Actor     Actor
	// Approval is the approval this execution consumed, or nil.
	Approval *ConsumedApproval
}

// SubKey returns a stable idempotency key for one labelled downstream call
// of the execution, so two different downstream calls get two different keys
// and each keeps its own across retries. An empty label gives IdempotencyKey.
func (x Execution) SubKey(label string) string {
	if label == "" {
		return x.IdempotencyKey
	}
	return ids.Derive(idempotencyKeyPrefix, x.IdempotencyKey, label)
}

// ExecutionFromContext returns the execution a handler's context belongs to.
// It reports false outside a governed execution.
func ExecutionFromContext(ctx context.Context) (Execution, bool) {
	a, ok := ctx.Value(attemptKey{}).(*attempt)
	if !ok {
		return Execution{}, false
	}
	x := a.x
	return Execution{
		ID:             x.id,
		IdempotencyKey: x.idempotencyKey,
		Attempt:        a.n,
		Procedure:      x.proc,
		Actor:          x.actor,
		Approval:       x.approval,
	}, true
}

const (
	executionIDPrefix    = "exe_"
	idempotencyKeyPrefix = "idk_"
	approvalIDPrefix     = "apr_"
)

// ValidApprovalID reports whether s has the form of an approval id: "apr_"
// and 32 lowercase hex digits.
func ValidApprovalID(s string) bool { return ids.Valid(approvalIDPrefix, s) }

// NewApprovalID returns a fresh approval id for stores.
func NewApprovalID() string { return ids.New(approvalIDPrefix) }
