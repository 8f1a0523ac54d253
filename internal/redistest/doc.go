// Package redistest gives tests a real Redis: a redis-server child process
// on a free loopback port, owned by the test and killed when it ends.
//
//	func TestStore(t *testing.T) {
//		srv := redistest.Start(t)  // ready to answer PING
//		rdb := srv.Client()        // closed when the test ends
//		...
//		srv.Stop()                 // a crash, for fault tests
//		srv.Restart()              // same address, empty again
//	}
//
// Start never assumes a server at 6379 and never shares one between tests.
// The process is started with no persistence (--save "" --appendonly no),
// its working directory in t.TempDir(), and on Linux with a parent-death
// signal, so that nothing survives the test binary even when it is killed.
//
// Without redis-server on PATH, Start falls back to the embedded
// github.com/alicebob/miniredis/v2 (it runs Lua, so scripts work) and says
// so once on standard error. Setting AGENTSAFE_REQUIRE_REDIS=1 (CI does)
// turns the fallback into a test failure, so a green run there always means
// real Redis was exercised. [StartCluster] has no embedded fallback: without
// redis-server and redis-cli it skips the test, or fails it under
// AGENTSAFE_REQUIRE_REDIS=1.
//
// Readiness is checked by polling PING (and CLUSTER INFO) within a bounded
// time; these are the only waits in the package.
package redistest
