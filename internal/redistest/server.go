package redistest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The kinds of server [Server.Kind] reports.
const (
	RedisServer = "redis-server" // a redis-server child process
	Miniredis   = "miniredis"    // the embedded fallback
)

// requireEnv names the environment variable that forbids the fallback.
const requireEnv = "AGENTSAFE_REQUIRE_REDIS"

const fallbackNotice = "agentsafe fallback: redis-server not found on PATH; using embedded miniredis (set " + requireEnv + "=1 to fail instead)"

var noticeOnce sync.Once

// Server is one Redis for one test. Its methods, like those of testing.TB
// they call, must be called from the test's goroutine.
type Server struct {
	tb   testing.TB
	kind string
	addr string

	real *instance            // redis-server
	mini *miniredis.Miniredis // fallback

	mu      sync.Mutex
	clients []*redis.Client
}

// Start starts a Redis server for tb on a free loopback port, waits until it
// answers PING (at most 10 s), and stops it when tb ends. It runs
// redis-server from PATH, retrying on a few ports if one is taken; without
// it, it falls back to miniredis, or fails tb if AGENTSAFE_REQUIRE_REDIS=1.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{tb: tb}
	tb.Cleanup(s.cleanup)

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if requireRedis() {
			tb.Fatalf("redistest: redis-server is not on PATH and %s=1 forbids the miniredis fallback; install it (apt-get install redis-server redis-tools)", requireEnv)
		}
		// Once on stderr for people, and in the test's log with the marker
		// CI's summary looks for (see .ci/testsummary).
		noticeOnce.Do(func() { fmt.Fprintln(os.Stderr, strings.TrimPrefix(fallbackNotice, "agentsafe fallback: ")) })
		tb.Log(fallbackNotice)
		s.kind = Miniredis
		s.mini = miniredis.NewMiniRedis()
		if err := s.mini.StartAddr("127.0.0.1:0"); err != nil {
			tb.Fatalf("redistest: start miniredis: %v", err)
		}
		s.addr = s.mini.Addr()
		return s
	}

	s.kind = RedisServer
	dir := tb.TempDir()
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: find a free port: %v", err)
		}
		s.real = &instance{bin: bin, port: port, args: []string{
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--dir", dir,
		}}
		err = s.real.start()
		if err == nil {
			break
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			tb.Fatalf("redistest: %v", err)
		}
	}
	s.addr = s.real.addr()
	return s
}

// Addr returns the server's "127.0.0.1:port". It stays the same across
// [Server.Restart].
func (s *Server) Addr() string { return s.addr }

// Kind reports which server runs: [RedisServer] or [Miniredis].
func (s *Server) Kind() string { return s.kind }

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Stop stops the server abruptly, as a crash would: connections break and
// new ones are refused until [Server.Restart]. Stopping a stopped server is
// a no-op.
func (s *Server) Stop() {
	if s.mini != nil {
		s.mini.Close()
		return
	}
	s.real.stop()
}

// Restart starts the server again on the same address, stopping it first if
// it runs, and waits until it answers. It comes back empty, as a Redis
// without persistence does after a crash. Clients from [Server.Client]
// reconnect by themselves. It fails the test if the port was taken while the
// server was down.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	if s.mini != nil {
		if err := s.mini.Restart(); err != nil {
			s.tb.Fatalf("redistest: restart miniredis on %s: %v", s.addr, err)
		}
		s.mini.FlushAll() // miniredis keeps its data; a real restart does not
		return
	}
	if err := s.real.start(); err != nil {
		s.tb.Fatalf("redistest: restart on %s: %v", s.addr, err)
	}
}

func (s *Server) cleanup() {
	s.mu.Lock()
	clients := s.clients
	s.clients = nil
	s.mu.Unlock()
	for _, c := range clients {
		_ = c.Close() // the server is going away; nothing to report
	}
	if s.mini != nil || s.real != nil {
		s.Stop()
	}
}

// requireRedis reports whether AGENTSAFE_REQUIRE_REDIS forbids the fallback.
func requireRedis() bool {
	v, err := strconv.ParseBool(os.Getenv(requireEnv))
	return err == nil && v
}
