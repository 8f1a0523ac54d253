// Package approvalstore holds the implementations of
// [store.ApprovalStore]: [Memory], the embedded default for one
// process, and [Redis], which makes an approval execute at most once across
// every server instance that shares a Redis deployment.
//
//	store := approvalstore.NewMemory()
//	eng, err := middleware.New(reg, middleware.WithApprovalStore(store), middleware.WithActor(actorOf))
//
// Both apply the same rules (see the contract on store.ApprovalStore),
// and both pass conformance.RunStore. Never fall back from Redis to memory
// silently: a store that fails makes the engine fail closed.
//
// # Redis
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
//	store, err := approvalstore.NewRedis(rdb)
//
// NewRedis takes any redis.UniversalClient: a single node
// (redis.NewClient), a Sentinel-managed primary (redis.NewFailoverClient,
// which follows failovers), or a Cluster (redis.NewClusterClient). Each
// record is one hash whose key is its own hash tag, and every decision on
// it (Decide, Consume, Release, RecordOutcome) is one Lua script over that
// one key,
// with all checks before its single write; so a Cluster needs no
// cross-slot work and any number of instances may race for one approval:
// exactly one consumes it. Expiry is always judged by Redis TIME inside the
// script, never by an instance's clock; key TTLs only collect garbage
// (expiry, or the lease once consumed, plus [WithRetention]). Scripts are
// loaded by NewRedis and sent again whenever Redis has lost them. When
// Redis fails, the store returns the error as it is, and the engine answers
// APPROVAL_UNAVAILABLE with nothing run. go-redis retries commands on
// network errors; every script is safe to repeat.
//
// List SCANs every master, keeping the records of the filter's audience
// and tenant as it goes (so another tenant's records never take their
// place under the limit): it is for consoles and audits, not hot paths.
//
// # What single use depends on
//
// The scripts make one consumption win on one primary. Whether a
// consumption can be undone depends on the deployment:
//
//   - maxmemory-policy noeviction. Status and consumer live in one hash, so
//     an evicted record is only ever unknown (APPROVAL_NOT_FOUND: fail
//     closed), but eviction also forgets pending records' deduplication;
//     with noeviction a full Redis refuses writes and the engine fails
//     closed instead.
//   - Persistence that never rolls back. A Redis restarted empty loses its
//     approvals (they fail closed: ask again). A Redis restarted from an
//     older RDB snapshot, or from an AOF with appendfsync everysec after a
//     crash, can bring back an approved record whose consumption it lost,
//     and that approval could execute again. Use appendonly yes with
//     appendfsync always where a repeat matters, or no persistence at all.
//   - Replication is asynchronous. A failover may promote a replica that
//     never received a consumption; the approval is then consumable again.
//     [WithWait] closes most of that window: after each consumption, WAIT
//     (pipelined on the same connection of the record's master) must see
//     the given number of replicas acknowledge it, or the store gives the
//     consumption back and the engine answers APPROVAL_UNAVAILABLE and
//     runs nothing (the approval stays approved: the caller may try
//     again). NewRedis refuses WithWait(n) when a master has fewer than n
//     replicas connected. Set min-replicas-to-write and
//     min-replicas-max-lag on the primary so that it refuses writes when
//     its replicas are gone. WAIT is not consensus: a failover may still
//     promote a replica that did not acknowledge, so the engine also
//     derives the execution's idempotency key from the approval id, and the
//     downstream sees one key even if an approval ever ran twice. WAITAOF
//     (Redis 7.2) is not used.
//   - Synchronized clocks (NTP) across Redis machines: after a failover,
//     expiry is judged by the new primary's TIME.
//
// # Concurrent consumptions
//
// A consumption is one EVALSHA. One that finds another in flight on the
// same node (a Cluster's master, a Ring's shard) is queued, and the
// consumptions queued meanwhile go to that node together, as one pipeline
// (a few run at once per node), so that under load Redis reads and
// answers many per system call instead of one: each is still the same
// atomic script over one key, and a slow node holds up only its own keys.
// A lone consumption is sent at once, as before. A queued consumption
// whose caller leaves before it is sent returns the context's error and
// never reaches Redis; once sent, it waits for its reply, so that the
// caller knows whether the approval was consumed. A pipeline runs under
// no caller's cancellation but under the latest of its callers'
// deadlines, when every one has a deadline (go-redis applies deadlines
// with ContextTimeoutEnabled), and otherwise under the client's timeouts;
// go-redis hooks see that context, not the caller's. With [WithWait]
// every consumption runs alone, followed by its WAIT.
//
// # Keys
//
// With the default prefix "agentsafe:apr" (see [WithKeyPrefix]), a record
// is the hash {agentsafe:apr:apr_…}, and each (audience, requester tenant
// and id) has a pending index {agentsafe:apr:pending:<hash>} that Create
// uses to cap pending requests ([WithMaxPendingPerActor]) and to return the
// same record for a repeated call: the same procedure and digest by the
// same whole actor (kind and OnBehalfOf chain too). On a Cluster the two may live on different
// nodes, so Create writes the record first and claims its place in the
// index second; Create checks every index entry it acts on against the
// records, and nothing else reads the index. A lost index (deleted, or
// evicted under another policy than noeviction) forgets the requester's
// pending records for deduplication and the cap until they expire: a
// duplicate pending record at worst, never a wrong decision.
package approvalstore
