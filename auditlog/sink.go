package auditlog

import (
	"bytes"
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
// chain_seq, prev and hash. After every 1,000 records, and 10 seconds
// after the first record no checkpoint covers yet, the sink writes a
// checkpoint record (see [WithCheckpoints], [WithSigner],
// [OnCheckpoint]); Close writes a last one, which closes the chain.
//
// A Sink is safe for concurrent use; its writes are serialized, one Write
// call per record (or per batch). It never closes the writer.
type Sink struct {
	w     io.Writer
	chain *auditchain.Writer

	mu     sync.Mutex
	closed bool
	// torn: the last Write stopped inside a line, so the next one starts
	// with a newline that ends it (the torn line is not part of the chain).
	torn bool
	// timer arms the checkpoint due by time.
	timer  *auditchain.Timer
	sealed []auditchain.Sealed
	recs   []auditchain.Record
	events []middleware.Event
	// resent drops the records a failed write stored nonetheless when the
	// engine sends them again.
	resent auditchain.Resent
	out    []byte
	// committed is how many of sealed the last write stored.
	committed int
	// hook serializes OnCheckpoint calls, in chain order, outside mu.
	hook sync.Mutex

	failed atomic.Uint64
}

var (
	_ middleware.BatchAuditSink = (*Sink)(nil)
	_ middleware.EventSink      = (*Sink)(nil)
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
	s := &Sink{w: w, chain: auditchain.NewWriter(cfg.chain, time.Now())}
	s.timer = auditchain.NewTimer(s.checkpointLater)
	return s, nil
}

// Chain is the id of the sink's chain.
func (s *Sink) Chain() string { return s.chain.ID() }

// Record writes e's line before it returns, or returns why it could not.
// It implements middleware.AuditSink.
func (s *Sink) Record(_ context.Context, e middleware.Event) error {
	s.mu.Lock()
	s.events = append(s.events[:0], e)
	return s.write(s.events, nil, false)
}

// RecordBatch writes the lines of events (and a checkpoint due with them)
// in one Write call, in order, and returns once they are written, or
// with why they were not; it implements middleware.BatchAuditSink (group
// commit). A write that stops after some lines keeps those in the chain,
// reports the failure, and does not write them again when the engine
// sends them once more.
func (s *Sink) RecordBatch(_ context.Context, events []middleware.Event) error {
	s.mu.Lock()
	return s.write(events, nil, false)
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

// Close writes the chain's last checkpoint ("type":"audit.close"), so
// that the whole chain is attested and a record added after it is found
// inserted, and stops the sink: a later write fails with [ErrClosed]. It
// does not close the writer. Closing a closed sink is a no-op.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if seq, _ := s.chain.Head(); seq == 0 {
		s.closed = true
		s.timer.Stop()
		s.mu.Unlock()
		return nil
	}
	return s.write(nil, []auditchain.Record{auditchain.CloseRecord(time.Now())}, true)
}

// write seals the records of events and extra (a checkpoint), writes
// their lines in one Write, commits the records whose lines were written
// whole, closes the sink when closing, and hands the checkpoints written
// to the hook. s.mu is held, and released before the hook runs (s.hook
// keeps the calls in chain order).
func (s *Sink) write(events []middleware.Event, extra []auditchain.Record, closing bool) error {
	err := s.writeLocked(events, extra)
	cps := auditchain.Checkpoints(s.sealed[:s.committed])
	if closing {
		s.closed = true
		s.timer.Stop()
	}
	if cps == nil {
		s.mu.Unlock()
		return err
	}
	s.hook.Lock()
	s.mu.Unlock()
	defer s.hook.Unlock()
	s.chain.Handoff(cps)
	return err
}

// writeLocked does write's writing; s.mu is held.
func (s *Sink) writeLocked(events []middleware.Event, extra []auditchain.Record) error {
	s.committed = 0
	if s.closed {
		return ErrClosed
	}
	events = s.resent.Drop(events)
	recs := auditchain.AppendEvents(s.recs[:0], events)
	recs = append(recs, extra...)
	s.recs = recs
	if len(recs) == 0 {
		return nil
	}
	s.sealed = s.chain.Seal(s.sealed[:0], recs, true)
	out, prefix := s.chain.Lines(), 0
	if s.torn { // end the torn line first
		s.out = append(append(s.out[:0], '\n'), out...)
		out, prefix = s.out, 1
	}
	n, err := s.w.Write(out)
	if n < 0 || n > len(out) {
		n, err = 0, fmt.Errorf("the writer reported %d bytes written of %d", n, len(out))
	}
	if n > 0 {
		s.torn = out[n-1] != '\n'
	}
	if n == len(out) {
		s.committed = len(s.sealed)
	} else {
		s.committed = bytes.Count(out[min(prefix, n):n], []byte{'\n'})
	}
	s.chain.Commit(s.sealed[:s.committed])
	s.timer.Arm(s.chain)
	if s.committed == len(s.sealed) {
		return nil // every line is written: a late error changes nothing
	}
	if err == nil {
		err = io.ErrShortWrite
	}
	// The events whose lines were written whole are in the chain.
	stored := 0
	for _, sl := range s.sealed[:s.committed] {
		if !sl.Record.IsCheckpoint() {
			stored++
		}
	}
	s.resent.Remember(events[:min(stored, len(events))])
	return fmt.Errorf("auditlog: write: %w", err)
}

// checkpointLater writes the checkpoint due by time: the timer's
// callback of generation gen.
func (s *Sink) checkpointLater(gen uint64) {
	s.mu.Lock()
	now := time.Now()
	if s.closed || !s.timer.Fire(gen, s.chain, now) {
		s.mu.Unlock()
		return
	}
	if s.write(nil, []auditchain.Record{auditchain.CheckpointRecord(now)}, false) != nil {
		s.mu.Lock()
		if !s.closed {
			s.timer.Retry(now)
		}
		s.mu.Unlock()
	}
}
