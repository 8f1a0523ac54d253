package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/agentsafe/agentsafe/internal/redisnode"
	"github.com/agentsafe/agentsafe/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo answers with its key and first argument.
var echo = redis.NewScript(`return {KEYS[1], ARGV[1]}`)

// hold is a go-redis hook that holds every EVALSHA sent alone until
// release is closed, saying when one arrives; pipelines go to pipe, when
// set, and through otherwise.
type hold struct {
	arrived chan struct{}
	release chan struct{}
	pipe    func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error
}

func newHold() *hold { return &hold{arrived: make(chan struct{}, 16), release: make(chan struct{})} }

func (h *hold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			h.arrived <- struct{}{}
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *hold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.pipe != nil {
			return h.pipe(ctx, cmds, next)
		}
		return next(ctx, cmds)
	}
}

func client(t *testing.T, o *redis.Options) *redis.Client {
	t.Helper()
	srv := redistest.Start(t)
	o.Addr = srv.Addr()
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// loaded is client with echo loaded.
func loaded(t *testing.T, o *redis.Options) *redis.Client {
	t.Helper()
	rdb := client(t, o)
	if err := echo.Load(t.Context(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb
}

// runAsync runs echo over key i in the background.
func runAsync(ctx context.Context, b *redisnode.Batch, sc *redis.Script, i int, out chan<- error) {
	go func() {
		v, err := b.Run(ctx, sc, fmt.Sprintf("k%d", i), fmt.Sprintf("a%d", i))
		if err == nil && (len(v) != 2 && len(v) != 3 || v[0] != fmt.Sprintf("k%d", i) || v[1] != fmt.Sprintf("a%d", i)) {
			err = fmt.Errorf("script %d answered %v", i, v)
		}
		out <- err
	}()
}

// waitQueued waits until n scripts wait in b's queues.
func waitQueued(t *testing.T, b *redisnode.Batch, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); redisnode.Queued(b) != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d scripts queued, want %d", redisnode.Queued(b), n)
		}
	}
}

// pipelines returns a pipeline hook that reports each pipeline of scripts
// on seen, by their keys, and holds it until release is closed.
func pipelines(seen chan<- []string, release <-chan struct{}) func(context.Context, []redis.Cmder, redis.ProcessPipelineHook) error {
	return func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		var keys []string
		for _, c := range cmds {
			if c.Name() == "evalsha" || c.Name() == "eval" {
				keys = append(keys, fmt.Sprint(c.Args()[3])) // EVALSHA sha 1 key …
			}
		}
		if keys == nil { // a new connection's own set-up
			return next(ctx, cmds)
		}
		seen <- keys
		<-release
		return next(ctx, cmds)
	}
}

// heldBatch returns a batch on a fresh client with echo loaded, whose lone
// script (echo over k0, answering on out) is held in flight; its pipelines
// are reported on seen and held until release is closed, its lone scripts
// until h.release is.
func heldBatch(t *testing.T, out chan<- error) (b *redisnode.Batch, h *hold, seen chan []string, release chan struct{}) {
	t.Helper()
	rdb := loaded(t, &redis.Options{})
	h = newHold()
	seen, release = make(chan []string, 16), make(chan struct{})
	h.pipe = pipelines(seen, release)
	return holdLone(t, rdb, h, echo, out), h, seen, release
}

// holdLone adds h to rdb and returns a batch on rdb whose lone script (sc
// over k0, answering on out) h holds in flight.
func holdLone(t *testing.T, rdb *redis.Client, h *hold, sc *redis.Script, out chan<- error) *redisnode.Batch {
	t.Helper()
	rdb.AddHook(h)
	b := redisnode.NewBatch(rdb)
	runAsync(t.Context(), b, sc, 0, out)
	<-h.arrived
	return b
}

