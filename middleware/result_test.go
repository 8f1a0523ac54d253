package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The engine's side of caller keys and replay: a memory result store on a
// clock the test moves, a codec of strings, and an adapter whose
// framework's own error is frameworkError.

var sealKey = middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef0123456789abcdef")}

// frameworkError is the test adapter's framework error: its own answer,
// passed to the caller unchanged.
type frameworkError struct{ msg string }

func (e *frameworkError) Error() string { return e.msg }

func frameworkStatus(err error) (uint32, string, bool) {
	if fe, ok := errors.AsType[*frameworkError](err); ok {
		return 9, fe.msg, true
	}
	return 0, "", false
}

// stringCodec stores string responses, and the framework's errors.
type stringCodec struct{}

func (stringCodec) Marshal(v any) ([]byte, error) {
	s, ok := v.(string)
	if !ok {
		return nil, nil // no response
	}
	return []byte(s), nil
}

func (stringCodec) Unmarshal(b []byte) (any, error) {
	if b == nil {
		return "<no body>", nil
	}
	return string(b), nil
}

func (stringCodec) MarshalError(err error) ([]byte, error) {
	fe, ok := errors.AsType[*frameworkError](err)
	if !ok {
		return nil, errors.New("not a framework error")
	}
	return []byte(fe.msg), nil
}

func (stringCodec) UnmarshalError(b []byte) (error, error) { return &frameworkError{string(b)}, nil }

// results is an engine whose capabilities store results.
type results struct {
	t     *testing.T
	eng   *middleware.Engine
	rec   *agentsafetest.Recorder
	store *resultstore.Memory
	clock *resultClock
	runs  atomic.Int32
}

type resultClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *resultClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *resultClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newResults(t *testing.T, reg *middleware.Registry, opts ...middleware.Option) *results {
	t.Helper()
	r := &results{t: t, rec: &agentsafetest.Recorder{}, clock: &resultClock{now: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}}
	r.store = resultstore.NewMemory(resultstore.WithClock(r.clock.Now))
	opts = append([]middleware.Option{middleware.WithEventSink(r.rec), middleware.WithProtoFiles(nil), middleware.WithLogger(discard),
		middleware.WithActor(actorOf), middleware.WithResultStore(r.store), middleware.WithResultKey(sealKey)}, opts...)
	eng, err := middleware.New(reg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.eng = eng
	return r
}

// one builds an engine with capability c at procRefund.
func oneResult(t *testing.T, c middleware.Capability, opts ...middleware.Option) *results {
	return newResults(t, middleware.NewRegistry().Register(procRefund, c), opts...)
}

var (
	writeCap = middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second}
	readCap  = middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: time.Second}
)

// keyedCall is one call with a caller's key.
type keyedCall struct {
	proc       string
	actor      middleware.Actor
	key        string
	in         adapter.Input
	approvalID string
}

func (r *results) call(ctx context.Context, c keyedCall, fn func(context.Context) (any, error)) (any, middleware.Envelope, error) {
	if c.proc == "" {
		c.proc = procRefund
	}
	if c.actor.ID == "" {
		c.actor = agent
	}
	if c.in == nil {
		c.in = refund
	}
	counted := func(ctx context.Context) (any, error) {
		r.runs.Add(1)
		return fn(ctx)
	}
	return adapter.Execute(as(ctx, c.actor), adapter.Resolve(r.eng, c.proc), adapter.Call[any]{Input: c.in, ApprovalID: c.approvalID,
		Surface: adapter.SurfaceRPC, IdempotencyKey: c.key, Codec: stringCodec{}, Status: frameworkStatus}, counted)
}

// refunded is a handler that succeeds with a response naming its key.
func refunded(ctx context.Context) (any, error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	return "refunded under " + x.IdempotencyKey, nil
}

// wantRuns fails unless the handler ran n times in all.
func (r *results) wantRuns(rule string, n int32) {
	r.t.Helper()
	if got := r.runs.Load(); got != n {
		r.t.Fatalf("%s: the handler ran %d times, want %d", rule, got, n)
	}
}

// replayedExecution returns the id of the execution that replayed
// original's result, once the sinks delivered (inside a bubble).
func (r *results) replayedExecution(original string) string {
	r.t.Helper()
	synctest.Wait()
	for _, e := range r.rec.Events() {
		if e.Type == middleware.EventReplayed && e.ReplayOf == original {
			return e.ExecutionID
		}
	}
	r.t.Fatalf("no execution replayed %s", original)
	return ""
}

// record returns the store's record of a key of the agent's: the handler
// saw it as its idempotency key.
func (r *results) record(key string) (store.ResultRecord, error) {
	return r.store.Get(r.t.Context(), store.ResultKey{Owner: middleware.ResultOwner("", agent), Key: key})
}

func TestReplayAnswersWithTheStoredResultAndRunsNothing(t *testing.T) {
	inBubble(t, testReplay)
}

func testReplay(t *testing.T) {
	r := oneResult(t, writeCap)
	c := keyedCall{key: "order-42-refund"}
	v1, env1, err := r.call(t.Context(), c, refunded)
	wantCode(t, env1, err, middleware.CodeOK)
	v2, env2, err := r.call(t.Context(), c, refunded)
	wantCode(t, env2, err, middleware.CodeOK)
	r.wantRuns("a repeat with the same key and input runs nothing", 1)
	if v2 != v1 || env2.ExecutionID != env1.ExecutionID || !env2.Replayed || env1.Replayed || env2.Attempts != 1 {
		t.Errorf("a repeat gets the stored envelope (original execution id, Replayed) and response: %q %+v, first %q %+v", v2, env2, v1, env1)
	}
	// The repeat is an execution of its own in the audit trail.
	repeat := r.replayedExecution(env1.ExecutionID)
	f := &fixture{t: t, eng: r.eng, rec: r.rec}
	f.wantTypes(repeat, middleware.EventRequested, middleware.EventReplayed)
	if ev := f.final(repeat); repeat == env1.ExecutionID || ev.ReplayOf != env1.ExecutionID || ev.Attempts != 0 {
		t.Errorf("the repeat's trail ends in capability.replayed naming the original: %+v", ev)
	}
	f.wantTypes(env1.ExecutionID, middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted)
}

