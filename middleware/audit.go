package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// BatchAuditSink is an [AuditSink] that can also write several records in
// one call, in order, all or none: the engine then hands it every record
// waiting for it at once (group commit), so that under load a strict
// audit trail costs a write per batch, not per record. A batch that fails
// because of one record's content must say so: a [*BatchError] naming the
// record, or an error with a SQLState() method in the data-exception
// class "22" (pgx's *pgconn.PgError has one), which the engine answers by
// splitting the batch in halves until the record is alone; a panic counts
// as the latter. Any other error is taken for a transient failure (the
// connection lost, the deadline passed): the engine sends the batch's
// queued records again with its next write, so a sink whose commit reply
// was lost sees them twice. RecordBatch's context has the audit bound as
// its deadline and no one call's values: its records belong to many
// calls.
type BatchAuditSink interface {
	AuditSink
	RecordBatch(ctx context.Context, events []Event) error
}

// BatchError is the error of a batch that a [BatchAuditSink] could not
// write because of the content of one of its records: Index is that
// record's position in the batch, Err the reason. Nothing of the batch
// was written.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("agentsafe: audit record %d of the batch cannot be stored: %v", e.Index, e.Err)
}

func (e *BatchError) Unwrap() error { return e.Err }

// The strict audit sink's queue. Records of every kind wait in one queue,
// in order: the synchronous ones (capability.requested and .started,
// which an execution waits for) and the others. The worker writes
// whatever is waiting in one call (a BatchAuditSink's RecordBatch, or an
// AuditSink's Record for one record), so that concurrent executions share
// a write. What one record contains never costs another its write:
//
//   - a batch that fails because of one record's content (the sink names
//     it, or the error is a data exception) is split, around the record
//     it names or in halves, until the record is alone; a record that
//     still fails costs only its own execution (synchronous) or is counted
//     as dropped;
//   - a transient failure fails the batch's synchronous records (their
//     executions run nothing) and, for a BatchAuditSink, keeps its other
//     records, in order, at the front of the queue, written with the next
//     record that comes: so the trail of the calls that ran survives an
//     outage. If no record comes, they are tried again on their own, 1,
//     2, 4, ... 32 seconds after the worker left. An AuditSink without
//     RecordBatch is handed the records kept and the next one a record at
//     a time, in order, and none after the first that fails;
//   - an execution that stopped waiting (its bound passed) is never
//     written as if it ran: its record is left out of every write from
//     then on;
//   - when the records waiting would take longer than half the bound to
//     write at the sink's recent pace, a new synchronous record is refused
//     at once: the call fails AUDIT_UNAVAILABLE rather than wait for a
//     timeout, and the sink keeps writing at its pace for the calls it took.
const (
	// maxAuditBatch bounds the records of one RecordBatch.
	maxAuditBatch = 256
)

var (
	errAuditFull   = errors.New("agentsafe: the audit sink's queue is full")
	errAuditBehind = errors.New("agentsafe: the audit sink is behind: the records waiting for it would outlast the bound")
	// errCallerLeft: the caller's context ended while its record waited.
	errCallerLeft = errors.New("agentsafe: the caller left while its audit record waited")
	// errSinkPanicked is the cause of a write whose sink panicked: taken
	// for a record's content, so that the record is isolated.
	errSinkPanicked = errors.New("agentsafe: the audit sink panicked")
)

// auditWriter is the strict audit sink's side of its queue.
type auditWriter struct {
	// write is RecordBatch, or Record for one record at a time (max 1).
	write func(ctx context.Context, events []Event) error
	max   int
	// avg is a moving average of the sink's recent writes; guarded by the
	// queue's mu.
	avg time.Duration
}

func newAuditWriter(s AuditSink) *auditWriter {
	if b, ok := s.(BatchAuditSink); ok {
		return &auditWriter{write: b.RecordBatch, max: maxAuditBatch}
	}
	return &auditWriter{write: func(ctx context.Context, evs []Event) error { return s.Record(ctx, evs[0]) }, max: 1}
}

