package pgtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// requireEnv names the environment variable that turns a skip for want of
// PostgreSQL into a failure.
const requireEnv = "AGENTSAFE_REQUIRE_POSTGRES"

const fallbackNotice = "agentsafe fallback: PostgreSQL binaries (initdb, postgres) not found; skipping the test (install Debian's postgresql, or set " + requireEnv + "=1 to fail instead)"

var noticeOnce sync.Once

// Server is a cluster of one test's own, from [Start]. Its methods, like
// those of testing.TB they call, must be called from the test's goroutine.
type Server struct {
	tb testing.TB
	c  *cluster
}

// Start starts a PostgreSQL cluster for tb alone — initdb in a new
// temporary directory, the postmaster on a free loopback port — waits
// until it accepts connections, and removes it when tb ends. A test that
// needs a database and not a server of its own uses [Database], which
// costs no initdb. Without PostgreSQL binaries Start skips tb (with the
// "agentsafe fallback:" notice), or fails it if
// AGENTSAFE_REQUIRE_POSTGRES=1.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := binaries(tb)
	c, err := newCluster(bin)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(c.remove)
	return &Server{tb: tb, c: c}
}

// URL returns the address of the cluster's postgres database, as its
// superuser: postgres://agentsafe@127.0.0.1:port/postgres. It stays the
// same across [Server.Restart].
func (s *Server) URL() string { return s.c.url("postgres") }

// Stop shuts the cluster down immediately, as a crash would: connections
// break and new ones are refused until [Server.Restart]. Stopping a stopped
// server is a no-op.
func (s *Server) Stop() { s.c.stop(syscall.SIGQUIT) }

// Restart starts the cluster again on the same address, stopping it first
// if it runs, and waits until it accepts connections. Its data survives:
// the postmaster recovers from its write-ahead log. It fails the test if
// the port was taken while the server was down.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	if err := s.c.start(); err != nil {
		s.tb.Fatalf("pgtest: restart on %s: %v", s.c.addr(), err)
	}
}

// shared is the test binary's cluster, started by the first [Database]
// and removed by the Run of [Main].
var shared struct {
	mu   sync.Mutex
	c    *cluster
	err  error
	main bool // Main's Run is running the tests
	dbs  atomic.Int64
}

// Database creates a fresh, empty database for tb on the test binary's
// shared cluster and returns its address; the database is dropped when tb
// ends (after the cleanups tb registered later, such as closing its
// pools). The cluster starts at the first call, once per test binary, and
// is removed after the tests by [Main], which the binary's TestMain must
// use. Without PostgreSQL binaries Database skips tb, as [Start] does.
func Database(tb testing.TB) string {
	tb.Helper()
	bin := binaries(tb)
	shared.mu.Lock()
	if !shared.main {
		shared.mu.Unlock()
		tb.Fatal("pgtest: Database needs the test binary's TestMain to run the tests through pgtest.Main, which removes the shared cluster at the end")
	}
	if shared.c == nil && shared.err == nil {
		shared.c, shared.err = newCluster(bin)
	}
	c, err := shared.c, shared.err
	shared.mu.Unlock()
	if err != nil {
		tb.Fatalf("pgtest: the shared cluster: %v", err)
	}
	name := "test_" + strconv.FormatInt(shared.dbs.Add(1), 10)
	if err := c.exec("postgres", "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		if err := c.exec("postgres", "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return c.url(name)
}

// Main wraps m for TestMain: its Run runs the tests, then removes the
// shared cluster [Database] started, if any. It fits goleak:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Main(m)) }
func Main(m *testing.M) interface{ Run() int } { return mainM{m} }

type mainM struct{ m *testing.M }

func (w mainM) Run() int {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := w.m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.main = false
	if shared.c != nil {
		shared.c.remove()
		shared.c = nil
	}
	return code
}

// binaries returns the directory of the PostgreSQL binaries, or skips tb
// (fails it under AGENTSAFE_REQUIRE_POSTGRES=1) without them.
func binaries(tb testing.TB) string {
	tb.Helper()
	bin, err := binDir()
	if err == nil {
		return bin
	}
	if requirePostgres() {
		tb.Fatalf("pgtest: %v, and %s=1 forbids skipping; install them (apt-get install postgresql)", err, requireEnv)
	}
	// Once on stderr for people, and in the test's log with the marker
	// CI's summary looks for (see .ci/testsummary).
	noticeOnce.Do(func() { fmt.Fprintln(os.Stderr, strings.TrimPrefix(fallbackNotice, "agentsafe fallback: ")) })
	tb.Skip(fallbackNotice)
	return ""
}

// requirePostgres reports whether AGENTSAFE_REQUIRE_POSTGRES forbids skipping.
func requirePostgres() bool {
	v, err := strconv.ParseBool(os.Getenv(requireEnv))
	return err == nil && v
}