func TestBothSpellingsOfAKeyAreOneKey(t *testing.T) {
	for _, tc := range []struct{ first, repeat string }{
		{`abc`, `"abc"`},
		{`"abc"`, `abc`},
		{` "abc" `, `abc`},
		{`"a\"b\\c"`, `"a\"b\\c"`},
		{strings.Repeat("k", 255), `"` + strings.Repeat("k", 255) + `"`},
		{`"with space"`, `"with space"`},
	} {
		r := oneResult(t, writeCap)
		_, env, err := r.call(t.Context(), keyedCall{key: tc.first}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		_, again, err := r.call(t.Context(), keyedCall{key: tc.repeat}, refunded)
		wantCode(t, again, err, middleware.CodeOK)
		if !again.Replayed || again.ExecutionID != env.ExecutionID {
			t.Errorf("%s then %s: both spellings of one value are one key, the repeat must replay: %+v", tc.first, tc.repeat, again)
		}
	}
}

func TestMalformedKeysAreInvalidArgument(t *testing.T) {
	r := oneResult(t, writeCap)
	for _, key := range []string{
		`""`, `"abc`, `"abc"x`, `"abc";p=1`, `"a\b"`, `a b`, `a"b`, `a\b`, "caf\u00e9", "\"caf\u00e9\"", "a\tb",
		strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`, `"abc", "def"`, `abc, def`,
	} {
		_, env, err := r.call(t.Context(), keyedCall{key: key}, refunded)
		wantCode(t, env, err, middleware.CodeInvalidArgument)
		if !strings.Contains(env.Error.Message, "Idempotency-Key") {
			t.Errorf("key %q: the refusal must name the header: %q", key, env.Error.Message)
		}
	}
	r.wantRuns("a malformed key runs nothing", 0)
}

func TestRepeatWhileTheFirstRunsIsInFlight(t *testing.T) {
	r := oneResult(t, writeCap)
	c := keyedCall{key: "k"}
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan middleware.Envelope)
	go func() {
		_, env, _ := r.call(t.Context(), c, func(ctx context.Context) (any, error) {
			close(entered)
			<-release
			return refunded(ctx)
		})
		done <- env
	}()
	<-entered
	_, env, err := r.call(t.Context(), c, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyInFlight)
	if !env.Error.Retryable || env.Replayed {
		t.Errorf("IDEMPOTENCY_IN_FLIGHT is safe to re-invoke, and no replay: %+v", env)
	}
	close(release)
	first := <-done
	_, env, err = r.call(t.Context(), c, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	if !env.Replayed || env.ExecutionID != first.ExecutionID {
		t.Errorf("once the first completed, a repeat replays it: %+v", env)
	}
	r.wantRuns("a key runs once", 1)
}

func TestKeyWithAnotherInputIsReused(t *testing.T) {
	r := oneResult(t, writeCap)
	_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	_, env, err = r.call(t.Context(), keyedCall{key: "k", in: refund2}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyKeyReused)
	if env.Error.Retryable {
		t.Error("a key reused with another input is not safe to re-invoke")
	}
	r.wantRuns("a reused key runs nothing", 1)
}

func TestKeysAreScopedByActorAndProcedure(t *testing.T) {
	const other = "/orders.v1.Orders/Cancel"
	r := newResults(t, middleware.NewRegistry().Register(procRefund, writeCap).Register(other, writeCap))
	var keys []string
	handler := func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		keys = append(keys, x.IdempotencyKey)
		return "ok", nil
	}
	bob := agent
	bob.OnBehalfOf = []string{"user-bob"}
	for _, c := range []keyedCall{
		{key: "same"},
		{key: "same", actor: bob},
		{key: "same", actor: middleware.Actor{ID: agent.ID, Tenant: "globex", Kind: agent.Kind, OnBehalfOf: agent.OnBehalfOf}},
		{key: "same", proc: other},
	} {
		_, env, err := r.call(t.Context(), c, handler)
		wantCode(t, env, err, middleware.CodeOK)
		if env.Replayed {
			t.Errorf("%+v: one caller's key never answers another actor's or another procedure's call", c)
		}
	}
	r.wantRuns("each actor and procedure runs its own", 4)
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, "idk_") || seen[k] {
			t.Errorf("the derived keys must be idk_ keys, distinct per actor and procedure: %v", keys)
		}
		seen[k] = true
	}
}

func TestTheHandlersKeyIsDerivedFromTheCallersKey(t *testing.T) {
	r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second})
	var first string
	_, env, err := r.call(t.Context(), keyedCall{key: "k"}, func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		first = x.IdempotencyKey
		return nil, errors.New("the database is down") // in doubt
	})
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	rec, err := r.record(first)
	if err != nil || rec.State != store.ResultInDoubt || rec.ExecutionID != env.ExecutionID {
		t.Fatalf("the handler's idempotency key is the record's key: %+v, %v", rec, err)
	}
}

func TestKeysAreIgnoredWithoutAResultStore(t *testing.T) {
	f := newFixture(t, procRefund, writeCap, middleware.WithActor(actorOf))
	for range 2 {
		_, env, err := adapter.Execute(as(t.Context(), agent), adapter.Resolve(f.eng, procRefund),
			adapter.Call[any]{Input: refund, IdempotencyKey: "not \"even\" well formed"}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		if env.Replayed {
			t.Error("an engine without a result store replays nothing")
		}
	}
}

// TestAKeyOnAReadHasNoEffect: as at Stripe, a caller's key on a read
// (side effect none or read) is checked and then ignored: nothing is
// claimed or stored, every call runs; a malformed key is still refused,
// and a dedup window still applies.
func TestAKeyOnAReadHasNoEffect(t *testing.T) {
	none := middleware.Capability{SideEffect: middleware.SideEffectNone, Timeout: time.Second}
	for name, c := range map[string]middleware.Capability{"read": readCap, "none": none} {
		t.Run(name, func(t *testing.T) {
			r := oneResult(t, c)
			var keys []string
			for range 2 {
				_, env, err := r.call(t.Context(), keyedCall{key: "order-42"}, func(ctx context.Context) (any, error) {
					x, _ := middleware.ExecutionFromContext(ctx)
					keys = append(keys, x.IdempotencyKey)
					return refunded(ctx)
				})
				wantCode(t, env, err, middleware.CodeOK)
				if env.Replayed {
					t.Errorf("a key on a read replays nothing: %+v", env)
				}
			}
			r.wantRuns("a key on a read has no effect: each call runs", 2)
			if keys[0] == keys[1] {
				t.Errorf("a key on a read is not the execution's key: both runs saw %s", keys[0])
			}
			for _, k := range keys {
				if rec, err := r.record(k); !errors.Is(err, store.ErrResultNotFound) {
					t.Errorf("a key on a read stores nothing: %+v (%v)", rec, err)
				}
			}
			_, env, err := r.call(t.Context(), keyedCall{key: `"unterminated`}, refunded)
			wantCode(t, env, err, middleware.CodeInvalidArgument)
			_, env, err = adapter.Execute(as(t.Context(), agent), adapter.Resolve(r.eng, procRefund),
				adapter.Call[any]{Input: adapter.JSONInput([]byte(`{"a":1,"a":2}`)), IdempotencyKey: "k", Codec: stringCodec{}}, refunded)
			wantCode(t, env, err, middleware.CodeOK) // nothing needs the digest of a read's input
		})
	}
	t.Run("dedup", func(t *testing.T) {
		c := readCap
		c.Dedup = time.Minute
		r := oneResult(t, c)
		_, first, err := r.call(t.Context(), keyedCall{key: "a"}, refunded)
		wantCode(t, first, err, middleware.CodeOK)
		_, env, err := r.call(t.Context(), keyedCall{key: "b"}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		if !env.Replayed || env.ExecutionID != first.ExecutionID {
			t.Errorf("a read's dedup window applies whatever key it carries: %+v", env)
		}
		r.wantRuns("a read's dedup window replays", 1)
	})
}

