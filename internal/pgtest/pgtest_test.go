package pgtest_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/agentsafe/agentsafe/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Main(m)) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func TestStart(t *testing.T) {
	srv := pgtest.Start(t)
	if !strings.HasPrefix(srv.URL(), "postgres://agentsafe@127.0.0.1:") {
		t.Errorf("URL() = %q; want a loopback address as the agentsafe superuser", srv.URL())
	}
	var version int
	if err := connect(t, srv.URL()).QueryRow(t.Context(), "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 130000 {
		t.Errorf("server version %d; the stores need PostgreSQL 13 or newer", version)
	}
}

func TestDatabasesAreIsolated(t *testing.T) {
	a, b := pgtest.Database(t), pgtest.Database(t)
	if a == b {
		t.Fatalf("two databases share %s", a)
	}
	ctx := t.Context()
	if _, err := connect(t, a).Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var found bool
	if err := connect(t, b).QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&found); err != nil || found {
		t.Errorf("a table created in one database is visible in another: %v, %v", found, err)
	}
}

func TestDatabaseIsDroppedAtCleanup(t *testing.T) {
	var url string
	t.Run("owner", func(t *testing.T) {
		url = pgtest.Database(t)
		connect(t, url) // a connection still open at cleanup does not stop the drop
	})
	if conn, err := pgx.Connect(t.Context(), url); err == nil {
		_ = conn.Close(context.Background())
		t.Errorf("the database %s still exists after its test ended", url)
	}
}

func TestStopAndRestart(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := t.Context()
	conn := connect(t, srv.URL())
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	url := srv.URL()
	srv.Stop()
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a connection to a stopped server still answers")
	}
	if c, err := pgx.Connect(ctx, url); err == nil {
		_ = c.Close(context.Background())
		t.Fatal("a stopped server accepts connections")
	}
	srv.Stop() // a no-op

	srv.Restart()
	if srv.URL() != url {
		t.Errorf("URL() = %s after Restart; want %s", srv.URL(), url)
	}
	var x int
	if err := connect(t, srv.URL()).QueryRow(ctx, "SELECT x FROM kept").Scan(&x); err != nil || x != 42 {
		t.Errorf("after a restart the data must have survived: %d, %v", x, err)
	}
	srv.Restart() // while running
	connect(t, srv.URL())
}

func TestCleanupStopsTheServer(t *testing.T) {
	var addr string
	t.Run("owner", func(t *testing.T) {
		srv := pgtest.Start(t)
		cfg, err := pgx.ParseConfig(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		addr = net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	})
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("server on %s still accepts connections after its test ended", addr)
	}
}

func TestSkipsWithoutPostgres(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	defer pgtest.HideDebianBinaries()()
	t.Setenv("AGENTSAFE_REQUIRE_POSTGRES", "")
	for name, start := range map[string]func(testing.TB){
		"Start":    func(tb testing.TB) { pgtest.Start(tb) },
		"Database": func(tb testing.TB) { pgtest.Database(tb) },
	} {
		r := run(t, start)
		if r.fatal != "" || !strings.Contains(r.skip, "agentsafe fallback:") || !strings.Contains(r.skip, "AGENTSAFE_REQUIRE_POSTGRES") {
			t.Errorf("%s without PostgreSQL: skip = %q, fatal = %q; want a skip with the fallback marker naming AGENTSAFE_REQUIRE_POSTGRES", name, r.skip, r.fatal)
		}
	}
	t.Setenv("AGENTSAFE_REQUIRE_POSTGRES", "1")
	for name, start := range map[string]func(testing.TB){
		"Start":    func(tb testing.TB) { pgtest.Start(tb) },
		"Database": func(tb testing.TB) { pgtest.Database(tb) },
	} {
		r := run(t, start)
		if !strings.Contains(r.fatal, "install") || r.skip != "" {
			t.Errorf("%s without PostgreSQL under AGENTSAFE_REQUIRE_POSTGRES=1: fatal = %q, skip = %q; want a failure saying to install it", name, r.fatal, r.skip)
		}
	}
}

// recorder is a testing.TB that records Fatal and Skip instead of ending
// the real test.
type recorder struct {
	testing.TB
	mu          sync.Mutex
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.set(&r.fatal, fmt.Sprint(args...))
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.set(&r.fatal, fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) {
	r.set(&r.skip, fmt.Sprint(args...))
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.set(&r.skip, fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (r *recorder) set(field *string, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*field = msg
}

// run calls fn with a recorder in a goroutine of its own, since Fatal and
// Skip end the goroutine that calls them.
func run(t *testing.T, fn func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r
}
