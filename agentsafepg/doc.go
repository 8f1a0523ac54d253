// Package agentsafepg keeps agentsafe's approvals and audit trail in
// PostgreSQL, for services whose system of record is PostgreSQL: the
// approval, the effect and the evidence live in one database. It is a
// package of its own so that importing approvalstore never links pgx.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	if err := agentsafepg.Migrate(ctx, pool); err != nil { ... } // or apply agentsafepg.Migrations() yourself
//	approvals, err := agentsafepg.NewApprovalStore(pool)
//	audit, err := agentsafepg.NewAuditSink(pool)
//	defer audit.Close(ctx)
//	eng, err := middleware.New(reg,
//		middleware.WithApprovalStore(approvals),
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
// Under failover, single use holds as far as the replication does. With
// synchronous replication (synchronous_commit on and a
// synchronous_standby_names quorum), a committed consumption is on a
// standby before Consume returns, so a promoted standby knows it. With
// asynchronous replication, a failover can lose the last consumptions a
// primary committed: the promoted standby has those records approved, and
// a resume could run a second time. The engine's approval-derived
// idempotency key gives the downstream the same key both times.
//
// # Audit
//
// [AuditSink] is a strict audit sink (middleware.WithAuditSink): it
// writes capability.requested and capability.started before it returns —
// nothing runs on an event that is not committed — and batches every other
// event. Rows carry no payload and are indexed for the two questions an
// audit asks: every event of one execution, and every execution of one
// actor.
package agentsafepg