func TestAKeyedCallMustBindItsInput(t *testing.T) {
	r := oneResult(t, writeCap)
	for name, in := range map[string]adapter.Input{
		"duplicate names": adapter.JSONInput([]byte(`{"order":"42","order":"43"}`)),
		"no input":        nil,
	} {
		_, env, err := adapter.Execute(as(t.Context(), agent), adapter.Resolve(r.eng, procRefund),
			adapter.Call[any]{Input: in, IdempotencyKey: "k", Codec: stringCodec{}}, refunded)
		wantCode(t, env, err, middleware.CodeInvalidArgument)
		if !strings.Contains(env.Error.Message, "Idempotency-Key") {
			t.Errorf("%s: a keyed call whose input cannot be bound is refused naming its key: %q", name, env.Error.Message)
		}
	}
}

func TestNewNeedsAResultKeyAndDedupAResultStore(t *testing.T) {
	reg := func(c middleware.Capability) *middleware.Registry {
		return middleware.NewRegistry().Register(procRefund, c)
	}
	for name, tc := range map[string]struct {
		reg  *middleware.Registry
		opts []middleware.Option
		want string
	}{
		"a result store without a key": {reg(writeCap), []middleware.Option{middleware.WithResultStore(resultstore.NewMemory())}, "WithResultKey"},
		"dedup without a result store": {reg(middleware.Capability{SideEffect: middleware.SideEffectWrite, Dedup: time.Minute}), nil, "Dedup"},
		"a short key":                  {reg(writeCap), []middleware.Option{middleware.WithResultKey(middleware.ResultKey{ID: "k", Key: []byte("short")})}, "16, 24 or 32"},
		"a key without an ID":          {reg(writeCap), []middleware.Option{middleware.WithResultKey(middleware.ResultKey{Key: sealKey.Key})}, "ID"},
		"two keys of one ID":           {reg(writeCap), []middleware.Option{middleware.WithResultKey(sealKey, sealKey)}, "two keys"},
		"a negative retention":         {reg(writeCap), []middleware.Option{middleware.WithDefaults(middleware.Defaults{ResultRetention: -time.Hour})}, "ResultRetention"},
		"no records in the quota":      {reg(writeCap), []middleware.Option{middleware.WithResultQuota(0, 1<<20)}, "WithResultQuota"},
		"no bytes in the quota":        {reg(writeCap), []middleware.Option{middleware.WithResultQuota(10, -1)}, "WithResultQuota"},
	} {
		_, err := middleware.New(tc.reg, append(tc.opts, middleware.WithProtoFiles(nil), middleware.WithLogger(discard))...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New must fail naming %q: %v", name, tc.want, err)
		}
	}
}

