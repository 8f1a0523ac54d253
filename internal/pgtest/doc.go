// Package pgtest gives tests a real PostgreSQL: a throwaway cluster
// (initdb, then postgres as a child process) in a temporary directory on a
// free loopback port, owned by the test binary and stopped when it ends.
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(pgtest.Main(m)) // stops the shared cluster after the tests
//	}
//
//	func TestStore(t *testing.T) {
//		url := pgtest.Database(t) // a fresh, empty database on the shared cluster
//		...
//	}
//
//	func TestFault(t *testing.T) {
//		srv := pgtest.Start(t) // a cluster of the test's own
//		...
//		srv.Stop()    // an immediate shutdown, as a crash would be
//		srv.Restart() // same address, same data, after crash recovery
//	}
//
// The binaries are looked up on PATH (initdb, postgres) and then in
// Debian's per-version directories (/usr/lib/postgresql/N/bin, the newest
// first). initdb and postgres refuse to run as root, so a test running as
// root runs them as the "postgres" user. The cluster trusts local
// connections, runs with fsync off (a test cluster need not survive the
// machine), and is started on Linux with a parent-death signal, so that
// nothing survives the test binary even when it is killed.
//
// Without PostgreSQL binaries, [Start] and [Database] skip the test with a
// notice carrying the marker CI's test summary reports ("agentsafe
// fallback:"); setting AGENTSAFE_REQUIRE_POSTGRES=1 (CI does) turns the
// skip into a failure, so a green run there always means PostgreSQL was
// exercised.
//
// Readiness is checked by polling a connection within a bounded time; the
// shutdowns wait for the postmaster to exit. These are the only waits in
// the package.
package pgtest