// sync delivers ev through the queue and waits for the sink's answer, at
// most the sink's bound, and while the caller (its context, when it has
// not ended already) waits: a strict audit sink's synchronous record, in
// order with the records queued before it. A record whose wait ended
// before it was taken into a write is never written.
func (s *sinkQueue) sync(ctx, caller context.Context, ev Event) error {
	var left <-chan struct{}
	if caller.Err() == nil {
		left = caller.Done()
	}
	w := &waiter{done: make(chan error, 1)}
	s.mu.Lock()
	if err := s.admit(ev); err != nil {
		if ev.Type == EventRequested {
			// Nothing of the call is recorded, and nothing runs: its
			// later records are not written either, so that refusing
			// calls costs the sink nothing while it is behind.
			s.stalled[ev.ExecutionID] = struct{}{}
		}
		s.mu.Unlock()
		return err
	}
	s.push(queued{ctx: ctx, ev: ev, w: w})
	t := time.NewTimer(s.bound)
	defer t.Stop()
	gaveUp := errAuditTimeout
	select {
	case err := <-w.done:
		return err
	case <-t.C:
	case <-left:
		gaveUp = errCallerLeft
	}
	s.mu.Lock()
	select {
	case err := <-w.done: // answered as the wait ended
		s.mu.Unlock()
		return err
	default:
	}
	w.gone = true // not written from now on
	if !w.writing && ev.Type == EventRequested {
		s.stalled[ev.ExecutionID] = struct{}{} // as for a refusal (above)
	}
	s.mu.Unlock()
	return gaveUp
}

// admit refuses a synchronous record when the queue is full, or when the
// writes ahead of it would take too long at the sink's recent pace: more
// than half the bound for a call's first record (capability.requested),
// the bound for its start, so that a call taken in is seldom refused
// halfway. A record that would wait behind no write is never refused by
// the pace; s.mu is held.
func (s *sinkQueue) admit(ev Event) error {
	if s.n >= s.size {
		return errAuditFull
	}
	if !s.inCall && s.n == s.retained {
		// Nothing is being written and nothing waits but what a failure
		// kept: the record goes with the next write, at once. Refusing it
		// by the pace of writes long past would refuse every call for
		// ever after one slow write, since only a write learns the pace
		// again.
		return nil
	}
	// The pace: the recent writes', or the write in progress if it has
	// taken longer (a sink that slowed down, or its first write).
	a := s.audit
	pace := a.avg
	if s.inCall {
		pace = max(pace, time.Since(s.epoch)-s.callStart)
	}
	writes := (s.n + a.max) / a.max // the one this record joins included
	if s.inCall {
		writes++
	}
	limit := s.bound
	if ev.Type == EventRequested {
		limit /= 2
	}
	if time.Duration(writes)*pace > limit {
		return errAuditBehind
	}
	return nil
}

// take moves the records kept after a failure and up to max others from
// the front of the queue into buf, leaving out those whose execution
// stopped waiting and those of a stalled execution (which it counts);
// s.mu is held.
func (s *sinkQueue) take(buf []queued) ([]queued, int) {
	stalled := 0
	for limit := s.retained + s.audit.max; s.n > 0 && limit > 0; limit-- {
		it := s.ring[s.head]
		s.ring[s.head] = queued{}
		s.head = (s.head + 1) % len(s.ring)
		s.n--
		if s.retained > 0 {
			s.retained--
		}
		if it.w != nil && it.w.gone {
			continue // its call failed: nothing ran
		}
		id := it.ev.ExecutionID
		if _, ok := s.stalled[id]; ok {
			if it.ev.Type.Final() {
				delete(s.stalled, id) // the trail is over: forget it
			}
			it.answer(errAuditTimeout)
			stalled++
			continue
		}
		buf = append(buf, it)
	}
	s.lastActive = time.Since(s.epoch)
	return buf, stalled
}

// retain puts records that a transient failure kept from the sink back at
// the front of the queue, in order, to be written with the next record
// that comes. At most half the queue is kept so: the records of the
// calls that ran before an outage are kept over those that came later
// (the failures of calls refused meanwhile), which are dropped. It
// returns how many it dropped; s.mu is held.
func (s *sinkQueue) retain(items []queued) int {
	keep := max(0, min(len(items), s.size-s.n, s.size/2-s.retained))
	dropped := len(items) - keep
	if keep == 0 {
		return dropped
	}
	if s.n+keep > len(s.ring) {
		s.grow(s.n + keep)
	}
	for i := keep - 1; i >= 0; i-- {
		s.head = (s.head - 1 + len(s.ring)) % len(s.ring)
		s.ring[s.head] = items[i]
	}
	s.n += keep
	s.retained += keep
	return dropped
}

// The fate of one record of a batch.
const (
	recordPending   = iota
	recordWritten   // stored
	recordWithdrawn // its execution stopped waiting: not written
	recordRefused   // its content cannot be stored
	recordFailed    // a transient failure kept it from the sink
)

// auditBatch is one batch the worker took, while it is being written.
type auditBatch struct {
	s     *sinkQueue
	gen   uint64
	items []queued
	fate  []uint8
	errs  []error
	// stop is the transient failure that ended the batch's writes: the
	// records after it are not tried, so that none is written before a
	// record of its execution that came first.
	stop error
}