// TestAResultQuotaBoundsWhatOneCallerKeeps: a claim that would make a new
// record for an actor at its quota is refused IDEMPOTENCY_QUOTA_EXCEEDED
// (not safe to re-invoke: it stays refused until results expire) and runs
// nothing; repeats of its stored keys still replay, other actors are not
// held to it, and expired results stop counting.
func TestAResultQuotaBoundsWhatOneCallerKeeps(t *testing.T) {
	r := oneResult(t, writeCap, middleware.WithResultQuota(2, 1<<20))
	for _, key := range []string{"a", "b"} {
		_, env, err := r.call(t.Context(), keyedCall{key: key}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
	}
	_, env, err := r.call(t.Context(), keyedCall{key: "c"}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyQuotaExceeded)
	if env.Error.Retryable || env.Status != middleware.StatusFailed || !strings.Contains(env.Error.Message, "nothing ran") {
		t.Errorf("a caller over its quota is refused, not safe to re-invoke at once, and told nothing ran: %+v", env.Error)
	}
	r.wantRuns("a claim over the quota runs nothing", 2)
	_, env, err = r.call(t.Context(), keyedCall{key: "a"}, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	if !env.Replayed {
		t.Errorf("a repeat of a stored key replays at the quota: %+v", env)
	}
	_, env, err = r.call(t.Context(), keyedCall{key: "c", actor: boss}, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	_, env, err = r.call(t.Context(), keyedCall{}, refunded)
	wantCode(t, env, err, middleware.CodeOK) // a call without a key stores nothing
	r.clock.Advance(24 * time.Hour)
	_, env, err = r.call(t.Context(), keyedCall{key: "c"}, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	r.wantRuns("expired results stop counting", 5)
}

// TestAResultQuotaCountsStoredBytes: the bytes of stored results count
// once stored, so one result may overshoot the quota; the next claim is
// refused.
func TestAResultQuotaCountsStoredBytes(t *testing.T) {
	r := oneResult(t, writeCap, middleware.WithResultQuota(100, 1000))
	big := func(context.Context) (any, error) { return strings.Repeat("x", 4000), nil }
	_, env, err := r.call(t.Context(), keyedCall{key: "big"}, big)
	wantCode(t, env, err, middleware.CodeOK)
	_, env, err = r.call(t.Context(), keyedCall{key: "big"}, big)
	wantCode(t, env, err, middleware.CodeOK)
	if !env.Replayed {
		t.Errorf("the result that overshot the quota is stored and replayed: %+v", env)
	}
	_, env, err = r.call(t.Context(), keyedCall{key: "next"}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyQuotaExceeded)
	r.wantRuns("over the byte quota nothing runs", 1)
}

// TestTheResultQuotaDefaultsTo1000Records: without WithResultQuota, an
// actor keeps at most 1,000 results (and 64 MiB).
func TestTheResultQuotaDefaultsTo1000Records(t *testing.T) {
	r := oneResult(t, writeCap)
	for i := range 1000 {
		_, env, err := r.call(t.Context(), keyedCall{key: fmt.Sprint(i)}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
	}
	_, env, err := r.call(t.Context(), keyedCall{key: "1000"}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyQuotaExceeded)
	r2 := oneResult(t, writeCap)
	big := func(context.Context) (any, error) { return strings.Repeat("x", 1<<20), nil } // stored whole: at the response limit
	for i := range 64 {
		_, env, err := r2.call(t.Context(), keyedCall{key: fmt.Sprint(i)}, big)
		wantCode(t, env, err, middleware.CodeOK)
	}
	_, env, err = r2.call(t.Context(), keyedCall{key: "64"}, big)
	wantCode(t, env, err, middleware.CodeIdempotencyQuotaExceeded)
}

// TestWhatIsStoredReleasedOrInDoubt walks the rules of what an execution
// with a key leaves in the store.
func TestWhatIsStoredReleasedOrInDoubt(t *testing.T) {
	idempotentWrite := middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: time.Second}
	gated := middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second, Approval: middleware.Approval{Required: true}}
	for _, tc := range []struct {
		name    string
		cap     middleware.Capability
		opts    []middleware.Option
		ctx     func(context.Context) context.Context
		handler func(context.Context) (any, error)
		code    middleware.Code
		want    store.ResultState // 0: released
	}{
		{"a completed result is stored", writeCap, nil, nil, refunded, middleware.CodeOK, store.ResultDone},
		{"a handler's own framework error is stored", writeCap, nil, nil,
			func(context.Context) (any, error) { return nil, &frameworkError{"order 42 is closed"} }, middleware.CodeExecutionFailed, store.ResultDone},
		{"a declared error is stored", writeCap, nil, nil,
			func(context.Context) (any, error) {
				return nil, middleware.NewError(middleware.CodeExecutionFailed, "ALREADY_REFUNDED")
			}, middleware.CodeExecutionFailed, store.ResultDone},
		{"a write's plain failure is in doubt", writeCap, nil, nil,
			func(context.Context) (any, error) { return nil, errors.New("connection reset") }, middleware.CodeExecutionFailed, store.ResultInDoubt},
		{"a write's retryable framework error is in doubt", writeCap, nil, nil,
			func(context.Context) (any, error) { return nil, middleware.Retryable(&frameworkError{"unavailable"}) }, middleware.CodeExecutionFailed, store.ResultInDoubt},
		{"a write's panic is in doubt", writeCap, nil, nil,
			func(context.Context) (any, error) { panic("bug") }, middleware.CodeExecutionFailed, store.ResultInDoubt},
		{"a read's retryable failure is released", readCap, nil, nil,
			func(context.Context) (any, error) { return nil, errTransient }, middleware.CodeExecutionFailed, 0},
		{"a read's other failure is released", readCap, nil, nil,
			func(context.Context) (any, error) { return nil, errors.New("bug") }, middleware.CodeExecutionFailed, 0},
		{"an idempotent write's retryable failure is released", idempotentWrite, nil, nil,
			func(context.Context) (any, error) { return nil, errTransient }, middleware.CodeExecutionFailed, 0},
		{"an idempotent write's permanent failure is in doubt", idempotentWrite, nil, nil,
			func(context.Context) (any, error) { return nil, errors.New("bug") }, middleware.CodeExecutionFailed, store.ResultInDoubt},
		{"an approval request is released", gated, []middleware.Option{middleware.WithApprovalStore(approvalstore.NewMemory())}, nil,
			refunded, middleware.CodeApprovalRequired, 0},
		{"an audit failure is released", writeCap, []middleware.Option{middleware.WithAuditSink(failingAuditSink{})}, nil,
			refunded, middleware.CodeAuditUnavailable, 0},
		{"an audit failure at started releases the claim", writeCap, []middleware.Option{middleware.WithAuditSink(failingAuditSink{at: middleware.EventStarted})}, nil,
			refunded, middleware.CodeAuditUnavailable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				r := oneResult(t, tc.cap, tc.opts...)
				var key string
				_, env, err := r.call(t.Context(), keyedCall{key: "k"}, func(ctx context.Context) (any, error) {
					x, _ := middleware.ExecutionFromContext(ctx)
					key = x.IdempotencyKey
					return tc.handler(ctx)
				})
				wantCode(t, env, err, tc.code)
				if key == "" { // nothing ran: a repeat must meet the same refusal, not the key in flight
					_, env, err := r.call(t.Context(), keyedCall{key: "k"}, tc.handler)
					wantCode(t, env, err, tc.code)
					return
				}
				rec, err := r.record(key)
				switch {
				case tc.want == 0 && !errors.Is(err, store.ErrResultNotFound):
					t.Errorf("%s: the key must be given back, the store has %+v (%v)", tc.name, rec, err)
				case tc.want != 0 && (err != nil || rec.State != tc.want):
					t.Errorf("%s: the key must be %s: %+v (%v)", tc.name, tc.want, rec, err)
				}
			})
		})
	}
}

// failingAuditSink fails to record events of type at, or every event.
type failingAuditSink struct{ at middleware.EventType }

func (s failingAuditSink) Record(_ context.Context, e middleware.Event) error {
	if s.at != "" && e.Type != s.at {
		return nil
	}
	return errors.New("audit down")
}

func TestAStoredFrameworkErrorIsRebuilt(t *testing.T) {
	r := oneResult(t, writeCap)
	fail := func(context.Context) (any, error) { return nil, &frameworkError{"order 42 is closed"} }
	_, first, err1 := r.call(t.Context(), keyedCall{key: "k"}, fail)
	_, env, err := r.call(t.Context(), keyedCall{key: "k"}, fail)
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	own, ok := adapter.HandlerError(err)
	if fe, isFE := errors.AsType[*frameworkError](own); !ok || !isFE || fe.msg != "order 42 is closed" {
		t.Errorf("a repeat fails with the framework's error, rebuilt, for the adapter to write unchanged: %v", err)
	}
	if !env.Replayed || env.ExecutionID != first.ExecutionID || env.Error.Message != first.Error.Message || env.Error.Retryable {
		t.Errorf("the stored failure's envelope: %+v, first %+v (%v)", env, first, err1)
	}
	r.wantRuns("a stored failure runs nothing", 1)
}

