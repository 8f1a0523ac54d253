// Package approvalstore holds the implementations of
// [middleware.ApprovalStore]: [Memory], the embedded default for one
// process, and [Redis], which makes an approval execute at most once across
// every server instance that shares a Redis deployment.
//
//	store := approvalstore.NewMemory()
//	eng, err := middleware.New(reg, middleware.WithApprovalStore(store), middleware.WithActor(actorOf))
//
// Both apply the same rules (see the contract on middleware.ApprovalStore),
// and both pass conformance.RunStore. Never fall back from Redis to memory
// silently: a store that fails makes the engine fail closed.
package approvalstore
