// Package agentsafepg keeps agentsafe's approvals, stored results, budgets
// and audit trail in PostgreSQL, for services whose system of record is
// PostgreSQL: the approval, the replayable result, the effect and the
// evidence live in one database. It is a package of its own so that
// importing approvalstore or resultstore never links pgx.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	if err := agentsafepg.Migrate(ctx, pool); err != nil { ... } // or apply agentsafepg.Migrations() yourself
//	approvals, err := agentsafepg.NewApprovalStore(pool)
//	results, err := agentsafepg.NewResultStore(pool)
//	budgets, err := agentsafepg.NewBudgetStore(pool)
//	audit, err := agentsafepg.NewAuditSink(pool)
//	defer audit.Close(ctx)
//	eng, err := middleware.New(reg,
//		middleware.WithApprovalStore(approvals),
//		middleware.WithResultStore(results),
//		middleware.WithResultKey(key),
//		middleware.WithBudgetStore(budgets),
//		middleware.WithAuditSink(audit))
//
// Everything lives in the schema "agentsafe", created by the versioned SQL
// of [Migrations]: [Migrate] applies it, or an application applies the
// files with its own tool.
//
// # Approvals
//
// [ApprovalStore] implements the approval store contract of package
// middleware/store: one row per record, every state change one statement
// that checks before it writes, expiry and leases decided with the
// database clock. An approval executes at most once across every instance
// that shares the database.
//
// # Results
//
// [ResultStore] implements the result store contract of package
// middleware/store, for calls that carry a caller's Idempotency-Key (or
// fall within a capability's dedup window): one row per key; Claim,
// Complete and MarkInDoubt one call of a SQL function that takes the key's
// row lock, checks and writes; Release one conditional DELETE; leases and
// retention decided with the database clock. Any number of instances may
// race for one key: exactly one holds it, and a repeat is replayed from
// the stored result. A claim of a new key deletes a few records that are
// gone, so the table does not grow without bound.
//
// Each record belongs to an owner (the audience and whole actor the engine
// derived its key for) and a claim of a new key counts the owner's live
// records and stored bytes against the claim's quota
// (middleware.WithResultQuota) in the same call, under a per-owner
// advisory lock held to the end of that statement's transaction: claims
// racing for one owner never pass its quota. Migration 0004 adds the
// owner; results stored before it have none, and are not replayed after it.
//
// Under a quorum (middleware.Approval.Quorum), a vote counts only when the
// voter's principals (id and OnBehalfOf chain) are disjoint from every
// earlier voter's, checked under the record's row lock (migration 0005):
// two assistants acting for one person are that person once.
//
// # Budgets
//
// [BudgetStore] implements the budget store contract of package
// middleware/store: a row per budget key and one per reservation
// (migration 0009). Reserve is one call of a SQL function whose first
// statement locks the key's row, then trims what aged out of the window,
// sums, checks and adds, by the database clock: in no window do the
// reservations of a key pass its limit, on any number of instances.
//
// # Failover
//
// Under failover, single use and run-once hold as far as the replication
// does. With synchronous replication (synchronous_commit on or
// remote_apply, a synchronous_standby_names quorum, and a failover
// manager that promotes only a synchronous standby), a committed
// consumption, claim or result is on a standby before the store answers,
// so a promoted standby knows it. With asynchronous replication, a
// failover can lose the last commits of the old primary: the promoted
// standby has those approvals approved again and those keys free again,
// so a resume or a repeat could run a second time. The engine's
// approval-derived idempotency key, and a keyed call's handler key derived
// from the caller's, give the downstream the same key both times.
//
// # Audit
//
// [AuditSink] is a strict audit sink (middleware.WithAuditSink) and a
// middleware.BatchAuditSink: the engine hands it every record waiting for
// it at once, and it commits them in one INSERT, all or none (group
// commit); nothing runs on a capability.requested or capability.started
// that is not committed. It stores any event the engine can produce: a
// field with a NUL byte or bytes that are not UTF-8 is escaped (a
// backslash as `\\`, each such byte as `\xNN`; undoing the escapes gives
// the original bytes), one longer than its limit is cut (ids and names 1
// KiB, an error, comment or reason 16 KiB, a stack 64 KiB), and a time
// beyond PostgreSQL's range is clamped; the row's altered column lists
// those fields ("error:escaped", "stack:truncated", "at:clamped") and is
// NULL for a row that is exactly its event. A batch PostgreSQL still
// refuses for one row fails with its data exception (SQLSTATE class 22),
// which the engine splits to isolate that row; if the database is
// unreachable the whole batch fails, and the engine writes its queued
// records again with its next one, or on its own once the database is
// back when no call comes. Rows carry no payload and are indexed
// for the two questions an audit asks: every event of one execution, and
// every execution of one actor.
//
// The rows are tamper-evident (SPEC §15, migration 0008). Each sink writes
// a hash chain of its own, so instances never wait on one head: every row
// has chain (the sink's id, [AuditSink.Chain]), chain_seq (1, 2, 3 …
// without gaps: a row takes its number when its batch commits, so a batch
// the engine splits leaves none), prev, and hash = SHA-256 of
// "agentsafe/audit/v1", prev and the RFC 8785 form of the row's fields as
// stored (times at microseconds, NULL fields left out; seq and
// recorded_at, which the database fills in, are not part of it). Every
// 1,000 rows, and 10 seconds after the first row not yet covered, the
// sink adds a checkpoint row, signed with Ed25519 when it has a key, and
// hands it to a hook so it can be kept elsewhere; Close adds the chain's
// last one:
//
//	audit, err := agentsafepg.NewAuditSink(pool,
//		agentsafepg.WithSigner(key), // keep the key off the database's machines
//		agentsafepg.OnCheckpoint(func(c auditlog.Checkpoint) { keep(c) })) // another store
//
// After a write whose reply was lost, the sink reads its chain's head
// before the next one: a write that was committed is not written again,
// and the chain goes on from it. seq stays the order rows were inserted
// in. `agentsafe audit verify --postgres URL [--pubkey K] [--checkpoint C]`
// recomputes every chain, names what was modified, deleted, inserted,
// reordered or cut, and checks every decided, consumed or completed
// approval and every stored result against the trail. Without a signer
// or kept checkpoints the chain shows only that nothing changed by
// accident: whoever can write the table can rewrite a row and recompute
// every hash after it; package auditlog's documentation says more. Rows
// stored before migration 0008 was applied have no chain: verify counts
// them as not verified; an unchained row stored after it is named
// inserted.
package agentsafepg
