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
// # Quota
//
// Every record belongs to an owner, the audience and whole actor the
// engine derived its key for, and a claim carries the owner's quota
// (middleware.WithResultQuota: by default 1,000 unexpired results and 64
// MiB of stored results per actor). Both stores count in the claim's own
// atomic step, so claims racing for one owner never pass it: a claim of a
// new key for an owner at its quota answers store.ClaimQuotaExceeded
// (the engine's IDEMPOTENCY_QUOTA_EXCEEDED), and nothing is written. A
// result's bytes count from when it is stored, and records stop counting
// once gone (past their retention, or a read's claim past its lease). So
// one caller can never fill a store that other callers share.
//
// # Redis
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
//	results, err := resultstore.NewRedis(rdb)
//
// NewRedis takes any redis.UniversalClient: a single node
// (redis.NewClient), a Sentinel-managed primary (redis.NewFailoverClient)
// or a Cluster (redis.NewClusterClient). A key's record is one hash in its
// owner's hash tag, {agentsafe:idk:own_…}:idk_… with the default prefix
// ([WithKeyPrefix]), beside the owner's quota index in the same tag: a
// sorted set of its records by when each is gone
// ({agentsafe:idk:own_…}:records) and the sizes of its stored results
// ({agentsafe:idk:own_…}:bytes). Every step on a key (Claim, Complete,
// Release, MarkInDoubt) is one Lua script over those keys, with all its
// checks before its writes: so a Cluster needs no cross-slot work, the
// quota is counted atomically with the claim (on a Cluster too: the
// owner's counter and its records share the hash tag, and no second,
// compensating step is needed), a claim is one round trip, and any number
// of instances may race for one key: exactly one holds it. One caller's
// records live on one node of a Cluster. A claim drops at most 256 gone
// records from the index (a bounded step, each claim adds at most one);
// gone records are never counted, though their bytes may be until they
// are dropped, which errs toward refusing. Leases and retention are judged by Redis
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
// claim. Under noeviction a Redis that fills refuses every write, an
// approval's too: the quota bounds each caller, so size the Redis for the
// callers you expect times their quota, lower the quota, or give results a
// Redis of their own when memory is tight. The handler's idempotency key is derived from the caller's, the
// same on every run of one key, so a downstream that deduplicates by it
// still sees one effect.
package resultstore