func TestCancelledBeforeTheFirstAttemptGivesTheKeyBack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		r := oneResult(t, writeCap)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, env, err := r.call(ctx, keyedCall{key: "k"}, refunded)
		wantCode(t, env, err, middleware.CodeCancelled)
		synctest.Wait()
		_, env, err = r.call(t.Context(), keyedCall{key: "k"}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		if env.Replayed {
			t.Error("nothing ran, so the key was given back and the repeat runs")
		}
	})
}

func TestAnInDoubtKeyIsInDoubtForRepeats(t *testing.T) {
	r := oneResult(t, writeCap)
	_, first, _ := r.call(t.Context(), keyedCall{key: "k"}, func(context.Context) (any, error) { return nil, errors.New("reset") })
	_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyInDoubt)
	if env.Error.Retryable || !strings.Contains(env.Error.Message, first.ExecutionID) {
		t.Errorf("IN_DOUBT is not safe to re-invoke, and names the execution in doubt: %+v", env.Error)
	}
	r.wantRuns("a key in doubt runs nothing", 1)
}

func TestALateResultIsStoredWhenItReturns(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: 100 * time.Millisecond})
		keys := make(chan string, 1)
		_, env, err := r.call(t.Context(), keyedCall{key: "k"}, func(ctx context.Context) (any, error) {
			x, _ := middleware.ExecutionFromContext(ctx)
			keys <- x.IdempotencyKey
			time.Sleep(time.Second) // ignores its context: the charge lands late
			return "charged late", nil
		})
		wantCode(t, env, err, middleware.CodeTimeout)
		key := <-keys
		if rec, err := r.record(key); err != nil || rec.State != store.ResultInDoubt {
			t.Fatalf("at the deadline the key is in doubt: %+v, %v", rec, err)
		}
		_, again, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
		wantCode(t, again, err, middleware.CodeIdempotencyInDoubt)
		time.Sleep(time.Second)
		synctest.Wait()
		rec, err := r.record(key)
		if err != nil || rec.State != store.ResultDone || !rec.Result.Late || rec.Result.ExecutionID != env.ExecutionID {
			t.Fatalf("the late result is stored when it returns: %+v, %v", rec, err)
		}
		r.wantLateReplayed(env)
	})
}

// wantLateReplayed checks that a repeat of the key "k" replays the
// result "charged late" that env's execution stored late, and runs
// nothing.
func (r *results) wantLateReplayed(env middleware.Envelope) {
	r.t.Helper()
	v, replay, err := r.call(r.t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(r.t, replay, err, middleware.CodeOK)
	if v != "charged late" || !replay.Replayed || replay.ExecutionID != env.ExecutionID {
		r.t.Errorf("a repeat replays the late result: %v %+v", v, replay)
	}
	r.wantRuns("the late result is never run again", 1)
}

func TestReconcile(t *testing.T) {
	inDoubt := func(t *testing.T, reconcile func(context.Context, string) (middleware.Reconciled, error)) (*results, middleware.Envelope, string) {
		r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: time.Second, Reconcile: reconcile})
		var key string
		_, env, _ := r.call(t.Context(), keyedCall{key: "k"}, func(ctx context.Context) (any, error) {
			x, _ := middleware.ExecutionFromContext(ctx)
			key = x.IdempotencyKey
			return nil, errors.New("the reply was lost")
		})
		return r, env, key
	}
	t.Run("done with a response is stored and replayed", func(t *testing.T) {
		var asked []string
		r, first, key := inDoubt(t, func(_ context.Context, key string) (middleware.Reconciled, error) {
			asked = append(asked, key)
			return middleware.Reconciled{Done: true, Response: wrapperspb.String("refund ref-1")}, nil
		})
		for range 2 {
			v, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
			wantCode(t, env, err, middleware.CodeOK)
			if v != encoded(t, wrapperspb.String("refund ref-1")) || !env.Replayed || env.ExecutionID != first.ExecutionID {
				t.Errorf("a reconciled result is replayed as the execution in doubt's: %v %+v", v, env)
			}
		}
		if len(asked) != 1 || asked[0] != key {
			t.Errorf("Reconcile is asked once, with the handler's key %s: %v", key, asked)
		}
		r.wantRuns("a reconciled call runs nothing", 1)
	})
	t.Run("done without a response replays the envelope alone", func(t *testing.T) {
		r, first, _ := inDoubt(t, func(context.Context, string) (middleware.Reconciled, error) {
			return middleware.Reconciled{Done: true}, nil
		})
		v, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		if v != "<no body>" || !env.Replayed || env.ExecutionID != first.ExecutionID {
			t.Errorf("done without a response: the envelope without a body: %v %+v", v, env)
		}
	})
	t.Run("a reconciled response over 1 MiB replays the envelope alone", func(t *testing.T) {
		big := wrapperspb.String(strings.Repeat("x", 1<<20))
		r, first, _ := inDoubt(t, func(context.Context, string) (middleware.Reconciled, error) {
			return middleware.Reconciled{Done: true, Response: big}, nil
		})
		v, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		if v != "<no body>" || !env.Replayed || env.ExecutionID != first.ExecutionID {
			t.Errorf("over 1 MiB only the envelope is stored, a reconciled response too: %.20v %+v", v, env)
		}
	})
	t.Run("not found runs again under the same key", func(t *testing.T) {
		r, first, key := inDoubt(t, func(context.Context, string) (middleware.Reconciled, error) { return middleware.Reconciled{}, nil })
		v, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		if env.Replayed || env.ExecutionID == first.ExecutionID || v != "refunded under "+key {
			t.Errorf("not found: a new execution runs under the same key %s: %v %+v", key, v, env)
		}
		r.wantRuns("not found runs again", 2)
		if _, again, _ := r.call(t.Context(), keyedCall{key: "k"}, refunded); !again.Replayed || again.ExecutionID != env.ExecutionID {
			t.Errorf("and its result is stored: %+v", again)
		}
	})
	for name, hook := range map[string]func(context.Context, string) (middleware.Reconciled, error){
		"an error keeps it in doubt": func(context.Context, string) (middleware.Reconciled, error) {
			return middleware.Reconciled{}, errors.New("gateway down")
		},
		"a panic keeps it in doubt": func(context.Context, string) (middleware.Reconciled, error) { panic("bug") },
		"a response the engine cannot store keeps doubt": func(context.Context, string) (middleware.Reconciled, error) {
			return middleware.Reconciled{Done: true, Response: 42}, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, _, key := inDoubt(t, hook)
			for range 2 {
				_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
				wantCode(t, env, err, middleware.CodeIdempotencyInDoubt)
			}
			if rec, err := r.record(key); err != nil || rec.State != store.ResultInDoubt {
				t.Errorf("the key stays in doubt: %+v, %v", rec, err)
			}
			r.wantRuns("nothing runs while in doubt", 1)
		})
	}
}

