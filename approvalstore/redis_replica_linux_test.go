package approvalstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
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
	replica := startReplica(t, srv.Addr(), false)
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

// TestRedisWaitShortfallGivesTheApprovalBack: when the replica is gone
// after NewRedis, a consumption WAIT cannot confirm is released: the
// engine answers APPROVAL_UNAVAILABLE with nothing run, the approval is
// approved again, and the same call succeeds once a replica is back.
func TestRedisWaitShortfallGivesTheApprovalBack(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	if srv.Kind() != redistest.RedisServer {
		t.Skip("miniredis has no replicas")
	}
	rdb := srv.Client()
	replica := startReplica(t, srv.Addr(), false)
	s := openRedis(t, rdb, approvalstore.WithWait(1, 500*time.Millisecond))
	stopReplica(t, replica)

	rec := approve(t, ctx, s, digestA)
	_, err := s.Consume(ctx, rec.ID, consumeReq("exe_a", digestA))
	wantUnavailable(t, "a consumption no replica acknowledged", err)
	if err == nil || !strings.Contains(err.Error(), "replicas acknowledged") {
		t.Errorf("the error must say why: %v", err)
	}
	if got, err := s.Get(ctx, rec.ID); err != nil || got.Status != store.ApprovalApproved || got.ConsumedBy != "" {
		t.Errorf("after a WAIT shortfall the approval must be given back, approved and unconsumed: %+v, %v", got, err)
	}

	eng := newEngine(t, s)
	in := refundInput(0, 1)
	id := requestApproved(t, ctx, eng, in)
	ran := 0
	handler := func(context.Context) (any, error) { ran++; return "refunded", nil }
	_, err = execute(ctx, eng, in, id, handler)
	if code := middleware.CodeOf(err); code != middleware.CodeApprovalUnavailable || ran != 0 {
		t.Errorf("the engine must answer APPROVAL_UNAVAILABLE and run nothing: %v, %d runs", err, ran)
	}
	if got, _ := s.Get(ctx, id); got.Status != store.ApprovalApproved {
		t.Errorf("the approval must not be spent by a shortfall: it reads %s", got.Status)
	}

	startReplica(t, srv.Addr(), false)
	env, err := execute(ctx, eng, in, id, handler)
	if err != nil || env.Status != middleware.StatusCompleted || ran != 1 {
		t.Errorf("with a replica back the same call must run on the same approval: %v, %d runs", err, ran)
	}
}