// Scripts that arrive while others are in flight go to Redis together,
// as one pipeline, and each gets its own answer; a lone one is sent alone.
func TestConcurrentScriptsShareAPipeline(t *testing.T) {
	ctx := t.Context()
	out := make(chan error, 9)
	b, h, seen, release := heldBatch(t, out)
	// Each of the next four starts a flusher, held with it in flight; the
	// four after them wait in the queue.
	for i := 1; i <= 4; i++ {
		runAsync(ctx, b, echo, i, out)
		if keys := <-seen; len(keys) != 1 || keys[0] != fmt.Sprintf("k%d", i) {
			t.Fatalf("flusher %d sent %v", i, keys)
		}
	}
	for i := 5; i <= 8; i++ {
		runAsync(ctx, b, echo, i, out)
	}
	waitQueued(t, b, 4)
	close(release)
	if keys := <-seen; len(keys) != 4 {
		t.Errorf("the four queued scripts went out as %v, want one pipeline of four", keys)
	}
	close(h.release)
	for range 9 {
		if err := <-out; err != nil {
			t.Error(err)
		}
	}
}

// A queued script whose caller leaves before it is sent returns the
// context's error and never reaches Redis; one whose caller leaves after
// it was sent waits for, and returns, its reply.
func TestAScriptLeftBeforeItIsSentIsNeverSent(t *testing.T) {
	ctx := t.Context()
	out := make(chan error, 6)
	b, h, seen, release := heldBatch(t, out)
	sentCtx, leaveSent := context.WithCancel(ctx)
	runAsync(sentCtx, b, echo, 1, out)
	<-seen
	for i := 2; i <= 4; i++ {
		runAsync(ctx, b, echo, i, out)
		<-seen
	}
	queuedCtx, leaveQueued := context.WithCancel(ctx)
	runAsync(queuedCtx, b, echo, 5, out)
	waitQueued(t, b, 1)
	leaveQueued()
	if err := <-out; !errors.Is(err, context.Canceled) {
		t.Fatalf("the queued script answered %v, want context.Canceled", err)
	}
	if n := redisnode.Queued(b); n != 0 {
		t.Errorf("%d scripts still queued after their caller left", n)
	}
	leaveSent() // sent: it still waits for its reply
	close(release)
	close(h.release)
	for range 5 {
		if err := <-out; err != nil {
			t.Error(err) // script 1 included: its reply, not its caller's cancellation
		}
	}
	close(seen)
	for keys := range seen {
		t.Errorf("a pipeline after the caller left: %v", keys)
	}
}

// A batch whose EVALSHAs meet NOSCRIPT (the node lost its scripts) sends
// them again with their source, and each caller gets its own answer.
func TestABatchResendsScriptsTheNodeLost(t *testing.T) {
	rdb := client(t, &redis.Options{})
	sc := redis.NewScript(fmt.Sprintf(`return {KEYS[1], ARGV[1], %d}`, time.Now().UnixNano())) // never loaded
	h := newHold()
	var evals atomic.Int32
	h.pipe = func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		for _, c := range cmds {
			if c.Name() == "eval" {
				evals.Add(1)
			}
		}
		return next(ctx, cmds)
	}
	rdb.AddHook(evalCounter{&evals})
	ctx := t.Context()
	out := make(chan error, 9)
	b := holdLone(t, rdb, h, sc, out)
	for i := 1; i <= 8; i++ {
		runAsync(ctx, b, sc, i, out)
	}
	for range 8 {
		if err := <-out; err != nil {
			t.Error(err)
		}
	}
	close(h.release)
	if err := <-out; err != nil {
		t.Error(err)
	}
	// The lone script is held before it is sent, so the first pipeline
	// finds the script missing; later ones may find it loaded by then.
	if evals.Load() == 0 {
		t.Error("no script was re-sent with its source")
	}
}

// evalCounter counts the EVALs sent alone.
type evalCounter struct{ n *atomic.Int32 }

