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
	// maxRetainedRetries bounds how often the strict audit sink's records
	// kept after a transient failure are tried again when no record comes
	// after them: 1, 2, 4, ... 32 seconds after the worker left, about a
	// minute in all; after that they go with the next record that comes.
	maxRetainedRetries = 6
	// dropWarnEvery rate-limits the warning about a sink's dropped events.
	dropWarnEvery = time.Minute
)

// errAuditTimeout is what a strict audit sink's synchronous call fails
// with when it does not return within its bound.
var errAuditTimeout = errors.New("agentsafe: the audit sink did not answer in time")

// sinkQueue delivers one sink's events, in order, on a worker goroutine of
// its own through a bounded queue, so that delivery costs the execution a
// short critical section: no goroutine, channel or timer per event. The
// worker starts on demand, drains whatever is queued before it parks
// again (one wake-up per batch, not per event), and exits after sinkIdle
// without events.
//
// When one call overruns the sink's bound, its worker is abandoned (one
// goroutine per stall, never per event) and a fresh one takes the queue;
// the stalled execution's later events for this sink are dropped, so that
// it never receives that execution's trail out of order or with a hole it
// cannot see. Every other execution's events flow on.
//
// The strict audit sink's queue also carries the records the engine waits
// for, and writes whatever is waiting in one call (audit.go).
type sinkQueue struct {
	name  string
	call  func(ctx context.Context, ev Event) error
	bound time.Duration
	size  int
	log   *slog.Logger
	// inline: SinkInline, called on the execution's goroutine (callInline).
	inline bool
	// wake tells a parked worker that events are queued.
	wake chan struct{}
	// audit is the strict audit sink's writer; nil for an event sink.
	audit *auditWriter

	mu sync.Mutex
	// ring holds the queue: n events from head, at most size. It grows
	// as far as it is used, and is reused. Its first retained events are
	// audit records kept after a transient failure, to be written again
	// with the next record that comes.
	ring     []queued
	head, n  int
	retained int
	worker   bool   // a worker owns the queue
	parked   bool   // it is parked, and must be woken
	gen      uint64 // the generation of the worker that owns the queue
	// The call in progress, for the watchdog: a single timer, armed for
	// the bound when a call starts and none is pending, which abandons the
	// worker if the call it finds has overrun, and otherwise waits for
	// that call's own bound: no timer operation per event.
	inCall     bool
	callStart  time.Duration // since epoch
	current    []queued
	watch      *time.Timer
	watchArmed bool
	lastActive time.Duration // since epoch: when the worker last took an event
	// epoch is what the call times count from: with its monotonic clock
	// reading, time.Since reads one clock, where time.Now reads two.
	epoch   time.Time
	stalled map[string]struct{} // executions whose later events are dropped
	// retries counts the timed tries of the records kept after a failure
	// since a record last came (retryKept).
	retries int

	delivered, dropped atomic.Uint64
	lastWarn           atomic.Int64 // unix nanoseconds of the last warning
}

// queued is one event on its way to a sink. w, for the strict audit
// sink's synchronous records, is the execution waiting for it.
type queued struct {
	ctx context.Context
	ev  Event
	w   *waiter
}

// waiter is an execution waiting for its record to be written.
type waiter struct {
	done chan error // buffered: the first answer is kept, later ones dropped
	// Guarded by the queue's mu: gone is set when the execution stopped
	// waiting: from then on the record is not written, since its call
	// failed and nothing ran; writing while a write that holds it is in
	// progress.
	gone, writing bool
}

func newSinkQueue(name string, call func(context.Context, Event) error, bound time.Duration, size int, log *slog.Logger) *sinkQueue {
	return &sinkQueue{name: name, call: call, bound: bound, size: size, log: log, wake: make(chan struct{}, 1), stalled: map[string]struct{}{}, epoch: time.Now()}
}

