package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// batchSink is a strict audit sink for these tests: each write takes
// delay on the bubble's clock, one record or a batch alike; refuse, when
// set, fails a write; what it wrote is kept, in order.
type batchSink struct {
	delay  time.Duration
	refuse func(events []middleware.Event) error

	mu       sync.Mutex
	attempts [][]middleware.Event // every write, in order, whether it failed or not
	stored   []middleware.Event
}

func (s *batchSink) Record(ctx context.Context, e middleware.Event) error {
	return s.RecordBatch(ctx, []middleware.Event{e})
}

func (s *batchSink) RecordBatch(_ context.Context, events []middleware.Event) error {
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = append(s.attempts, slices.Clone(events))
	if s.refuse != nil {
		if err := s.refuse(events); err != nil {
			return err
		}
	}
	s.stored = append(s.stored, events...)
	return nil
}

// trail returns the types of execution's stored records, in order.
func (s *batchSink) trail(execution string) []middleware.EventType {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []middleware.EventType
	for _, e := range s.stored {
		if e.ExecutionID == execution {
			out = append(out, e.Type)
		}
	}
	return out
}

func (s *batchSink) writes() (writes, records, largest int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.attempts {
		records += len(a)
		largest = max(largest, len(a))
	}
	return len(s.attempts), records, largest
}

// recordSink is the same sink without RecordBatch: one record a write.
type recordSink struct{ s *batchSink }

func (r recordSink) Record(ctx context.Context, e middleware.Event) error { return r.s.Record(ctx, e) }

// auditEngine is an engine whose every call of procWrite is recorded by
// audit, within bound (the default when none); a call's actor is the one
// its context carries.
func auditEngine(t *testing.T, audit middleware.AuditSink, bound ...time.Duration) *middleware.Engine {
	t.Helper()
	eng, err := middleware.New(middleware.NewRegistry().Register(procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite}),
		middleware.WithProtoFiles(nil), middleware.WithLogger(discard), middleware.WithAuditSink(audit, bound...),
		middleware.WithActor(actorOf))
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// caller is the context of a call by the actor id.
func caller(id string) context.Context {
	return as(context.Background(), middleware.Actor{ID: id, Tenant: "acme"})
}

func auditStats(eng *middleware.Engine) middleware.SinkStats {
	st := eng.Stats().Sinks
	return st[len(st)-1] // the strict audit sink comes last
}

// Group commit (SPEC §8): with 64 concurrent callers and a sink whose every
// write, one record or a batch, takes 5ms, the records waiting for the
// sink are written together: every call completes, at well over 1,000
// calls a second (on the bubble's clock, so this is the design's figure;
// bench/ measures it on a real one).
func TestStrictAuditWritesWaitingRecordsTogether(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		sink := &batchSink{delay: 5 * time.Millisecond}
		eng := auditEngine(t, sink)
		const callers, each = 64, 10
		var ok atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for range each {
					if _, _, err := execute(eng, caller(fmt.Sprint("agent-", c)), call{Procedure: procWrite}, noop); err == nil {
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		time.Sleep(time.Second) // the last completed records
		synctest.Wait()
		if ok.Load() != callers*each {
			t.Errorf("%d of %d calls completed; want all", ok.Load(), callers*each)
		}
		if rate := float64(ok.Load()) / elapsed.Seconds(); rate < 1000 {
			t.Errorf("%.0f calls/s with a 5ms write: want more than 1,000", rate)
		}
		writes, records, largest := sink.writes()
		if records < 3*callers*each || writes > records/8 || largest < callers/2 {
			t.Errorf("%d records in %d writes (the largest %d): want the waiting records written together", records, writes, largest)
		}
	})
}

// sqlStateError is a database error with a SQLSTATE, as pgx's is.
type sqlStateError struct{ code string }

func (e sqlStateError) Error() string {
	return "ERROR: invalid byte sequence (SQLSTATE " + e.code + ")"
}
func (e sqlStateError) SQLState() string { return e.code }