// commit writes batch, splitting it as a record's content requires, and
// answers every record: written, refused, or kept for the next write. It
// reports false when the watchdog abandoned the worker meanwhile.
func (a *auditWriter) commit(s *sinkQueue, gen uint64, items []queued) bool {
	b := &auditBatch{s: s, gen: gen, items: items, fate: make([]uint8, len(items)), errs: make([]error, len(items))}
	all := make([]int, len(items))
	for i := range all {
		all[i] = i
	}
	alive := b.write(a, all)
	var retain []queued
	var delivered, refused int
	for i, it := range items {
		switch b.fate[i] {
		case recordWritten:
			delivered++
			it.answer(nil)
		case recordRefused:
			if it.w == nil {
				refused++
			}
			it.answer(b.errs[i])
		case recordFailed, recordPending:
			switch {
			case it.w != nil:
				err := b.errs[i]
				if err == nil { // never tried: the worker was abandoned first
					err = errAuditTimeout
				}
				it.answer(err)
			case alive:
				retain = append(retain, it)
			default:
				refused++ // abandoned with the worker
			}
		}
	}
	s.delivered.Add(uint64(delivered))
	if len(retain) > 0 {
		s.mu.Lock()
		refused += s.retain(retain)
		s.mu.Unlock()
	}
	if refused > 0 {
		s.drop(refused, "the sink could not store a record")
	}
	return alive
}

// write writes the records at positions pos, all or none, then splits
// what a record's content failed. It reports false when the worker was
// abandoned.
func (b *auditBatch) write(a *auditWriter, pos []int) bool {
	if a.max == 1 && len(pos) > 1 { // records kept after a failure, and the next: one write each
		for _, p := range pos {
			if !b.write(a, []int{p}) {
				return false
			}
		}
		return true
	}
	s := b.s
	s.mu.Lock()
	if s.gen != b.gen {
		s.mu.Unlock()
		return false
	}
	live := pos[:0]
	for _, p := range pos {
		if w := b.items[p].w; w != nil {
			if w.gone {
				b.fate[p] = recordWithdrawn
				continue
			}
			w.writing = b.stop == nil
		}
		live = append(live, p)
	}
	if len(live) == 0 || b.stop != nil {
		s.mu.Unlock()
		b.mark(live, recordFailed, b.stop)
		return true
	}
	s.startCall()
	s.current = b.items
	s.mu.Unlock()

	events := make([]Event, len(live))
	for i, p := range live {
		events[i] = b.items[p].ev
	}
	ctx := context.Background() // a batch's records belong to many calls
	if a.max == 1 {
		ctx = b.items[live[0]].ctx
	}
	start := time.Now()
	err := a.call(ctx, s.bound, events)
	took := time.Since(start)

	s.mu.Lock()
	if s.gen != b.gen {
		s.mu.Unlock()
		if err == nil {
			b.mark(live, recordWritten, nil) // a late write did store its records
		}
		return false
	}
	s.inCall = false
	if a.avg == 0 {
		a.avg = took
	} else {
		a.avg += (took - a.avg) / 8
	}
	if err != nil {
		for _, p := range live {
			if w := b.items[p].w; w != nil {
				w.writing = false // may be left out of the next write
			}
		}
	}
	s.mu.Unlock()

	if err == nil {
		b.mark(live, recordWritten, nil)
		return true
	}
	i, content := unstorable(err, len(live))
	switch {
	case !content:
		b.stop = err
		b.mark(live, recordFailed, err)
		return true
	case len(live) == 1:
		b.mark(live, recordRefused, err)
		return true
	case i >= 0: // the sink named the record
		b.mark(live[i:i+1], recordRefused, err)
		return b.write(a, live[:i]) && b.write(a, live[i+1:])
	default:
		h := len(live) / 2
		return b.write(a, live[:h]) && b.write(a, live[h:])
	}
}

func (b *auditBatch) mark(pos []int, fate uint8, err error) {
	for _, p := range pos {
		b.fate[p], b.errs[p] = fate, err
	}
}

// call writes events under a deadline of bound; a panic in the sink is
// an error.
func (a *auditWriter) call(ctx context.Context, bound time.Duration, events []Event) (err error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errSinkPanicked, p)
		}
	}()
	return a.write(ctx, events)
}

// unstorable reports whether err says that a record's content, not the
// sink's state, failed a write of n records, and which record when the
// sink says (-1 when it does not).
func unstorable(err error, n int) (index int, content bool) {
	if be, ok := errors.AsType[*BatchError](err); ok {
		if be.Index >= 0 && be.Index < n {
			return be.Index, true
		}
		return -1, true
	}
	if se, ok := errors.AsType[interface {
		error
		SQLState() string
	}](err); ok && strings.HasPrefix(se.SQLState(), "22") {
		return -1, true
	}
	return -1, errors.Is(err, errSinkPanicked)
}
