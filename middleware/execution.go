package middleware

import (
	"context"

	"github.com/agentsafe/agentsafe/middleware/store"

	"github.com/agentsafe/agentsafe/internal/ids"
)

// ref returns an actor's id and tenant, as events carry them.
func ref(a Actor) ActorRef { return ActorRef{ID: a.ID, Tenant: a.Tenant} }

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
	Approval *store.ConsumedApproval
	// ApprovedState is the State of the capability's preview that the
	// consumed approval was given for, computed again before it was
	// consumed; nil without a preview. The preview, the consumption and
	// the handler's write are not one atomic step: make the write
	// conditional on it in the handler's own transaction (UPDATE … WHERE
	// version = $approved), and return [NoEffect] when it finds the state
	// changed.
	ApprovedState []byte
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
		Procedure:      x.proc(),
		Actor:          x.actor,
		Approval:       x.approval(),
		ApprovedState:  x.approvedState(),
	}, true
}

const (
	executionIDPrefix    = "exe_"
	idempotencyKeyPrefix = "idk_"
)
