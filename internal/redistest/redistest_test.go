package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/internal/redistest"
)

// wantKind is the kind Start gives on this machine.
func wantKind() string {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return redistest.Miniredis
	}
	return redistest.RedisServer
}

// withoutRedis hides redis-server and redis-cli from the helper.
func withoutRedis(t *testing.T, require string) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("AGENTSAFE_REQUIRE_REDIS", require)
}

func TestStart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if got := srv.Kind(); got != wantKind() {
		t.Errorf("Kind() = %q; want %q", got, wantKind())
	}
	if host, _, err := net.SplitHostPort(srv.Addr()); err != nil || host != "127.0.0.1" {
		t.Errorf("Addr() = %q; want a 127.0.0.1 address", srv.Addr())
	}
	checkSetGet(t, srv.Client())
}

func TestServersAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := redistest.Start(t), redistest.Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("two servers share %s", a.Addr())
	}
	ctx := context.Background()
	if err := a.Client().Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client().Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET on the second server = %v; want redis.Nil", err)
	}
}

func TestStopAndRestart(t *testing.T) {
	t.Parallel()
	testStopAndRestart(t, redistest.Start(t))
}

func TestFallbackToMiniredis(t *testing.T) {
	withoutRedis(t, "")
	srv := redistest.Start(t)
	if got := srv.Kind(); got != redistest.Miniredis {
		t.Fatalf("Kind() = %q without redis-server on PATH; want %q", got, redistest.Miniredis)
	}
	checkSetGet(t, srv.Client())
	// The approval store depends on Lua; the fallback must run it.
	got, err := srv.Client().Eval(context.Background(), `return redis.call("INCRBY", KEYS[1], ARGV[1])`, []string{"n"}, 41).Int()
	if err != nil || got != 41 {
		t.Errorf("EVAL = %d, %v; want 41", got, err)
	}
	t.Run("stop and restart", func(t *testing.T) { testStopAndRestart(t, srv) })
}

func TestRequireRedis(t *testing.T) {
	withoutRedis(t, "1")
	r := run(t, func(tb testing.TB) { redistest.Start(tb) })
	if !strings.Contains(r.fatal, "install") || !strings.Contains(r.fatal, "redis-server") {
		t.Errorf("Start without redis-server under AGENTSAFE_REQUIRE_REDIS=1: fatal = %q; want a failure saying to install redis-server", r.fatal)
	}
	r = run(t, func(tb testing.TB) { redistest.StartCluster(tb) })
	if !strings.Contains(r.fatal, "install") {
		t.Errorf("StartCluster without binaries under AGENTSAFE_REQUIRE_REDIS=1: fatal = %q; want a failure saying to install them", r.fatal)
	}
}

func TestClusterSkipsWithoutBinaries(t *testing.T) {
	withoutRedis(t, "")
	r := run(t, func(tb testing.TB) { redistest.StartCluster(tb) })
	if r.fatal != "" || !strings.Contains(r.skip, "redis-server and redis-cli") {
		t.Errorf("StartCluster without binaries: skip = %q, fatal = %q; want a skip naming what is missing", r.skip, r.fatal)
	}
}

func TestCleanupStopsTheServer(t *testing.T) {
	t.Parallel()
	var addr string
	t.Run("owner", func(t *testing.T) {
		srv := redistest.Start(t)
		addr = srv.Addr()
		checkSetGet(t, srv.Client())
	})
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("server on %s still accepts connections after its test ended", addr)
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t)
	if n := len(cluster.Addrs()); n != 3 {
		t.Fatalf("Addrs() has %d nodes; want 3", n)
	}
	ctx := context.Background()
	rdb := cluster.Client()
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != 3 {
		t.Fatalf("CLUSTER SLOTS lists %d ranges; want one per master: %v", len(slots), slots)
	}
	covered := 0
	for _, r := range slots {
		covered += r.End - r.Start + 1
		owner := redis.NewClient(&redis.Options{Addr: r.Nodes[0].Addr})
		defer owner.Close()

		// Find a key that hashes into this range.
		key := ""
		for i := 0; key == ""; i++ {
			k := "key:" + strconv.Itoa(i)
			slot, err := owner.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int(slot) >= r.Start && int(slot) <= r.End {
				key = k
			}
		}
		if err := rdb.Set(ctx, key, r.Nodes[0].Addr, 0).Err(); err != nil {
			t.Fatalf("SET %s through the cluster client: %v", key, err)
		}
		// The key landed on the node that owns its slot.
		if got, err := owner.Get(ctx, key).Result(); err != nil || got != r.Nodes[0].Addr {
			t.Errorf("GET %s on its owner %s = %q, %v", key, r.Nodes[0].Addr, got, err)
		}
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != r.Nodes[0].Addr {
			t.Errorf("GET %s through the cluster client = %q, %v", key, got, err)
		}
	}
	if covered != 16384 {
		t.Errorf("slots cover %d of 16384", covered)
	}
}

func testStopAndRestart(t *testing.T, srv *redistest.Server) {
	ctx := context.Background()
	rdb := srv.Client()
	addr := srv.Addr()
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("a stopped server accepts connections on %s", addr)
	}
	srv.Stop() // a no-op

	srv.Restart()
	if srv.Addr() != addr {
		t.Errorf("Addr() = %s after Restart; want %s", srv.Addr(), addr)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart with the same client: %v", err)
	}
	if err := rdb.Get(ctx, "before").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET of a key set before the restart = %v; want redis.Nil (a restarted server is empty)", err)
	}
	checkSetGet(t, rdb)

	srv.Restart() // while running
	checkSetGet(t, srv.Client())
}

func checkSetGet(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.Get(ctx, "greeting").Result(); err != nil || got != "hello" {
		t.Fatalf("GET = %q, %v; want hello", got, err)
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
