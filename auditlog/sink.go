package auditlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/middleware"
)

// Sink writes audit records as JSON Lines to an io.Writer, each record
// given its place in the sink's hash chain. It is a strict audit sink
// (middleware.WithAuditSink) and an event sink (middleware.WithEventSink).
// Record returns once the record's line is written, so with a file that
// the application syncs, or an unbuffered writer, a call runs only once
// its start is in the trail.
//
// Every record is one line, one JSON object in RFC 8785 form: the event's
// fields (snake_case, those an event does not use left out), chain,
// chain_seq, prev and hash. Every 1,000 records, or 10 seconds after the
// first record a checkpoint does not cover, the sink writes a checkpoint
// record (see [WithCheckpoints], [WithSigner], [OnCheckpoint]); Close
// writes a last one.
//
// A Sink is safe for concurrent use; its writes are serialized, one Write
// call per record (or per batch). It never closes the writer.
type Sink struct {
	w     io.Writer
	cfg   config
	chain *auditchain.Writer

	mu     sync.Mutex
	closed bool
	// torn: the last Write stopped inside a line, so the next one starts
	// with a newline that ends it (the torn line is not part of the chain).
	torn  bool
	timer *time.Timer
	// timerAt is when the timer fires; timerGen tells a callback of a
	// timer that was replaced from the current one.
	timerAt  time.Time
	timerGen uint64
	sealed   []auditchain.Sealed
	recs     []auditchain.Record
	out      []byte
	// hook serializes OnCheckpoint calls, in chain order, outside mu.
	hook sync.Mutex

	failed atomic.Uint64
}

var (
	_ middleware.AuditSink = (*Sink)(nil)
	_ middleware.EventSink = (*Sink)(nil)
)

// ErrClosed is the error of a write after Close.
var ErrClosed = errors.New("auditlog: the sink is closed")

// New returns a sink writing to w, starting a new chain (its id: "chn_",
// the start time and 128 random bits). It fails when an option is
// invalid (a signer that is not an Ed25519 private key).
func New(w io.Writer, opts ...Option) (*Sink, error) {
	if w == nil {
		return nil, errors.New("auditlog: New needs a writer")
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if err := cfg.chain.Check(); err != nil {
		return nil, fmt.Errorf("auditlog: %w", err)
	}
	return &Sink{w: w, cfg: cfg, chain: auditchain.NewWriter(cfg.chain, time.Now())}, nil
}

// Chain is the id of the sink's chain.
func (s *Sink) Chain() string { return s.chain.ID() }

// Record writes e's line before it returns, or returns why it could not.
// It implements middleware.AuditSink.
func (s *Sink) Record(_ context.Context, e middleware.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs[:0], auditchain.FromEvent(e))
	return s.writeLocked(s.recs)
}

// HandleEvent writes e's line; a failure is counted ([Sink.Failed]). It
// implements middleware.EventSink, for a trail that is not strict.
func (s *Sink) HandleEvent(ctx context.Context, e middleware.Event) {
	if s.Record(ctx, e) != nil {
		s.failed.Add(1)
	}
}

// Failed counts the events HandleEvent could not write.
func (s *Sink) Failed() uint64 { return s.failed.Load() }

// Close writes a last checkpoint, when records were written after the
// previous one, so that the whole chain is attested, and stops the sink:
// a later write fails with [ErrClosed]. It does not close the writer.
// Closing a closed sink is a no-op.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.stopTimer()
	if _, at := s.chain.Due(time.Now()); at.IsZero() {
		s.closed = true
		s.mu.Unlock()
		return nil
	}
	return s.checkpointLocked(true)
}

// writeLocked seals recs, writes their lines in one Write and commits
// the records whose lines were written whole; s.mu is held.
func (s *Sink) writeLocked(recs []auditchain.Record) error {
	if s.closed {
		return ErrClosed
	}
	now := time.Now()
	s.sealed = s.chain.Seal(s.sealed[:0], recs, true)
	out := s.out[:0]
	if s.torn {
		out = append(out, '\n')
	}
	prefix := len(out)
	out = append(out, s.chain.Lines()...)
	s.out = out
	n, err := s.w.Write(out)
	if n < 0 || n > len(out) {
		n, err = 0, fmt.Errorf("auditlog: the writer reported %d bytes written of %d", n, len(out))
	}
	if n > 0 {
		s.torn = out[n-1] != '\n'
	}
	whole := 0
	for _, c := range out[min(prefix, n):n] {
		if c == '\n' {
			whole++
		}
	}
	s.chain.Commit(s.sealed[:whole], now)
	s.schedule(now)
	if err == nil && n < len(out) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("auditlog: write: %w", err)
	}
	return nil
}

// schedule arms the checkpoint timer: at once when a checkpoint is due,
// else when the oldest record it would cover is Interval old. The timer's
// goroutine writes it, never a caller's; s.mu is held.
func (s *Sink) schedule(now time.Time) {
	due, at := s.chain.Due(now)
	if due {
		at = now
	}
	if at.IsZero() || s.timer != nil && !at.Before(s.timerAt) {
		return
	}
	s.stopTimer()
	s.timerGen++
	gen := s.timerGen
	s.timer, s.timerAt = time.AfterFunc(at.Sub(now), func() { s.checkpointLater(gen) }), at
}

// stopTimer disarms the checkpoint timer; s.mu is held.
func (s *Sink) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.timerGen++ // a callback already on its way finds itself stale
}

// checkpointLater is the write of the timer of generation gen.
func (s *Sink) checkpointLater(gen uint64) {
	s.mu.Lock()
	if s.closed || gen != s.timerGen {
		s.mu.Unlock()
		return
	}
	s.timer = nil
	if due, _ := s.chain.Due(time.Now()); !due {
		s.schedule(time.Now())
		s.mu.Unlock()
		return
	}
	_ = s.checkpointLocked(false) // a failed write is tried again: schedule re-arms the timer
}

// checkpointLocked writes a checkpoint record, closes the sink when
// closing, re-arms the timer otherwise, and hands the checkpoint to the
// hook. s.mu is held, and released before the hook runs (s.hook keeps
// the calls in chain order).
func (s *Sink) checkpointLocked(closing bool) error {
	s.recs = append(s.recs[:0], auditchain.CheckpointRecord(time.Now()))
	err := s.writeLocked(s.recs)
	var cp []auditchain.Sealed
	if err == nil {
		cp = append(cp, s.sealed...)
	}
	if closing {
		s.closed = true
		s.stopTimer()
	} else if err != nil {
		s.scheduleRetry()
	}
	s.hook.Lock()
	s.mu.Unlock()
	defer s.hook.Unlock()
	s.chain.Handoff(cp)
	return err
}

// scheduleRetry arms the timer to try a failed checkpoint again after a
// second; s.mu is held.
func (s *Sink) scheduleRetry() {
	s.stopTimer()
	gen := s.timerGen
	s.timer, s.timerAt = time.AfterFunc(time.Second, func() { s.checkpointLater(gen) }), time.Now().Add(time.Second)
}