// A batch that fails because of one record's content is split until that
// record is alone, however the sink says so: it names the record
// (BatchError), fails with a data exception (SQLSTATE class 22) and names
// none, or panics. The record's own call fails (its requested) or the
// record is counted as dropped (its final event); every other caller's
// calls complete, with their whole trails, although they were waiting in
// the same batches.
func TestABatchFailureIsolatesItsBadRecord(t *testing.T) {
	poisoned := func(events []middleware.Event) int {
		return slices.IndexFunc(events, func(e middleware.Event) bool { return e.Actor.ID == "mallory" })
	}
	for _, tc := range []struct {
		name   string
		refuse func([]middleware.Event) error
	}{
		{"the sink names the record", func(evs []middleware.Event) error {
			if i := poisoned(evs); i >= 0 {
				return &middleware.BatchError{Index: i, Err: errors.New("a NUL byte in actor_id")}
			}
			return nil
		}},
		{"a data exception names none", func(evs []middleware.Event) error {
			if poisoned(evs) >= 0 {
				return fmt.Errorf("insert: %w", sqlStateError{"22021"})
			}
			return nil
		}},
		{"the sink panics", func(evs []middleware.Event) error {
			if poisoned(evs) >= 0 {
				panic("the sink cannot encode actor_id")
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				sink := &batchSink{delay: 5 * time.Millisecond, refuse: tc.refuse}
				eng := auditEngine(t, sink)
				const callers, each = 16, 5
				ids := make([][]string, callers)
				errs := make([][]error, callers)
				var wg sync.WaitGroup
				for c := range callers {
					actor := fmt.Sprint("agent-", c)
					if c == 7 {
						actor = "mallory"
					}
					wg.Go(func() {
						for range each {
							_, env, err := execute(eng, caller(actor), call{Procedure: procWrite}, noop)
							ids[c], errs[c] = append(ids[c], env.ExecutionID), append(errs[c], err)
						}
					})
				}
				wg.Wait()
				time.Sleep(time.Second) // the last final events
				synctest.Wait()
				for c := range callers {
					for i, err := range errs[c] {
						if c == 7 {
							if middleware.CodeOf(err) != middleware.CodeAuditUnavailable || len(sink.trail(ids[c][i])) != 0 {
								t.Errorf("mallory's call: %v, trail %v; want AUDIT_UNAVAILABLE and nothing stored", err, sink.trail(ids[c][i]))
							}
							continue
						}
						if got := sink.trail(ids[c][i]); err != nil || !slices.Equal(got, []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted}) {
							t.Fatalf("caller %d's call: %v, trail %v; want it to complete with its whole trail", c, err, got)
						}
					}
				}
				if st := auditStats(eng); st.Dropped != each {
					t.Errorf("audit sink %+v: want mallory's %d final events counted as dropped, and nothing else", st, each)
				}
				sink.mu.Lock()
				split := slices.ContainsFunc(sink.attempts, func(a []middleware.Event) bool { return len(a) > 1 && poisoned(a) >= 0 })
				sink.mu.Unlock()
				if !split {
					t.Error("no batch held mallory's record with others: the test did not exercise a split")
				}
			})
		})
	}
}

