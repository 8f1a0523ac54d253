// Package resultstore holds the implementations of [store.ResultStore],
// where the results of calls that carry a caller's Idempotency-Key (or
// fall within a capability's dedup window) are kept so that a repeat is
// replayed instead of run again: [Memory], for one process, and [Redis],
// for every server instance that shares a Redis deployment.
//
//	results := resultstore.NewMemory()
//	eng, err := middleware.New(reg,
//		middleware.WithResultStore(results),
//		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: key}))
//
// Both apply the same rules (see the contract on store.ResultStore), and
// both pass conformance.RunResultStore. A store that fails makes the
// engine fail closed: IDEMPOTENCY_UNAVAILABLE, nothing runs. Never fall
// back from Redis to memory silently.
package resultstore
