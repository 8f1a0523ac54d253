package approvalstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// gate is a go-redis hook that holds every EVALSHA, alone or in a
// pipeline, until the test lets it go, and says when one arrives: the
// tests below decide what is in flight when.
type gate struct {
	arrived chan int // the EVALSHAs in the command or pipeline that arrived
	release chan struct{}
}

func newGate() *gate { return &gate{arrived: make(chan int, 16), release: make(chan struct{})} }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			g.arrived <- 1
			<-g.release
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				n++
			}
		}
		if n > 0 {
			g.arrived <- n
			<-g.release
		}
		return next(ctx, cmds)
	}
}

// gatedStore is a Redis store whose client passes through g, with n
// approved records.
func gatedStore(t *testing.T, n int) (*approvalstore.Redis, *gate, []string) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 16})
	t.Cleanup(func() { _ = rdb.Close() })
	s := openRedis(t, rdb) // loads the scripts before the gate is on
	ids, err := approvalstore.SeedApproved(t.Context(), s, request(digestA), manager, n)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	rdb.AddHook(g)
	return s, g, ids
}

type consumed struct {
	i   int
	got store.ConsumedApproval
	err error
}

// consumeAsync consumes record ids[i] as execution exe_i.
func consumeAsync(ctx context.Context, s *approvalstore.Redis, ids []string, i int, out chan<- consumed) {
	go func() {
		got, err := s.Consume(ctx, ids[i], consumeReq(fmt.Sprintf("exe_%d", i), digestA))
		out <- consumed{i, got, err}
	}()
}

// Consumptions held in flight, alone and in pipelines, and queued behind
// them, each get their own record's answer, and a record consumed in a
// batch stays consumed. (That concurrent scripts share pipelines is
// internal/redisnode's TestConcurrentScriptsShareAPipeline.)
func TestConcurrentConsumptionsShareAPipeline(t *testing.T) {
	ctx := t.Context()
	s, g, ids := gatedStore(t, 10)
	out := make(chan consumed, len(ids))
	consumeAsync(ctx, s, ids, 0, out)
	if n := <-g.arrived; n != 1 {
		t.Fatalf("the first consumption sent %d scripts, want 1 on its own", n)
	}
	// Each of the next four starts a flusher, held with it in flight; the
	// four after them wait in the queue for the first flusher to be free.
	for i := 1; i <= 4; i++ {
		consumeAsync(ctx, s, ids, i, out)
		<-g.arrived
	}
	for i := 5; i <= 8; i++ {
		consumeAsync(ctx, s, ids, i, out)
	}
	close(g.release)
	for sent := 0; sent < 4; {
		sent += <-g.arrived
	}
	for range 9 {
		c := <-out
		if c.err != nil || c.got.ID != ids[c.i] || c.got.Approver.ID != manager.ID {
			t.Errorf("consumption %d: %+v, %v", c.i, c.got, c.err)
		}
	}
	consumeAsync(ctx, s, ids, 9, out)
	<-g.arrived
	if c := <-out; c.err != nil {
		t.Fatalf("a fresh record after the burst: %v", c.err)
	}
	if _, err := s.Consume(ctx, ids[0], consumeReq("exe_other", digestA)); !errors.Is(err, store.ErrApprovalConsumed) {
		t.Errorf("record 0 consumed again by another execution: %v, want ErrApprovalConsumed", err)
	}
}

// A queued consumption whose caller leaves before it is sent returns the
// context's error and never reaches Redis: its approval stays approved.
// One that was sent waits for its reply, which says what Redis did.
func TestAConsumptionLeftBeforeItIsSentSendsNothing(t *testing.T) {
	ctx := t.Context()
	s, g, ids := gatedStore(t, 7)
	out := make(chan consumed, len(ids))
	// One alone and four flushers, all held: the sixth stays queued.
	consumeAsync(ctx, s, ids, 0, out)
	<-g.arrived
	sentCtx, leaveSent := context.WithCancel(ctx)
	// Each of the next four starts a flusher, held with it in flight.
	consumeAsync(sentCtx, s, ids, 1, out)
	<-g.arrived
	for i := 2; i <= 4; i++ {
		consumeAsync(ctx, s, ids, i, out)
		<-g.arrived
	}
	queuedCtx, leaveQueued := context.WithCancel(ctx)
	consumeAsync(queuedCtx, s, ids, 5, out)
	leaveQueued()
	if c := <-out; c.i != 5 || !errors.Is(c.err, context.Canceled) {
		t.Fatalf("the queued consumption answered %+v, want #5 with context.Canceled", c)
	}
	leaveSent() // sent: it still waits for its reply
	close(g.release)
	for range 5 {
		if c := <-out; c.err != nil {
			t.Errorf("consumption %d: %v", c.i, c.err)
		}
	}
	rec, err := s.Get(ctx, ids[5])
	if err != nil || rec.Status != store.ApprovalApproved {
		t.Errorf("the record of the consumption that left before it was sent: %v, %v; want still approved", rec.Status, err)
	}
	rec, err = s.Get(ctx, ids[1])
	if err != nil || rec.Status != store.ApprovalConsumed || rec.ConsumedBy != "exe_1" {
		t.Errorf("the record of the consumption that left after it was sent: %v by %q, %v; want consumed by exe_1", rec.Status, rec.ConsumedBy, err)
	}
}

// A batch sent after Redis lost its scripts (a restart, SCRIPT FLUSH)
// sends each again with its source, as a lone consumption does.
func TestABatchSurvivesAScriptFlush(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	if srv.Kind() != redistest.RedisServer {
		t.Skip("miniredis keeps no script cache to flush")
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 16})
	t.Cleanup(func() { _ = rdb.Close() })
	s := openRedis(t, rdb)
	const n = 64
	ids, err := approvalstore.SeedApproved(ctx, s, request(digestA), manager, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	out := make(chan consumed, n)
	for i := range n {
		consumeAsync(ctx, s, ids, i, out)
	}
	for range n {
		if c := <-out; c.err != nil {
			t.Errorf("consumption %d after SCRIPT FLUSH: %v", c.i, c.err)
		}
	}
}