// TestARecordSinkRefusingAQueuedRecordStopsNoOtherCall: a sink without
// RecordBatch cannot store one call's completed record and says so with a
// *BatchError; that record is dropped (counted), and the calls after it
// are written and run, although a single-record sink is handed the
// records kept after a failure before the next one.
func TestARecordSinkRefusingAQueuedRecordStopsNoOtherCall(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		sink := &batchSink{refuse: func(evs []middleware.Event) error {
			if evs[0].Actor.ID == "mallory" && evs[0].Type == middleware.EventCompleted {
				return &middleware.BatchError{Index: 0, Err: errors.New("a NUL byte in actor_id")}
			}
			return nil
		}}
		eng := auditEngine(t, recordSink{sink})
		_, env, err := execute(eng, caller("mallory"), call{Procedure: procWrite}, noop)
		wantCode(t, env, err, middleware.CodeOK)
		synctest.Wait() // the completed record was refused
		for i := range 3 {
			_, env, err := execute(eng, caller(fmt.Sprint("agent-", i)), call{Procedure: procWrite}, noop)
			wantCode(t, env, err, middleware.CodeOK)
			synctest.Wait()
			if got := sink.trail(env.ExecutionID); !slices.Equal(got, []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted}) {
				t.Errorf("call %d's trail %v; want it whole", i, got)
			}
		}
		if st := auditStats(eng); st.Dropped != 1 {
			t.Errorf("audit sink %+v: want mallory's completed record counted as dropped, and nothing else", st)
		}
	})
}

// A transient failure (the sink unreachable) keeps the batch whole: the
// calls waiting for it fail and run nothing, and the records of the
// calls that ran are written once the sink is back, in order, with the
// next record that comes; nothing is dropped. So for a sink without
// RecordBatch, which is written one record at a time.
func TestATransientAuditFailureKeepsTheBatchWhole(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%t", batch), func(t *testing.T) { transientAuditFailure(t, batch) })
	}
}

func transientAuditFailure(t *testing.T, batch bool) {
	inBubble(t, func(t *testing.T) {
		var down atomic.Bool
		sink := &batchSink{refuse: func([]middleware.Event) error {
			if down.Load() {
				return errors.New("dial tcp 10.0.0.7:5432: connect: connection refused")
			}
			return nil
		}}
		var audit middleware.AuditSink = sink
		if !batch {
			audit = recordSink{sink} // one record a write
		}
		eng := auditEngine(t, audit)
		release := make(chan struct{})
		var ran atomic.Int32
		var running sync.WaitGroup
		running.Go(func() { // runs while the sink goes down: its completed record waits
			execute(eng, caller("agent-1"), call{Procedure: procWrite}, func(context.Context) (any, error) { <-release; ran.Add(1); return nil, nil })
		})
		synctest.Wait()
		down.Store(true)
		close(release)
		running.Wait()
		synctest.Wait()
		_, refused, err := execute(eng, caller("agent-2"), call{Procedure: procWrite}, func(context.Context) (any, error) { ran.Add(1); return nil, nil })
		wantCode(t, refused, err, middleware.CodeAuditUnavailable)
		synctest.Wait()
		down.Store(false)
		_, after, err := execute(eng, caller("agent-3"), call{Procedure: procWrite}, func(context.Context) (any, error) { ran.Add(1); return nil, nil })
		wantCode(t, after, err, middleware.CodeOK)
		synctest.Wait()

		if ran.Load() != 2 {
			t.Errorf("%d runs; want the two calls the sink recorded, not the refused one", ran.Load())
		}
		sink.mu.Lock()
		var types []middleware.EventType
		for _, e := range sink.stored {
			types = append(types, e.Type)
		}
		sink.mu.Unlock()
		want := []middleware.EventType{
			middleware.EventRequested, middleware.EventStarted, // the first call, before the outage
			middleware.EventCompleted, middleware.EventFailed, // kept through it: the first call's end, the refused call's failure
			middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted, // the call after it
		}
		if !slices.Equal(types, want) {
			t.Errorf("stored %v; want %v", types, want)
		}
		if got := sink.trail(refused.ExecutionID); !slices.Equal(got, []middleware.EventType{middleware.EventFailed}) {
			t.Errorf("the refused call's trail %v: want its failure only, its requested never written", got)
		}
		if st := auditStats(eng); st.Dropped != 0 {
			t.Errorf("audit sink %+v: nothing may be dropped", st)
		}
	})
}