func (c evalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c evalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "eval" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c evalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

var errRefused = errors.New("circuit breaker open")

// A pipeline that fails before its commands run (a hook refuses it) fails
// each of its scripts with that error, as the lone call would have.
func TestAPipelineRefusedWholeFailsEachScriptWithItsError(t *testing.T) {
	rdb := loaded(t, &redis.Options{})
	h := newHold()
	h.pipe = func(context.Context, []redis.Cmder, redis.ProcessPipelineHook) error { return errRefused }
	ctx := t.Context()
	out := make(chan error, 4)
	b := holdLone(t, rdb, h, echo, out)
	for i := 1; i <= 3; i++ {
		runAsync(ctx, b, echo, i, out)
	}
	for range 3 {
		if err := <-out; !errors.Is(err, errRefused) {
			t.Errorf("a batched script failed with %v, want the pipeline's %v", err, errRefused)
		}
	}
	close(h.release)
	if err := <-out; err != nil {
		t.Error(err)
	}
}

// A sent script's pipeline carries its caller's deadline (which go-redis
// applies with ContextTimeoutEnabled), not none: with ReadTimeout -1 a
// stalled node would otherwise hold a caller past its deadline for good.
// (Which deadline a pipeline of several callers carries:
// TestBatchContextIsTheLatestDeadline.)
func TestABatchCarriesItsCallersDeadline(t *testing.T) {
	rdb := loaded(t, &redis.Options{ContextTimeoutEnabled: true, ReadTimeout: -1})
	h := newHold()
	got := make(chan time.Time, 4)
	h.pipe = func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		d, _ := ctx.Deadline()
		got <- d
		return next(ctx, cmds)
	}
	out := make(chan error, 2)
	b := holdLone(t, rdb, h, echo, out)
	want := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(t.Context(), want)
	defer cancel()
	runAsync(ctx, b, echo, 1, out)
	if d := <-got; !d.Equal(want) {
		t.Errorf("the pipeline's deadline is %v, want its caller's %v", d, want)
	}
	if err := <-out; err != nil {
		t.Error(err)
	}
	close(h.release)
	if err := <-out; err != nil {
		t.Error(err)
	}
}

// On a Cluster each master has its own queue: scripts held on one master
// never hold up a script for a key on another.
func TestASlowMasterHoldsUpOnlyItsOwnKeys(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client()
	ctx := t.Context()
	if err := redisnode.LoadScripts(ctx, cc, []*redis.Script{echo}); err != nil {
		t.Fatal(err)
	}
	slowKey := "{s}k"
	slow, err := cc.MasterForKey(ctx, slowKey)
	if err != nil {
		t.Fatal(err)
	}
	fastKey := ""
	for i := 0; fastKey == ""; i++ {
		k := fmt.Sprintf("{f%d}k", i)
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != slow.Options().Addr {
			fastKey = k
		}
	}
	h := newHold()
	release := make(chan struct{})
	h.pipe = func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		h.arrived <- struct{}{}
		<-release
		return next(ctx, cmds)
	}
	slow.AddHook(h)
	b := redisnode.NewBatch(cc)
	out := make(chan error, 6)
	run := func(key string) {
		go func() {
			_, err := b.Run(ctx, echo, key, "x")
			out <- err
		}()
	}
	// One alone through the Cluster client (its node's hook holds it), then
	// one per flusher on the slow master's own client, all held.
	run(slowKey)
	<-h.arrived
	for range 4 {
		run(slowKey)
		<-h.arrived
	}
	fast := make(chan error, 1)
	go func() { _, err := b.Run(ctx, echo, fastKey, "x"); fast <- err }()
	waited := false
	select {
	case err := <-fast:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		waited = true
		t.Error("a script on a healthy master waited behind another master's")
	}
	close(h.release)
	close(release)
	for range 5 {
		if err := <-out; err != nil {
			t.Error(err)
		}
	}
	if waited {
		if err := <-fast; err != nil {
			t.Error(err)
		}
	}
}
