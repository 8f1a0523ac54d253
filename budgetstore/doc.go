// Package budgetstore holds the implementations of [store.BudgetStore],
// where the reservations of budgets (middleware.Budget) are kept: what a
// capability's calls have spent over a rolling window, for one budget
// key. [Memory] is for one process; [Redis] for every server instance
// that shares a Redis deployment (package agentsafepg has the PostgreSQL
// store).
//
//	budgets, err := budgetstore.NewRedis(rdb)
//	eng, err := middleware.New(reg, middleware.WithBudgetStore(budgets))
//
// Both apply the same rules (see the contract on store.BudgetStore), and
// both pass conformance.RunBudgetStore. A store that fails makes the
// engine fail closed: BUDGET_UNAVAILABLE, nothing runs. Never fall back
// from Redis to memory silently: N instances on memory stores allow N
// times every limit.
//
// # Redis
//
// NewRedis takes any redis.UniversalClient: a single node
// (redis.NewClient), a Sentinel-managed primary (redis.NewFailoverClient)
// or a Cluster (redis.NewClusterClient). A budget key's reservations live
// under one hash tag, {agentsafe:bgt:bgt_…} with the default prefix
// ([WithKeyPrefix]), so every step is one Lua script over one slot of a
// Cluster, in one round trip: Reserve trims the reservations that aged
// out of the window, sums the rest, checks the limit and adds its own,
// all at once, so any number of instances reserving together never take
// a window past its limit. Ages are judged by Redis TIME inside the
// script, never by an instance's clock; key TTLs only collect garbage, a
// second after the newest reservation stops counting. Scripts are loaded
// by NewRedis and sent again whenever Redis has lost them (NOSCRIPT).
// Reserve is idempotent per execution id and Release of what is not held
// is a no-op, so both are safe to repeat after a lost reply: go-redis may
// retry them, and the engine re-issues them for the same execution before
// it fails closed.
//
// Amounts and limits are exact up to 2^53 (Lua computes with doubles);
// the Redis store refuses larger ones with an error, which the engine
// answers BUDGET_UNAVAILABLE. What a budget holding depends on, as for
// approvals: maxmemory-policy noeviction (an evicted key forgets what was
// spent), persistence that never rolls back, and a failover that may
// promote a replica without the latest reservations (a window may then
// hold more than its limit once).
package budgetstore