// Through a long outage the records kept for the sink are bounded (half
// the queue): the oldest, the trail of the calls that ran before it, are
// kept, the later ones dropped and counted.
func TestAnOutageKeepsTheOldestRecords(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		var down atomic.Bool
		sink := &storeSink{down: &down}
		eng := auditEngine(t, sink)
		down.Store(true)
		const refused = 600 // each leaves its failure for the sink: 512 fit in half the queue
		var first string
		for i := range refused {
			_, env, err := execute(eng, caller("agent-1"), call{Procedure: procWrite}, noop)
			wantCode(t, env, err, middleware.CodeAuditUnavailable)
			if i == 0 {
				first = env.ExecutionID
				synctest.Wait() // its failure is the oldest record
			}
		}
		synctest.Wait()
		down.Store(false)
		_, env, err := execute(eng, caller("agent-1"), call{Procedure: procWrite}, noop)
		wantCode(t, env, err, middleware.CodeOK)
		synctest.Wait()
		if st := auditStats(eng); st.Dropped != refused-512 {
			t.Errorf("audit sink %+v: want %d dropped", st, refused-512)
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if n := len(sink.stored); n != 512+3 || sink.stored[0].ExecutionID != first {
			t.Errorf("%d records stored after the outage, the first of %s; want the 512 oldest failures kept, then the last call's 3 records, the first of %s",
				n, sink.stored[0].ExecutionID, first)
		}
	})
}

// storeSink keeps what it stored, and fails every write while down: a
// batchSink without the record of every attempt, for long outages.
type storeSink struct {
	down   *atomic.Bool
	mu     sync.Mutex
	stored []middleware.Event
}

func (s *storeSink) Record(ctx context.Context, e middleware.Event) error {
	return s.RecordBatch(ctx, []middleware.Event{e})
}

func (s *storeSink) RecordBatch(_ context.Context, events []middleware.Event) error {
	if s.down.Load() {
		return errors.New("connection refused")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stored = append(s.stored, events...)
	return nil
}

// A record whose execution stopped waiting for it while it was queued
// (the bound passed, or the caller left) is never written: its call
// failed (AUDIT_UNAVAILABLE, or CANCELLED) and ran nothing, and the trail
// must not say otherwise. A call whose requested was so left out leaves
// nothing: its final record is not written either (the sink is behind),
// but counted as dropped.
func TestARecordWhoseCallerGaveUpIsNotWritten(t *testing.T) {
	for _, tc := range []struct {
		name     string
		batch    bool
		patience time.Duration // the caller's deadline; 0: none
		want     middleware.Code
		waited   time.Duration
	}{
		{"the bound passed", false, 0, middleware.CodeAuditUnavailable, 100 * time.Millisecond},
		{"the bound passed, batch sink", true, 0, middleware.CodeAuditUnavailable, 100 * time.Millisecond},
		{"the caller left", false, 40 * time.Millisecond, middleware.CodeCancelled, 40 * time.Millisecond},
		{"the caller left, batch sink", true, 40 * time.Millisecond, middleware.CodeCancelled, 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				var stall atomic.Bool
				inner := &batchSink{}
				var sink middleware.AuditSink = stallingSink{inner, &stall}
				if tc.batch {
					sink = stallingBatchSink{stallingSink{inner, &stall}}
				}
				eng := auditEngine(t, sink, 100*time.Millisecond)
				stall.Store(true)
				var wg sync.WaitGroup
				wg.Go(func() { // its requested holds the sink for 300ms, past the bound and the watchdog's grace
					execute(eng, caller("agent-1"), call{Procedure: procWrite}, noop)
				})
				synctest.Wait()
				stall.Store(false)
				ctx := caller("agent-2")
				if tc.patience > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.patience)
					defer cancel()
				}
				var ran atomic.Bool
				start := time.Now()
				_, env, err := execute(eng, ctx, call{Procedure: procWrite}, func(context.Context) (any, error) { ran.Store(true); return nil, nil })
				wantCode(t, env, err, tc.want)
				if waited := time.Since(start); waited != tc.waited || ran.Load() {
					t.Fatalf("the queued call ended after %s (ran %t); want %s, nothing run", waited, ran.Load(), tc.waited)
				}
				wg.Wait()
				time.Sleep(time.Second)
				synctest.Wait()
				inner.mu.Lock()
				defer inner.mu.Unlock()
				for _, a := range inner.attempts {
					for _, e := range a {
						if e.ExecutionID == env.ExecutionID {
							t.Errorf("the sink was asked to write %s of the call that gave up: a call none of whose trail was recorded leaves none", e.Type)
						}
					}
				}
				if st := auditStats(eng); st.Dropped == 0 {
					t.Errorf("audit sink %+v: the end of the call that gave up is not written, and must be counted", st)
				}
			})
		})
	}
}