func TestApprovalsAndKeys(t *testing.T) {
	approvals := approvalstore.NewMemory()
	r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second, Approval: middleware.Approval{Required: true}},
		middleware.WithApprovalStore(approvals))
	_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	id := env.ApprovalID
	if _, err := r.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: boss}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	handler := func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		keys = append(keys, x.IdempotencyKey)
		return "refunded", nil
	}
	_, resumed, err := r.call(t.Context(), keyedCall{key: "k", approvalID: id}, handler)
	wantCode(t, resumed, err, middleware.CodeOK)
	if resumed.Replayed || resumed.ApprovalID != id {
		t.Fatalf("the resume claims the key, consumes and runs: %+v", resumed)
	}
	for _, approvalID := range []string{id, ""} {
		_, env, err := r.call(t.Context(), keyedCall{key: "k", approvalID: approvalID}, handler)
		wantCode(t, env, err, middleware.CodeOK)
		if !env.Replayed || env.ExecutionID != resumed.ExecutionID || env.ApprovalID != id {
			t.Errorf("a repeat is replayed before the gate: %+v", env)
		}
	}
	r.wantRuns("a gated call with a key runs once", 1)
	if len(keys) != 1 || keys[0] == "" {
		t.Fatalf("keys %v", keys)
	}
	// The key derived from the caller's, as the same call without an
	// approval sees it: after a consumption the handler sees the
	// approval-derived key instead.
	var callerDerived string
	plain := oneResult(t, writeCap)
	_, _, _ = plain.call(t.Context(), keyedCall{key: "k"}, func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		callerDerived = x.IdempotencyKey
		return "refunded", nil
	})
	if !strings.HasPrefix(keys[0], "idk_") || keys[0] == callerDerived {
		t.Errorf("after a consumption the handler's key is the approval-derived one, not %s: %s", callerDerived, keys[0])
	}
	consumed := 0
	for _, e := range r.rec.Events() {
		if e.Type == middleware.EventApprovalConsumed {
			consumed++
		}
	}
	if consumed != 1 {
		t.Errorf("a repeat never consumes again: %d consumptions", consumed)
	}
	rec, err := approvals.Get(t.Context(), id)
	if err != nil || rec.ConsumedBy != resumed.ExecutionID || rec.Status != store.ApprovalCompleted {
		t.Errorf("the approval is consumed by the resume alone: %+v, %v", rec, err)
	}
}

func TestDedupWindow(t *testing.T) {
	r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second, Dedup: time.Minute})
	_, first, err := r.call(t.Context(), keyedCall{}, refunded)
	wantCode(t, first, err, middleware.CodeOK)
	_, env, err := r.call(t.Context(), keyedCall{}, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	if !env.Replayed || env.ExecutionID != first.ExecutionID {
		t.Errorf("a repeat within the window replays: %+v", env)
	}
	_, other, _ := r.call(t.Context(), keyedCall{in: refund2}, refunded)
	_, bob, _ := r.call(t.Context(), keyedCall{actor: boss}, refunded)
	if other.Replayed || bob.Replayed {
		t.Error("another input, or another actor, is another call")
	}
	r.clock.Advance(time.Minute)
	_, env, _ = r.call(t.Context(), keyedCall{}, refunded)
	if env.Replayed {
		t.Error("after the window a repeat runs again")
	}
	_, keyed, _ := r.call(t.Context(), keyedCall{key: "k"}, refunded)
	if keyed.Replayed {
		t.Error("a caller's key is its own scope, apart from the window")
	}
	r.wantRuns("one run per distinct call and window", 5)
}

func TestStoredResponsesAreSealed(t *testing.T) {
	const secret = "card 4111-1111-1111-1111"
	r := oneResult(t, writeCap)
	var key string
	_, _, _ = r.call(t.Context(), keyedCall{key: "k"}, func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		key = x.IdempotencyKey
		return secret, nil
	})
	rec, err := r.record(key)
	if err != nil {
		t.Fatal(err)
	}
	// "4111-1111", not "4111": hex ids, digests and the monotonic clock
	// reading of an event's Time may hold four digits, never the dash.
	const marker = "4111-1111"
	if strings.Contains(string(rec.Result.Sealed), marker) || strings.Contains(string(rec.Result.Envelope), marker) || rec.Result.KeyID != sealKey.ID {
		t.Errorf("the store must hold the response sealed, with the key's id: %+v", rec.Result)
	}
	for _, e := range r.rec.Events() {
		if strings.Contains(fmt.Sprintf("%+v", e), marker) {
			t.Errorf("a stored response reached an event: %+v", e)
		}
	}
	// A sealed response moved to another key does not open: the repeat
	// fails closed, nothing runs.
	var other string
	_, _, _ = r.call(t.Context(), keyedCall{key: "k2"}, func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		other = x.IdempotencyKey
		return "other", nil
	})
	moved := rec.Result
	tampered := &swapStore{ResultStore: r.store, key: other, result: moved}
	eng, err := middleware.New(middleware.NewRegistry().Register(procRefund, writeCap), middleware.WithProtoFiles(nil), middleware.WithLogger(discard),
		middleware.WithActor(actorOf), middleware.WithResultStore(tampered), middleware.WithResultKey(sealKey))
	if err != nil {
		t.Fatal(err)
	}
	r.eng = eng
	_, env, err := r.call(t.Context(), keyedCall{key: "k2"}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyUnavailable)
	r.wantRuns("a result that does not open runs nothing", 2)
}

// swapStore answers the claim of one key with another key's result.
type swapStore struct {
	store.ResultStore
	key    string
	result store.Result
}

func (s *swapStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	c, err := s.ResultStore.Claim(ctx, req)
	if req.Key == s.key && c.Status == store.ClaimDone {
		c.Result.Sealed, c.Result.KeyID = s.result.Sealed, s.result.KeyID
	}
	return c, err
}

