package approvalstore_test

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
)

// TestRedisWaitWithReplica: with a replica attached, WAIT 1 succeeds and
// the replica has the consumption, also when Redis has lost the scripts
// (the pipelined consume handles NOSCRIPT itself).
func TestRedisWaitWithReplica(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	if srv.Kind() != redistest.RedisServer {
		t.Skip("miniredis has no replicas")
	}
	rdb := srv.Client()
	replica := startReplica(t, srv.Addr())
	s := openRedis(t, rdb, approvalstore.WithWait(1, time.Second))
	rec := approve(t, ctx, s, digestA)
	if _, err := s.Consume(ctx, rec.ID, consumeReq("exe_a", digestA)); err != nil {
		t.Fatalf("a consumption the replica acknowledged: %v", err)
	}
	if by := replica.HGet(ctx, approvalstore.RecordKey(s, rec.ID), "consumed_by").Val(); by != "exe_a" {
		t.Errorf("after WAIT 1 the replica must hold the consumption, it says consumed_by=%q", by)
	}
	// A repeat by the same execution (a lost reply) waits for the replica too.
	if _, err := s.Consume(ctx, rec.ID, consumeReq("exe_a", digestA)); err != nil {
		t.Errorf("a repeated consumption: %v", err)
	}

	other := approve(t, ctx, s, "sha256:"+strings.Repeat("b", 64))
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Consume(ctx, other.ID, consumeReq("exe_b", "sha256:"+strings.Repeat("b", 64))); err != nil {
		t.Errorf("consume with WAIT after SCRIPT FLUSH: %v", err)
	}
	if by := replica.HGet(ctx, approvalstore.RecordKey(s, other.ID), "consumed_by").Val(); by != "exe_b" {
		t.Errorf("after SCRIPT FLUSH the script must have run and reached the replica: consumed_by=%q", by)
	}
}

// startReplica starts a redis-server replicating primary and waits until
// the primary sees it online.
func startReplica(t *testing.T, primary string) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server for a replica")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	host, pport, _ := net.SplitHostPort(primary)
	p := redis.NewClient(&redis.Options{Addr: primary})
	defer p.Close()
	// Redis delays a diskless full sync by 5 s by default, waiting for more
	// replicas to share it.
	if err := p.ConfigSet(t.Context(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--replicaof", host, pport)
	// Nothing may outlive the test binary, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for !replicaOnline(p.Info(t.Context(), "replication").Val()) {
		if time.Now().After(deadline) {
			t.Fatalf("the replica on port %d did not come online", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func replicaOnline(info string) bool {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "slave0:") && strings.Contains(sc.Text(), "state=online") {
			return true
		}
	}
	return false
}