// stallingSink is a sink without RecordBatch whose writes take 300ms,
// ignoring their deadline, while stall is set.
type stallingSink struct {
	s     *batchSink
	stall *atomic.Bool
}

func (s stallingSink) Record(ctx context.Context, e middleware.Event) error {
	return s.RecordBatch(ctx, []middleware.Event{e})
}

func (s stallingSink) RecordBatch(ctx context.Context, events []middleware.Event) error {
	if s.stall.Load() {
		time.Sleep(300 * time.Millisecond)
	}
	return s.s.RecordBatch(ctx, events)
}

// stallingBatchSink is stallingSink with RecordBatch.
type stallingBatchSink struct{ stallingSink }

func (s stallingBatchSink) RecordBatch(ctx context.Context, events []middleware.Event) error {
	return s.stallingSink.RecordBatch(ctx, events)
}

// A sink that cannot keep up (one record a write, 20ms each, against 64
// callers) is not allowed to collapse: once the records waiting would
// outlast half the bound, a new call is refused AUDIT_UNAVAILABLE at
// once, and the calls it took complete at the sink's pace. No call waits
// out the bound, and the sink is never asked to write a record whose call
// gave up.
func TestAQueueThatFallsBehindRefusesAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		inner := &batchSink{delay: 20 * time.Millisecond}
		eng := auditEngine(t, recordSink{inner}, 300*time.Millisecond)
		// The pace is learned from the sink's writes: a first call.
		if _, env, err := execute(eng, caller("agent-0"), call{Procedure: procWrite}, noop); err != nil {
			wantCode(t, env, err, middleware.CodeOK)
		}
		const callers = 64
		const run = 5 * time.Second
		var completed, refusedAtOnce, other atomic.Int64
		perSecond := make([]atomic.Int64, int(run/time.Second))
		start := time.Now()
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for time.Since(start) < run {
					began := time.Now()
					_, env, err := execute(eng, caller(fmt.Sprint("agent-", c)), call{Procedure: procWrite}, noop)
					took := time.Since(began)
					switch code := middleware.CodeOf(err); {
					case err == nil:
						completed.Add(1)
						perSecond[min(int(time.Since(start)/time.Second), len(perSecond)-1)].Add(1)
					case code == middleware.CodeAuditUnavailable && took == 0:
						refusedAtOnce.Add(1)
						time.Sleep(10 * time.Millisecond) // a caller that backs off a little
					default:
						other.Add(1)
						t.Errorf("a call took %s and ended %v (%+v): want completed, or refused at once", took, err, env.Error)
					}
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		// Each call is three writes (requested, started, completed): 20ms
		// a write is about 16 calls a second.
		for s := range perSecond {
			if n := perSecond[s].Load(); n < 8 {
				t.Errorf("second %d: %d calls completed; want the sink's pace (about 16), not a collapse", s, n)
			}
		}
		if refusedAtOnce.Load() == 0 {
			t.Error("no call was refused: the test did not make the sink fall behind")
		}
		writes, _, _ := inner.writes()
		t.Logf("%d completed, %d refused at once, %d writes", completed.Load(), refusedAtOnce.Load(), writes)
	})
}