// enqueue hands ev to the sink without blocking: a full queue drops it,
// counted and warned about.
func (s *sinkQueue) enqueue(it queued) bool {
	if s.inline {
		s.callInline(it)
		return true
	}
	s.mu.Lock()
	if s.audit != nil {
		// An execution the strict audit sink stopped recording: its
		// later records would tell a trail with a hole.
		if id := it.ev.ExecutionID; s.isStalled(id) {
			if it.ev.Type.Final() {
				delete(s.stalled, id) // the trail is over: forget it
			}
			s.mu.Unlock()
			s.drop(1, "an earlier record of the same execution was not recorded")
			return false
		}
	}
	if s.n >= s.size {
		s.mu.Unlock()
		s.drop(1, "its queue is full")
		return false
	}
	s.push(it)
	return true
}

// isStalled reports whether the execution's later events are dropped;
// s.mu is held.
func (s *sinkQueue) isStalled(execution string) bool {
	_, ok := s.stalled[execution]
	return ok
}

// push adds it to the queue and starts or wakes the worker; s.mu is held,
// and released.
func (s *sinkQueue) push(it queued) {
	if s.n == len(s.ring) {
		s.grow(s.n + 1)
	}
	s.ring[(s.head+s.n)%len(s.ring)] = it
	s.n++
	s.retries = 0
	start, wake := !s.worker, s.parked
	s.worker = true
	s.parked = false
	gen := s.gen
	s.mu.Unlock()
	switch {
	case start:
		go s.work(gen, false)
	case wake:
		select {
		case s.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// grow makes room in the ring for at least n events: twice the events,
// within the queue's size.
func (s *sinkQueue) grow(n int) {
	ring := make([]queued, min(max(16, 2*len(s.ring), n), s.size))
	for i := range s.n {
		ring[i] = s.ring[(s.head+i)%len(s.ring)]
	}
	s.ring, s.head = ring, 0
}

// work is one worker generation: it delivers queued events until it is
// idle for sinkIdle, or until a call of its overran the bound and a new
// generation took over. A worker started to retry the records kept after
// a failure (retryKept) writes them first, and leaves at once if nothing
// else came.
func (s *sinkQueue) work(gen uint64, retry bool) {
	var idle *time.Timer
	var buf []queued
	if s.audit != nil {
		buf = make([]queued, 0, s.audit.max)
	}
	retried := false
	for {
		s.mu.Lock()
		if s.n == s.retained && retried {
			s.leave()
			s.mu.Unlock()
			return
		}
		if s.n == s.retained && !retry {
			// Drained (but for records kept after a failure, which go
			// with the next one): park until woken, or leave once idle
			// for sinkIdle.
			s.parked = true
			if idle == nil {
				idle = time.NewTimer(sinkIdle)
			}
			s.mu.Unlock()
			if park(s.wake, idle.C) {
				continue
			}
			s.mu.Lock()
			if left := sinkIdle - (time.Since(s.epoch) - s.lastActive); s.parked && left > 0 {
				idle.Reset(left)
			} else if s.parked {
				// Idle long enough. An event queued from here on starts a
				// new worker.
				s.leave()
				s.mu.Unlock()
				return
			} else {
				idle.Reset(sinkIdle) // woken as the timer fired: carry on
			}
			s.mu.Unlock()
			continue
		}
		retried, retry = retry, false
		if s.audit != nil {
			batch, stalled := s.take(buf[:0])
			s.mu.Unlock()
			if stalled > 0 {
				s.drop(stalled, "an earlier event of the same execution stalled it")
			}
			if len(batch) > 0 && !s.audit.commit(s, gen, batch) {
				if idle != nil {
					idle.Stop()
				}
				return // abandoned
			}
			clear(batch) // the next batch reuses it
			buf = batch[:0]
			continue
		}
		it := s.ring[s.head]
		s.ring[s.head] = queued{}
		s.head = (s.head + 1) % len(s.ring)
		s.n--
		id := it.ev.ExecutionID
		if _, ok := s.stalled[id]; ok {
			if it.ev.Type.Final() {
				delete(s.stalled, id) // the trail is over: forget it
			}
			s.mu.Unlock()
			s.drop(1, "an earlier event of the same execution stalled it")
			continue
		}
		s.startCall()
		s.current = append(s.current[:0], it)
		s.mu.Unlock()

		_ = s.safeCall(it) // an event sink's error is its own
		s.delivered.Add(1) // a late call did deliver its event too

		s.mu.Lock()
		if s.gen != gen {
			// The watchdog abandoned this worker during the call: a fresh
			// one has the queue, and the stall was answered.
			s.mu.Unlock()
			if idle != nil {
				idle.Stop()
			}
			return
		}
		s.inCall = false
		clear(s.current)
		s.current = s.current[:0]
		s.mu.Unlock()
	}
}

// leave ends the worker that owns the queue, which is idle: an event
// queued from here on starts a new one. Records a transient failure kept
// for the strict audit sink are tried again later, on a timer rather than
// a goroutine, so that they are written once the sink is back even if no
// record comes after them; s.mu is held.
func (s *sinkQueue) leave() {
	s.worker, s.parked = false, false
	if s.watch != nil {
		s.watch.Stop()
		s.watchArmed = false
	}
	if s.retained > 0 && s.retries < maxRetainedRetries {
		time.AfterFunc(sinkIdle<<s.retries, s.retryKept)
		s.retries++
	}
}

// retryKept starts a worker to write the records kept after a failure,
// unless one runs or none is kept.
func (s *sinkQueue) retryKept() {
	s.mu.Lock()
	if s.worker || s.retained == 0 {
		s.mu.Unlock()
		return
	}
	s.worker = true
	gen := s.gen
	s.mu.Unlock()
	s.work(gen, true)
}

// startCall marks a call as in progress for the watchdog, arming it if
// it is not; s.mu is held.
func (s *sinkQueue) startCall() {
	now := time.Since(s.epoch)
	s.inCall, s.callStart, s.lastActive = true, now, now
	if !s.watchArmed {
		s.watchArmed = true
		if s.watch == nil {
			s.watch = time.AfterFunc(s.stallAfter(), s.watchdog)
		} else {
			s.watch.Reset(s.stallAfter())
		}
	}
}

// stallAfter is how long a call may run before its worker is abandoned:
// the bound, and for the strict audit sink, whose calls have the bound as
// their deadline, a quarter more, so that a sink that honours its
// deadline answers before it is given up on.
func (s *sinkQueue) stallAfter() time.Duration {
	if s.audit != nil {
		return s.bound + s.bound/4
	}
	return s.bound
}

// park blocks an idle worker of the engine (a sink's, an attempt's) until
// it is woken (true) or its idle timer fires (false). Idle workers are
// parked here and nowhere else, which is how leak checks tell them from
// workers stuck in a call (testenv.IgnoreIdleSinkWorkers).
//
//go:noinline
func park(wake <-chan struct{}, idle <-chan time.Time) bool {
	select {
	case <-wake:
		return true
	case <-idle:
		return false
	}
}

// watchdog runs when the timer armed at a call's start fires: a call that
// has overrun the bound stalls its worker; one that started later gets
// the rest of its own bound.
func (s *sinkQueue) watchdog() {
	s.mu.Lock()
	if !s.inCall {
		s.watchArmed = false
		s.mu.Unlock()
		return
	}
	if left := s.stallAfter() - (time.Since(s.epoch) - s.callStart); left > 0 {
		s.watch.Reset(left)
		s.mu.Unlock()
		return
	}
	s.watchArmed = false
	stalled := s.current
	for _, c := range stalled {
		if !c.ev.Type.Final() {
			s.stalled[c.ev.ExecutionID] = struct{}{}
		}
	}
	s.inCall, s.current = false, nil // the abandoned worker keeps its own
	s.gen++
	gen := s.gen
	s.parked = false // the fresh worker owns the queue (s.worker stays set)
	s.mu.Unlock()
	for _, c := range stalled {
		c.answer(errAuditTimeout)
	}
	s.warn(fmt.Sprintf("a call overran its %s bound; that execution's later events are dropped for this sink", s.bound))
	go s.work(gen, false)
}

func (s *sinkQueue) safeCall(it queued) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("agentsafe: the sink panicked: %v", p) // a panicking sink loses its event, nothing more
		}
	}()
	return s.call(it.ctx, it.ev)
}