func TestResultKeysRotate(t *testing.T) {
	old := sealKey
	next := middleware.ResultKey{ID: "k2", Key: []byte("fedcba9876543210fedcba9876543210")}
	shared := resultstore.NewMemory()
	build := func(keys ...middleware.ResultKey) *results {
		r := &results{t: t, store: shared}
		eng, err := middleware.New(middleware.NewRegistry().Register(procRefund, writeCap), middleware.WithProtoFiles(nil), middleware.WithLogger(discard),
			middleware.WithActor(actorOf), middleware.WithResultStore(shared), middleware.WithResultKey(keys[0], keys[1:]...))
		if err != nil {
			t.Fatal(err)
		}
		r.eng = eng
		return r
	}
	_, first, _ := build(old).call(t.Context(), keyedCall{key: "k"}, refunded)
	v, env, err := build(next, old).call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	if !env.Replayed || env.ExecutionID != first.ExecutionID || !strings.HasPrefix(v.(string), "refunded under idk_") {
		t.Errorf("a record sealed with a previous key opens: %v %+v", v, env)
	}
	without := build(next)
	_, env, err = without.call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyUnavailable)
	without.wantRuns("a record sealed with a dropped key fails closed", 0)
}

func TestAResponseOverTheLimitIsReplayedWithoutABody(t *testing.T) {
	r := oneResult(t, writeCap)
	big := strings.Repeat("x", 1<<20+1)
	_, first, _ := r.call(t.Context(), keyedCall{key: "k"}, func(context.Context) (any, error) { return big, nil })
	v, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	if v != "<no body>" || !env.Replayed || env.ExecutionID != first.ExecutionID {
		t.Errorf("over 1 MiB only the envelope is stored: %.20v %+v", v, env)
	}
}

// encoded is what the test codec reads back of a protobuf message a
// Reconcile hook returned: its binary encoding.
func encoded(t *testing.T, m proto.Message) string {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lossyStore loses the replies of the first lose claims (the claim lands,
// the engine sees an error), or of every claim when lose < 0; it records
// the releases asked of it.
type lossyStore struct {
	store.ResultStore
	mu       sync.Mutex
	lose     int
	released []string
}

func (s *lossyStore) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	c, err := s.ResultStore.Claim(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lose != 0 {
		s.lose--
		return store.Claim{}, errors.New("read tcp: connection reset by peer")
	}
	return c, err
}

func (s *lossyStore) Release(ctx context.Context, key store.ResultKey, executionID string) error {
	s.mu.Lock()
	s.released = append(s.released, executionID)
	s.mu.Unlock()
	return s.ResultStore.Release(ctx, key, executionID)
}

func TestAResultStoreThatFailsFailsClosed(t *testing.T) {
	build := func(t *testing.T, lose int) (*results, *lossyStore) {
		s := &lossyStore{ResultStore: resultstore.NewMemory(), lose: lose}
		r := &results{t: t, store: resultstore.NewMemory()}
		eng, err := middleware.New(middleware.NewRegistry().Register(procRefund, writeCap), middleware.WithProtoFiles(nil), middleware.WithLogger(discard),
			middleware.WithActor(actorOf), middleware.WithResultStore(s), middleware.WithResultKey(sealKey))
		if err != nil {
			t.Fatal(err)
		}
		r.eng = eng
		return r, s
	}
	t.Run("a lost claim reply is claimed again", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			r, _ := build(t, 2)
			_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
			wantCode(t, env, err, middleware.CodeOK)
			r.wantRuns("a claim that landed although its reply was lost is this execution's", 1)
		})
	})
	t.Run("a store that stays down is IDEMPOTENCY_UNAVAILABLE", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			r, s := build(t, -1)
			_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
			wantCode(t, env, err, middleware.CodeIdempotencyUnavailable)
			r.wantRuns("nothing runs without a claim", 0)
			if !env.Error.Retryable {
				t.Error("nothing ran: safe to re-invoke")
			}
			synctest.Wait()
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.released) != 1 || s.released[0] != env.ExecutionID {
				t.Errorf("a claim whose every reply was lost may have landed: it is released, got %v", s.released)
			}
		})
	})
}

func TestStreamsAreNeverReplayed(t *testing.T) {
	r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true})
	for range 2 {
		env, err := adapter.ExecuteStream(as(t.Context(), agent), adapter.Resolve(r.eng, procRefund),
			adapter.Call[struct{}]{IdempotencyKey: "k"}, func(context.Context) error { r.runs.Add(1); return nil })
		wantCode(t, env, err, middleware.CodeOK)
	}
	r.wantRuns("a stream runs every time", 2)
}

// TestReconcileIsAskedWithTheKeyTheHandlerSaw: after a consumption the
// handler's key is the approval-derived one; a repeat of its key in doubt
// asks Reconcile about that key, the one the downstream knows, and never
// runs the call again on a "not found" about a key it never saw.
func TestReconcileIsAskedWithTheKeyTheHandlerSaw(t *testing.T) {
	for _, resend := range []bool{true, false} {
		t.Run(fmt.Sprintf("the first repeat carries the approval id: %v", resend), func(t *testing.T) {
			approvals := approvalstore.NewMemory()
			var mu sync.Mutex
			var asked []string
			r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: time.Second, Approval: middleware.Approval{Required: true},
				Reconcile: func(_ context.Context, key string) (middleware.Reconciled, error) {
					mu.Lock()
					defer mu.Unlock()
					asked = append(asked, key)
					return middleware.Reconciled{Done: true}, nil
				}}, middleware.WithApprovalStore(approvals))
			_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
			wantCode(t, env, err, middleware.CodeApprovalRequired)
			id := env.ApprovalID
			if _, err := r.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: boss}); err != nil {
				t.Fatal(err)
			}
			var seen string
			_, first, err := r.call(t.Context(), keyedCall{key: "k", approvalID: id}, func(ctx context.Context) (any, error) {
				x, _ := middleware.ExecutionFromContext(ctx)
				seen = x.IdempotencyKey
				return nil, errors.New("the reply was lost")
			})
			wantCode(t, first, err, middleware.CodeExecutionFailed)
			if !resend { // the handler's key is unknown: in doubt, the hook not asked, the record as it was
				_, env, err = r.call(t.Context(), keyedCall{key: "k"}, refunded)
				wantCode(t, env, err, middleware.CodeIdempotencyInDoubt)
				if !strings.Contains(env.Error.Message, first.ExecutionID) || !strings.Contains(env.Error.Message, "Agentsafe-Approval-Id") {
					t.Errorf("in doubt, naming the execution in doubt and how to reconcile it: %q", env.Error.Message)
				}
				mu.Lock()
				if len(asked) != 0 {
					t.Errorf("Reconcile must not be asked about a key the handler may not have seen: %v", asked)
				}
				mu.Unlock()
			}
			_, env, err = r.call(t.Context(), keyedCall{key: "k", approvalID: id}, refunded)
			wantCode(t, env, err, middleware.CodeOK)
			if !env.Replayed || env.ExecutionID != first.ExecutionID {
				t.Errorf("a reconciled key in doubt replays as the execution in doubt: %+v", env)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) != 1 || asked[0] != seen {
				t.Errorf("Reconcile must be asked with the key the handler saw, %s: %v", seen, asked)
			}
			r.wantRuns("a reconciled call runs once", 1)
		})
	}
}