// slowFirstSink is a batchSink whose first write takes first, and every
// later one no time: a cold connection, say, or a sink that was slow for a
// while and recovered.
type slowFirstSink struct {
	batchSink
	first time.Duration
	once  sync.Once
}

func (s *slowFirstSink) Record(ctx context.Context, e middleware.Event) error {
	return s.RecordBatch(ctx, []middleware.Event{e})
}

func (s *slowFirstSink) RecordBatch(ctx context.Context, events []middleware.Event) error {
	s.once.Do(func() { time.Sleep(s.first) })
	return s.batchSink.RecordBatch(ctx, events)
}

// A sink that was slow once, and fast since, is not refused for ever: the
// pace that refuses calls at once is that of the records waiting, and a
// record that would wait behind none is taken, so that the sink's pace is
// learned again. (A pace learned from one slow write, with nothing written
// since, refused every later call without asking the sink.)
func TestASinkThatWasSlowOnceIsNotRefusedForEver(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%t", batch), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				sink := &slowFirstSink{first: 900 * time.Millisecond}
				var audit middleware.AuditSink = slowFirstRecordSink{sink}
				if batch {
					audit = sink
				}
				eng := auditEngine(t, audit)
				_, env, err := execute(eng, caller("agent-1"), call{Procedure: procWrite}, noop)
				wantCode(t, env, err, middleware.CodeOK)
				synctest.Wait()
				for i := range 5 {
					time.Sleep(time.Second) // the sink is idle, and fast again
					if _, _, err := execute(eng, caller("agent-1"), call{Procedure: procWrite}, noop); err != nil {
						t.Fatalf("call %d after the slow write, with the sink idle: %s (%v); want it recorded and run", i+2, middleware.CodeOf(err), err)
					}
				}
			})
		})
	}
}

// slowFirstRecordSink is slowFirstSink without RecordBatch.
type slowFirstRecordSink struct{ s *slowFirstSink }

func (r slowFirstRecordSink) Record(ctx context.Context, e middleware.Event) error {
	return r.s.Record(ctx, e)
}

// Records kept through an outage are written once the sink is back even
// if no call comes after it: the engine tries them again, less and less
// often, for about a minute, and after that with the next record that
// comes.
func TestKeptRecordsAreWrittenOnceTheSinkIsBackWithoutAnotherCall(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%t", batch), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				var down atomic.Bool
				sink := &storeSink{down: &down}
				var audit middleware.AuditSink = sink
				if !batch {
					audit = plainStoreSink{sink}
				}
				eng := auditEngine(t, audit)
				release := make(chan struct{})
				var running sync.WaitGroup
				var env middleware.Envelope
				running.Go(func() {
					_, env, _ = execute(eng, caller("agent-1"), call{Procedure: procWrite}, func(context.Context) (any, error) { <-release; return nil, nil })
				})
				synctest.Wait()
				down.Store(true)
				close(release)
				running.Wait()
				synctest.Wait() // its completed record failed, and is kept
				time.Sleep(5 * time.Second)
				down.Store(false) // back; no call comes
				time.Sleep(10 * time.Second)
				synctest.Wait()
				sink.mu.Lock()
				var trail []middleware.EventType
				for _, e := range sink.stored {
					if e.ExecutionID == env.ExecutionID {
						trail = append(trail, e.Type)
					}
				}
				sink.mu.Unlock()
				if want := []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted}; !slices.Equal(trail, want) {
					t.Errorf("stored %v of the call that ran through the outage, 10s after the sink is back; want %v", trail, want)
				}
				if st := auditStats(eng); st.Dropped != 0 {
					t.Errorf("audit sink %+v: nothing may be dropped", st)
				}
			})
		})
	}
}

// plainStoreSink is storeSink without RecordBatch.
type plainStoreSink struct{ s *storeSink }

func (p plainStoreSink) Record(ctx context.Context, e middleware.Event) error {
	return p.s.Record(ctx, e)
}