// answer tells the execution waiting for it, if any, how its record
// fared. Only the first answer counts: the watchdog's and the worker's
// may race.
func (it queued) answer(err error) {
	if it.w != nil {
		select {
		case it.w.done <- err:
		default:
		}
	}
}

func (s *sinkQueue) drop(n int, why string) {
	s.dropped.Add(uint64(n))
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

// deliver hands ev to the tracer's sink, synchronously (it never blocks),
// then to every sink's queue.
func (e *Engine) deliver(ctx context.Context, ev Event) {
	e.traced(ctx, ev)
	for _, s := range e.sinks {
		s.enqueue(queued{ctx: ctx, ev: ev})
	}
}

// deliverAudited is deliver for the events a strict audit sink records
// synchronously, while caller waits; its error means the event was not
// recorded.
func (e *Engine) deliverAudited(ctx, caller context.Context, ev Event) error {
	e.traced(ctx, ev)
	var err error
	for _, s := range e.sinks {
		if s == e.audit {
			err = s.sync(ctx, caller, ev)
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
// when nil): final failures, abandoned results and deadline overruns at
// Warn, everything else at Info. Only the fields an event uses are logged
// (a deadline overrun's Duration as "overrun").
func NewSlogSink(logger *slog.Logger) EventSink {
	if logger == nil {
		logger = slog.Default()
	}
	return slogSink{logger}
}

type slogSink struct{ l *slog.Logger }

func (s slogSink) HandleEvent(ctx context.Context, e Event) {
	level := slog.LevelInfo
	if e.Type == EventFailed || e.Type == EventAbandonedResult || e.Type == EventDeadlineOverrun {
		level = slog.LevelWarn
	}
	if !s.l.Enabled(ctx, level) {
		return
	}
	var buf [24]slog.Attr
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
	add(e.SideEffect != SideEffectUnspecified || e.Risk != RiskLow, slog.String("risk", e.Risk.String()))
	add(e.Attempt > 0, slog.Int("attempt", e.Attempt))
	add(e.Attempts > 0, slog.Int("attempts", e.Attempts))
	add(e.PreviousErrorCode != CodeOK, slog.String("previous_error_code", e.PreviousErrorCode.String()))
	add(e.Code != CodeOK, slog.String("code", e.Code.String()))
	add(e.Code != CodeOK, slog.Bool("retryable", e.Retryable))
	duration := "duration"
	if e.Type == EventDeadlineOverrun {
		duration = "overrun"
	}
	add(e.Type.Final() || e.Duration > 0, slog.Duration(duration, e.Duration))
	add(e.ApprovalID != "", slog.String("approval_id", e.ApprovalID))
	add(e.Approver.ID != "", slog.String("approver", e.Approver.ID))
	add(e.Comment != "", slog.String("comment", e.Comment))
	add(e.Reason != "", slog.String("reason", e.Reason))
	add(e.Type == EventAbandonedResult, slog.Bool("succeeded", e.Succeeded))
	add(e.Error != "", slog.String("error", e.Error))
	add(e.Stack != "", slog.String("stack", e.Stack))
	add(e.ReplayOf != "", slog.String("replay_of", e.ReplayOf))
	if e.Budget != "" {
		attrs = append(attrs, slog.String("budget", e.Budget), slog.Int64("amount", e.Amount), slog.Int64("spent", e.Spent), slog.Int64("limit", e.Limit))
	}
	add(e.RetryAfter > 0, slog.Duration("retry_after", e.RetryAfter))
	s.l.LogAttrs(ctx, level, string(e.Type), attrs...)
}
