// Package resultstore holds the implementations of [store.ResultStore],
// where the results of calls that carry a caller's Idempotency-Key (or
// fall within a capability's dedup window) are kept so that a repeat is
// replayed instead of run again: [Memory], for one process, and [Redis],
// for every server instance that shares a Redis deployment.
//
//	results := resultstore.NewMemory()
//	eng, err := middleware.New(reg,
//		middleware.WithResultStore(results),
//		middleware.WithResultKey(middleware.ResultKey{ID: "2026-12", Key: key}))
//
// Both apply the same rules (see the contract on store.ResultStore), and
// both pass conformance.RunResultStore. A store that fails makes the
// engine fail closed: IDEMPOTENCY_UNAVAILABLE, nothing runs. Never fall
// back from Redis to memory silently.
//
// # Redis
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
//	results, err := resultstore.NewRedis(rdb)
//
// NewRedis takes any redis.UniversalClient: a single node
// (redis.NewClient), a Sentinel-managed primary (redis.NewFailoverClient)
// or a Cluster (redis.NewClusterClient). A key's record is one hash whose
// Redis key is its own hash tag, {agentsafe:idk:idk_…} with the default
// prefix ([WithKeyPrefix]), and every step on it (Claim, Complete,
// Release, MarkInDoubt) is one Lua script over that one key, with all its
// checks before its single write: so a Cluster needs no cross-slot work,
// a claim is one round trip, and any number of instances may race for one
// key: exactly one holds it. Leases and retention are judged by Redis
// TIME inside the script, never by an instance's clock; key TTLs only
// collect garbage, a second after the scripts call a record gone. Scripts
// are loaded by NewRedis and sent again whenever Redis has lost them
// (NOSCRIPT). Every script is safe to repeat after a lost reply (go-redis
// retries on network errors, and the engine claims again for the same
// execution); a claim repeated by its holder answers as the first did.
//
// What running a key once depends on, as for approvals
// (approvalstore): maxmemory-policy noeviction (an evicted record is
// forgotten, and its key would run again), persistence that never rolls
// back (a Redis restarted from an older snapshot forgets results and
// claims), and a failover that may promote a replica without the latest
// claim. The handler's idempotency key is derived from the caller's, the
// same on every run of one key, so a downstream that deduplicates by it
// still sees one effect.
package resultstore
