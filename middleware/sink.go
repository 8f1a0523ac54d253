package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// The defaults of a sink's delivery.
const (
	defaultSinkTimeout  = 250 * time.Millisecond
	defaultSinkQueue    = 1024
	defaultAuditTimeout = time.Second
	// sinkIdle is how long a sink's worker waits for an event before it
	// exits; the next event starts a new one. Engines need no Close, and
	// testing/synctest bubbles end.
	sinkIdle = time.Second
	// dropWarnEvery rate-limits the warning about a sink's dropped events.
	dropWarnEvery = time.Minute
)

// errAuditTimeout is what a strict audit sink's synchronous call fails
// with when it does not return within its bound.
var errAuditTimeout = errors.New("agentsafe: the audit sink did not answer in time")

// sinkQueue delivers one sink's events, in order, on a worker goroutine of
// its own through a bounded queue, so that delivery costs the execution one
// channel send: no goroutine or timer per event. The worker starts on
// demand and exits after sinkIdle without events.
//
// When one call overruns the sink's bound, its worker is abandoned (one
// goroutine per stall, never per event) and a fresh one takes the queue;
// the stalled execution's later events for this sink are dropped, so that
// it never receives that execution's trail out of order or with a hole it
// cannot see. Every other execution's events flow on.
type sinkQueue struct {
	name  string
	call  func(ctx context.Context, ev Event) error
	bound time.Duration
	log   *slog.Logger
	q     chan queued

	running atomic.Bool   // a worker owns the queue
	gen     atomic.Uint64 // the generation of the worker that owns it

	mu      sync.Mutex
	current *queued             // what the owning worker is delivering
	stalled map[string]struct{} // executions whose later events are dropped

	delivered, dropped atomic.Uint64
	lastWarn           atomic.Int64 // unix nanoseconds of the last warning
}

// queued is one event on its way to a sink. done, for the strict audit
// sink's synchronous calls, receives the sink's answer.
type queued struct {
	ctx  context.Context
	ev   Event
	done chan error
}

func newSinkQueue(name string, call func(context.Context, Event) error, bound time.Duration, size int, log *slog.Logger) *sinkQueue {
	return &sinkQueue{name: name, call: call, bound: bound, log: log, q: make(chan queued, size), stalled: map[string]struct{}{}}
}

// enqueue hands ev to the sink without blocking: a full queue drops it,
// counted and warned about.
func (s *sinkQueue) enqueue(it queued) bool {
	select {
	case s.q <- it:
	default:
		s.drop("its queue is full")
		return false
	}
	if !s.running.Load() && s.running.CompareAndSwap(false, true) {
		go s.work(s.gen.Load())
	}
	return true
}

// work is one worker generation: it delivers queued events until it is
// idle for sinkIdle, or until a call of its overran the bound and a new
// generation took over.
func (s *sinkQueue) work(gen uint64) {
	watch := time.AfterFunc(time.Hour, func() { s.stall(gen) })
	watch.Stop()
	defer watch.Stop()
	idle := time.NewTimer(sinkIdle)
	defer idle.Stop()
	for {
		select {
		case it := <-s.q:
			if !s.deliver(gen, it, watch) {
				return // abandoned: a fresh worker has the queue
			}
			idle.Reset(sinkIdle)
		case <-idle.C:
			s.running.Store(false)
			// An event queued between the timer and the store would have
			// found a worker still running: take it, unless another
			// worker was started for it meanwhile.
			if len(s.q) == 0 || !s.running.CompareAndSwap(false, true) {
				return
			}
			idle.Reset(sinkIdle)
		}
	}
}

// deliver calls the sink for one event under the watchdog; it reports
// false when the call overran and this worker was abandoned.
func (s *sinkQueue) deliver(gen uint64, it queued, watch *time.Timer) bool {
	id := it.ev.ExecutionID
	s.mu.Lock()
	if _, ok := s.stalled[id]; ok {
		if it.ev.Type.Final() {
			delete(s.stalled, id) // the trail is over: forget it
		}
		s.mu.Unlock()
		s.answer(it, errAuditTimeout)
		s.drop("an earlier event of the same execution stalled it")
		return true
	}
	s.current = &it
	s.mu.Unlock()

	watch.Reset(s.bound)
	err := s.safeCall(it)
	if !watch.Stop() {
		// The watchdog fired: stall has handed the queue to a fresh worker
		// and marked this execution stalled. The late call did deliver its
		// event; this goroutine only leaves.
		s.delivered.Add(1)
		return false
	}
	s.mu.Lock()
	s.current = nil
	s.mu.Unlock()
	s.delivered.Add(1)
	s.answer(it, err)
	return true
}

func (s *sinkQueue) safeCall(it queued) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agentsafe: the sink panicked: %v", p) // a panicking sink loses its event, nothing more
		}
	}()
	return s.call(it.ctx, it.ev)
}

func (s *sinkQueue) answer(it queued, err error) {
	if it.done != nil {
		it.done <- err // buffered: the waiter may have given up
	}
}

// stall runs on the watchdog's goroutine when a call of worker gen overran
// the bound: that worker is abandoned, the execution it was delivering is
// marked stalled, and a fresh worker takes the queue.
func (s *sinkQueue) stall(gen uint64) {
	if !s.gen.CompareAndSwap(gen, gen+1) {
		return
	}
	s.mu.Lock()
	if c := s.current; c != nil {
		if !c.ev.Type.Final() {
			s.stalled[c.ev.ExecutionID] = struct{}{}
		}
		s.answer(*c, errAuditTimeout)
		s.current = nil
	}
	s.mu.Unlock()
	s.warn(fmt.Sprintf("a call overran its %s bound; that execution's later events are dropped for this sink", s.bound))
	go s.work(gen + 1)
}