// TestAFailedReconciliationKeepsTheExecutionInDoubt: a repeat whose
// Reconcile failed ran nothing; the key stays in doubt about the
// execution that may have run, which later repeats name and a later
// reconciliation replays as.
func TestAFailedReconciliationKeepsTheExecutionInDoubt(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: time.Second,
		Reconcile: func(context.Context, string) (middleware.Reconciled, error) {
			if fail.Load() {
				return middleware.Reconciled{}, errors.New("gateway down")
			}
			return middleware.Reconciled{Done: true}, nil
		}})
	_, first, _ := r.call(t.Context(), keyedCall{key: "k"}, func(context.Context) (any, error) { return nil, errors.New("the reply was lost") })
	_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyInDoubt)
	_, env, err = r.call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeIdempotencyInDoubt)
	if !strings.Contains(env.Error.Message, first.ExecutionID) {
		t.Errorf("after a failed reconciliation, a repeat names the execution in doubt, %s: %q", first.ExecutionID, env.Error.Message)
	}
	fail.Store(false)
	_, env, err = r.call(t.Context(), keyedCall{key: "k"}, refunded)
	wantCode(t, env, err, middleware.CodeOK)
	if !env.Replayed || env.ExecutionID != first.ExecutionID {
		t.Errorf("the reconciled result replays as the execution in doubt's, %s: %+v", first.ExecutionID, env)
	}
	r.wantRuns("nothing runs while reconciling", 1)
}

// TestARunAfterNotFoundIsInDoubtAboutItself: when Reconcile found nothing
// and the call ran again, under the same key, and failed in doubt too,
// the key is in doubt about that second run, the one that may have had
// the effect.
func TestARunAfterNotFoundIsInDoubtAboutItself(t *testing.T) {
	r := oneResult(t, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: time.Second,
		Reconcile: func(context.Context, string) (middleware.Reconciled, error) { return middleware.Reconciled{}, nil }})
	var key string
	lost := func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		key = x.IdempotencyKey
		return nil, errors.New("the reply was lost")
	}
	_, first, _ := r.call(t.Context(), keyedCall{key: "k"}, lost)
	_, second, err := r.call(t.Context(), keyedCall{key: "k"}, lost)
	wantCode(t, second, err, middleware.CodeExecutionFailed)
	if second.ExecutionID == first.ExecutionID || second.Attempts != 1 {
		t.Fatalf("not found: the call runs again: %+v", second)
	}
	if rec, err := r.record(key); err != nil || rec.State != store.ResultInDoubt || rec.ExecutionID != second.ExecutionID {
		t.Errorf("a run after not found is in doubt about itself, %s: %+v (%v)", second.ExecutionID, rec, err)
	}
}

// TestAClaimLastsThroughTheApprovalWait: a keyed resume that waits for
// the decision (an MCP bridge's answering round) holds its key while it
// waits: a repeat meanwhile is IDEMPOTENCY_IN_FLIGHT, never in doubt
// about an execution that has not run yet.
func TestAClaimLastsThroughTheApprovalWait(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		approvals := approvalstore.NewMemory()
		gated := middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: time.Second, Approval: middleware.Approval{Required: true}}
		eng, err := middleware.New(middleware.NewRegistry().Register(procRefund, gated), middleware.WithProtoFiles(nil), middleware.WithLogger(discard),
			middleware.WithActor(actorOf), middleware.WithApprovalStore(approvals), middleware.WithResultStore(resultstore.NewMemory()), middleware.WithResultKey(sealKey))
		if err != nil {
			t.Fatal(err)
		}
		r := &results{t: t, eng: eng}
		_, env, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
		wantCode(t, env, err, middleware.CodeApprovalRequired)
		id := env.ApprovalID
		done := make(chan middleware.Envelope, 1)
		go func() {
			ctx := adapter.WithApprovalMark(t.Context(), procRefund, adapter.ApprovalMark{Wait: 10 * time.Minute})
			_, env, _ := r.call(ctx, keyedCall{key: "k", approvalID: id}, refunded)
			done <- env
		}()
		time.Sleep(5 * time.Minute) // past the capability's lease, still waiting for the decision
		synctest.Wait()
		_, env, err = r.call(t.Context(), keyedCall{key: "k", approvalID: id}, refunded)
		wantCode(t, env, err, middleware.CodeIdempotencyInFlight)
		if _, err := eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: boss}); err != nil {
			t.Fatal(err)
		}
		first := <-done
		wantCode(t, first, nil, middleware.CodeOK)
		_, env, err = r.call(t.Context(), keyedCall{key: "k"}, refunded)
		wantCode(t, env, err, middleware.CodeOK)
		if !env.Replayed || env.ExecutionID != first.ExecutionID {
			t.Errorf("the waited-for run is stored and replayed: %+v", env)
		}
		r.wantRuns("one run", 1)
	})
}

// TestResultsAreKeptFor24HoursByDefault: a stored result answers repeats
// for 24 hours from when it was stored, then the key runs afresh;
// Defaults.ResultRetention changes it.
func TestResultsAreKeptFor24HoursByDefault(t *testing.T) {
	for _, tc := range []struct {
		opts []middleware.Option
		keep time.Duration
	}{
		{nil, 24 * time.Hour},
		{[]middleware.Option{middleware.WithDefaults(middleware.Defaults{ResultRetention: time.Hour})}, time.Hour},
	} {
		r := oneResult(t, writeCap, tc.opts...)
		_, first, err := r.call(t.Context(), keyedCall{key: "k"}, refunded)
		wantCode(t, first, err, middleware.CodeOK)
		r.clock.Advance(tc.keep - time.Second)
		if _, env, _ := r.call(t.Context(), keyedCall{key: "k"}, refunded); !env.Replayed {
			t.Errorf("retention %s: a second before its end the result is replayed: %+v", tc.keep, env)
		}
		r.clock.Advance(time.Second)
		if _, env, _ := r.call(t.Context(), keyedCall{key: "k"}, refunded); env.Replayed {
			t.Errorf("retention %s: once it ended the key runs afresh: %+v", tc.keep, env)
		}
		r.wantRuns("one run per retention", 2)
	}
}