// TestRedisClusterWait: NewRedis checks every master of a Cluster, and
// WAIT goes to the master of the record's slot, pipelined behind the
// script: with the replica of one master gone, exactly the records on
// that master fall short (and are given back).
func TestRedisClusterWait(t *testing.T) {
	ctx := t.Context()
	cl := redistest.StartCluster(t)
	rdb := cl.Client()
	_, err := approvalstore.NewRedis(rdb, approvalstore.WithWait(1, 50*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "0 connected replicas") || !containsAny(err.Error(), cl.Addrs()) {
		t.Fatalf("NewRedis with WithWait(1) on a Cluster without replicas must fail naming a master (%v): %v", cl.Addrs(), err)
	}
	replicas := make(map[string]*replicaProcess)
	for _, addr := range cl.Addrs() {
		replicas[addr] = startReplica(t, addr, true)
	}
	// A healthy replica acknowledges well within the timeout even on a
	// loaded machine; each record on the master without one waits it out.
	s := openRedis(t, rdb, approvalstore.WithWait(1, 500*time.Millisecond))
	lost := cl.Addrs()[0]
	stopReplica(t, replicas[lost])
	// After SCRIPT FLUSH on every master the pipelined consume sends the
	// script again. On another node than the record's the script would
	// fail MOVED; on its own it consumes, and only WAIT refuses.
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	masters := make(map[string]int)
	for i := 0; i < 40 && (len(masters) < len(replicas) || slices.Min(slices.Collect(maps.Values(masters))) < 2); i++ {
		digest := digestN(i)
		rec := approve(t, ctx, s, digest)
		node, err := rdb.MasterForKey(ctx, approvalstore.RecordKey(s, rec.ID))
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		masters[addr]++
		_, err = s.Consume(ctx, rec.ID, consumeReq("exe_w", digest))
		got, gerr := s.Get(ctx, rec.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if addr == lost {
			if err == nil || !strings.Contains(err.Error(), "replicas acknowledged") || got.Status != store.ApprovalApproved {
				t.Errorf("record %s on %s, whose replica is gone: got %v and %s, want the WAIT shortfall and the approval given back", rec.ID, addr, err, got.Status)
			}
			continue
		}
		if err != nil || got.ConsumedBy != "exe_w" {
			t.Errorf("record %s on %s: %v, consumed by %q; want a consumption its master's replica acknowledged", rec.ID, addr, err, got.ConsumedBy)
		}
		if by, err := replicas[addr].HGet(ctx, approvalstore.RecordKey(s, rec.ID), "consumed_by").Result(); by != "exe_w" {
			t.Errorf("record %s: the replica of %s must hold the consumption, it says %q (%v)", rec.ID, addr, by, err)
		}
	}
	if masters[lost] < 2 || len(masters) < len(replicas) {
		t.Errorf("the records landed on %v; the check needs the master without its replica and another", masters)
	}
}

func digestN(n int) string { return fmt.Sprintf("sha256:%064d", n) }

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// replicaProcess is a redis-server replicating a primary, with a client
// of its own (reading from a replica needs READONLY on a Cluster).
type replicaProcess struct {
	*redis.Client
	cmd *exec.Cmd
}

// startReplica starts a redis-server replicating primary (a Cluster node
// when cluster is set) and waits until the primary sees it online.
func startReplica(t *testing.T, primary string, cluster bool) *replicaProcess {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server for a replica")
	}
	port, bus := freePort(t), freePort(t)
	host, pport, _ := net.SplitHostPort(primary)
	p := redis.NewClient(&redis.Options{Addr: primary})
	defer p.Close()
	// Redis delays a diskless full sync by 5 s by default, waiting for more
	// replicas to share it.
	if err := p.ConfigSet(t.Context(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	if cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf", "--cluster-port", strconv.Itoa(bus))
	} else {
		args = append(args, "--replicaof", host, pport)
	}
	cmd := exec.Command(bin, args...)
	// Nothing may outlive the test binary, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	opts := &redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), MaxRetries: -1}
	if cluster { // a Cluster replica serves reads to connections that ask
		opts.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	}
	r := &replicaProcess{cmd: cmd, Client: redis.NewClient(opts)}
	t.Cleanup(func() { _ = r.Close(); stopReplica(t, r) })
	until(t, "the replica answers", func() bool { return r.Ping(t.Context()).Err() == nil })
	if cluster {
		master, err := p.ClusterMyID(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The nodes' buses are on ports of their own, which MEET must be told.
		if err := r.Do(t.Context(), "cluster", "meet", host, pport, busPort(t, p)).Err(); err != nil {
			t.Fatal(err)
		}
		// CLUSTER REPLICATE knows the master once gossip has told it.
		until(t, "the replica joins the cluster", func() bool { return r.ClusterReplicate(t.Context(), master).Err() == nil })
		// It serves reads once it knows where the slots are.
		until(t, "the replica sees the cluster ok", func() bool {
			return strings.Contains(r.ClusterInfo(t.Context()).Val(), "cluster_state:ok")
		})
	}
	until(t, "the primary sees its replica online", func() bool { return replicaOnline(p.Info(t.Context(), "replication").Val(), port) })
	// Online is not yet acknowledging: after a diskless sync the primary
	// streams to a replica once it has sent its first ACK, up to a second
	// later. Until then WAIT falls short.
	key := ownKey(t, p, cluster)
	until(t, "the replica acknowledges a write", func() bool {
		var wait *redis.Cmd
		_, _ = p.Pipelined(t.Context(), func(pl redis.Pipeliner) error { // WAIT's reply says it all
			pl.Set(t.Context(), key, port, time.Minute)
			wait = pl.Do(t.Context(), "wait", 1, 100)
			return nil
		})
		n, err := wait.Int()
		return err == nil && n >= 1
	})
	return r
}

// ownKey returns a key that node serves itself: any key on a plain
// server, one in its slots on a Cluster master.
func ownKey(t *testing.T, node *redis.Client, cluster bool) string {
	t.Helper()
	if !cluster {
		return "replica-check"
	}
	ctx := t.Context()
	id, err1 := node.ClusterMyID(ctx).Result()
	slots, err2 := node.ClusterSlots(ctx).Result()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		key := "replica-check-" + strconv.Itoa(i)
		slot, err := node.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 && r.Nodes[0].ID == id {
				return key
			}
		}
	}
	t.Fatalf("no key found in the slots of %s", node.Options().Addr)
	return ""
}

// busPort returns the cluster bus port of node, from CLUSTER NODES
// ("id ip:port@bus flags …", flags holding "myself").
func busPort(t *testing.T, node *redis.Client) string {
	t.Helper()
	nodes, err := node.ClusterNodes(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) > 2 && strings.Contains(f[2], "myself") {
			if _, bus, ok := strings.Cut(f[1], "@"); ok {
				bus, _, _ = strings.Cut(bus, ",") // "bus,hostname" since Redis 7
				return bus
			}
		}
	}
	t.Fatalf("no bus port for %s in CLUSTER NODES:\n%s", node.Options().Addr, nodes)
	return ""
}

// stopReplica kills a replica; the primary has it no more.
func stopReplica(t *testing.T, r *replicaProcess) {
	t.Helper()
	if r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// until polls cond, boundedly: readiness of a process this test started.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// replicaOnline reports whether INFO replication lists the replica on
// port online.
func replicaOnline(info string, port int) bool {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "slave") && strings.Contains(line, ",port="+strconv.Itoa(port)+",") && strings.Contains(line, "state=online") {
			return true
		}
	}
	return false
}