func (s *sinkQueue) drop(why string) {
	s.dropped.Add(1)
	s.warn(why)
}

// warn logs the sink's drops at most once a minute.
func (s *sinkQueue) warn(why string) {
	now := time.Now().UnixNano()
	last := s.lastWarn.Load()
	if last != 0 && now-last < int64(dropWarnEvery) || !s.lastWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("agentsafe: an event sink is dropping events", "sink", s.name, "reason", why, "dropped", s.dropped.Load())
}

// sync delivers ev through the queue and waits for the sink's answer, at
// most the sink's bound: a strict audit sink's synchronous call, in order
// with the events queued before it.
func (s *sinkQueue) sync(ctx context.Context, ev Event) error {
	done := make(chan error, 1)
	if !s.enqueue(queued{ctx: ctx, ev: ev, done: done}) {
		return errors.New("agentsafe: the audit sink's queue is full")
	}
	t := time.NewTimer(s.bound)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errAuditTimeout
	}
}

// deliver hands ev to the tracer's sink, synchronously (it never blocks),
// then to every sink's queue.
func (e *Engine) deliver(ctx context.Context, ev Event) {
	e.traced(ctx, ev)
	for _, s := range e.sinks {
		s.enqueue(queued{ctx: ctx, ev: ev})
	}
}

// deliverAudited is deliver for the events a strict audit sink records
// synchronously; its error means the event was not recorded.
func (e *Engine) deliverAudited(ctx context.Context, ev Event) error {
	e.traced(ctx, ev)
	var err error
	for _, s := range e.sinks {
		if s == e.audit {
			err = s.sync(ctx, ev)
			continue
		}
		s.enqueue(queued{ctx: ctx, ev: ev})
	}
	return err
}

// traced hands ev to a tracer that is also a sink, on the execution's
// goroutine, in the execution's (traced) context: its contract is to be
// fast and never block.
func (e *Engine) traced(ctx context.Context, ev Event) {
	if e.traceSink == nil {
		return
	}
	defer func() { _ = recover() }() // a panicking tracer loses the event, nothing more
	e.traceSink.HandleEvent(ctx, ev)
}

// Stats reports what the engine's event sinks delivered and dropped so far.
type Stats struct {
	Sinks []SinkStats
}

// SinkStats is one sink's delivery: events it received, and events it lost
// because its queue was full or one of its calls stalled the execution they
// belonged to.
type SinkStats struct {
	// Sink names the sink: its type, and its place among the engine's sinks.
	Sink      string
	Delivered uint64
	Dropped   uint64
}

// Stats reports, per sink, how many events were delivered and how many
// were dropped. Every drop is also logged, rate-limited, through the
// engine's logger ([WithLogger]).
func (e *Engine) Stats() Stats {
	var st Stats
	for _, s := range e.sinks {
		st.Sinks = append(st.Sinks, SinkStats{Sink: s.name, Delivered: s.delivered.Load(), Dropped: s.dropped.Load()})
	}
	return st
}

// NewSlogSink returns a sink that logs each event on logger (slog.Default()
// when nil): final failures at Warn, everything else at Info. Only the
// fields an event uses are logged.
func NewSlogSink(logger *slog.Logger) EventSink {
	if logger == nil {
		logger = slog.Default()
	}
	return slogSink{logger}
}

type slogSink struct{ l *slog.Logger }

func (s slogSink) HandleEvent(ctx context.Context, e Event) {
	level := slog.LevelInfo
	if e.Type == EventFailed || e.Type == EventAbandonedResult {
		level = slog.LevelWarn
	}
	if !s.l.Enabled(ctx, level) {
		return
	}
	var buf [20]slog.Attr
	attrs := buf[:0]
	add := func(cond bool, a slog.Attr) {
		if cond {
			attrs = append(attrs, a)
		}
	}
	attrs = append(attrs, slog.String("execution_id", e.ExecutionID), slog.String("procedure", e.Procedure))
	add(e.Actor.ID != "", slog.String("actor", e.Actor.ID))
	add(e.Actor.Tenant != "", slog.String("tenant", e.Actor.Tenant))
	add(e.InputDigest != "", slog.String("input_digest", e.InputDigest))
	add(e.SideEffect != SideEffectUnspecified, slog.String("side_effect", e.SideEffect.String()))
	add(e.Attempt > 0, slog.Int("attempt", e.Attempt))
	add(e.Attempts > 0, slog.Int("attempts", e.Attempts))
	add(e.PreviousErrorCode != CodeOK, slog.String("previous_error_code", e.PreviousErrorCode.String()))
	add(e.Code != CodeOK, slog.String("code", e.Code.String()))
	add(e.Code != CodeOK, slog.Bool("retryable", e.Retryable))
	add(e.Type.Final() || e.Duration > 0, slog.Duration("duration", e.Duration))
	add(e.ApprovalID != "", slog.String("approval_id", e.ApprovalID))
	add(e.Approver.ID != "", slog.String("approver", e.Approver.ID))
	add(e.Comment != "", slog.String("comment", e.Comment))
	add(e.Reason != "", slog.String("reason", e.Reason))
	add(e.Type == EventAbandonedResult, slog.Bool("succeeded", e.Succeeded))
	add(e.Error != "", slog.String("error", e.Error))
	add(e.Stack != "", slog.String("stack", e.Stack))
	s.l.LogAttrs(ctx, level, string(e.Type), attrs...)
}
