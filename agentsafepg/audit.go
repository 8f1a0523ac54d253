package agentsafepg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/middleware"
)

// AuditSink is a strict audit sink (middleware.WithAuditSink) that writes
// events to agentsafe.audit_events. capability.requested and
// capability.started are committed before Record returns, together with
// every event batched before them, in one statement; the engine runs
// nothing on an event that was not committed. Every other event is batched
// and written when the batch is full, when its delay is up, before the
// next requested or started event, or at [AuditSink.Flush].
//
// A batch that cannot be written stays queued, in order, and is tried
// again after a backoff and with the next requested or started event: so
// while the database is down, new calls fail AUDIT_UNAVAILABLE and the
// trail of the calls that ran is written once it is back. Queued events
// beyond the cap are dropped, oldest first, and counted ([AuditSink.Dropped]).
//
// Rows carry no payload: the fields of middleware.Event, with NULL for
// those an event type does not use. They are indexed for every event of an
// execution (execution_id, seq) and every execution of an actor
// (actor_tenant, actor_id, at of capability.requested).
//
// One AuditSink may serve several engines. [AuditSink.Close] writes what
// is queued and stops the sink.
type AuditSink struct {
	pool  *pgxpool.Pool
	cfg   auditConfig
	chain *chainWriter

	// write is held for each write, so that events reach the table in the
	// order they came.
	write sync.Mutex

	mu       sync.Mutex
	queue    []middleware.Event
	timer    *time.Timer // armed while batched events wait
	failures int         // consecutive failed writes
	closed   bool

	dropped atomic.Uint64
}

var _ middleware.AuditSink = (*AuditSink)(nil)

const (
	defaultBatchSize  = 256
	defaultBatchDelay = 100 * time.Millisecond
	// maxQueued caps the events waiting for a write, per defaultBatchSize.
	queuedBatches = 64
	// writeTimeout bounds one write, so that a write the engine stopped
	// waiting for does not hold the sink for longer.
	writeTimeout = 5 * time.Second
	// maxBackoff caps the pause before a failed batch is tried again.
	maxBackoff = 5 * time.Second
)

// AuditOption configures [NewAuditSink].
type AuditOption interface{ applyAudit(*auditConfig) }

type auditOption func(*auditConfig)

func (f auditOption) applyAudit(c *auditConfig) { f(c) }

type auditConfig struct {
	batchSize int
	delay     time.Duration
	chain     auditchain.Config
}

// WithBatch sets when batched events are written: once size of them wait,
// or delay after the first of them came, whichever is first. The defaults
// are 256 events and 100ms; zero or less keeps a default. At most 64
// batches wait while the database is unreachable.
func WithBatch(size int, delay time.Duration) AuditOption {
	return auditOption(func(c *auditConfig) {
		if size > 0 {
			c.batchSize = size
		}
		if delay > 0 {
			c.delay = delay
		}
	})
}

// errClosed is Record's error after Close.
var errClosed = errors.New("agentsafepg: the audit sink is closed")

// NewAuditSink returns an audit sink writing to pool. It fails when the
// database cannot be reached or lacks the schema ([Migrate] creates it).
// The sink never closes pool; close the sink first.
func NewAuditSink(pool *pgxpool.Pool, opts ...AuditOption) (*AuditSink, error) {
	if pool == nil {
		return nil, errors.New("agentsafepg: NewAuditSink needs a pool")
	}
	cfg := auditConfig{batchSize: defaultBatchSize, delay: defaultBatchDelay}
	for _, o := range opts {
		if o != nil {
			o.applyAudit(&cfg)
		}
	}
	if err := cfg.chain.Check(); err != nil {
		return nil, fmt.Errorf("agentsafepg: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := checkSchema(ctx, pool, schemaVersion); err != nil {
		return nil, err
	}
	return &AuditSink{pool: pool, cfg: cfg, chain: newChainWriter(pool, cfg.chain)}, nil
}

// Chain is the id of the sink's hash chain: "chn_", the time the sink was
// made, and 128 random bits.
func (s *AuditSink) Chain() string { return s.chain.w.ID() }

// Record implements middleware.AuditSink. For capability.requested and
// capability.started it returns once the event, and every event queued
// before it, is committed, or with the error that kept them from it; any
// other event is queued for the next write and Record returns nil (or
// the error of the write a full batch started).
func (s *AuditSink) Record(ctx context.Context, e middleware.Event) error {
	if e.Type == middleware.EventRequested || e.Type == middleware.EventStarted {
		return s.flush(ctx, &e)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	s.queue = append(s.queue, e)
	s.trim()
	full := len(s.queue) >= s.cfg.batchSize
	if !full && s.timer == nil {
		s.timer = time.AfterFunc(s.cfg.delay, s.flushLater)
	}
	s.mu.Unlock()
	if full {
		return s.flush(ctx, nil)
	}
	return nil
}

// Flush writes every queued event now.
func (s *AuditSink) Flush(ctx context.Context) error { return s.flush(ctx, nil) }

// Close writes every queued event and stops the sink: a later Record
// fails. It returns the error of that last write; the events it could not
// write are lost. Closing a closed sink is a no-op.
func (s *AuditSink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	err := errors.Join(s.flush(ctx, nil), s.chain.close(ctx))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopTimer()
	if n := len(s.queue); n > 0 {
		s.dropped.Add(uint64(n))
		s.queue = nil
	}
	return err
}

// Dropped reports how many events the sink lost: queued beyond its cap
// while the database was unreachable, or left unwritten at Close.
func (s *AuditSink) Dropped() uint64 { return s.dropped.Load() }

// flushLater is the timer's write.
func (s *AuditSink) flushLater() { _ = s.flush(context.Background(), nil) } // a failure re-arms the timer

// flush writes the queued events and then last, if any, in one statement.
// On failure the queued events go back to the front of the queue, and the
// timer tries again after a backoff; last is not kept (its caller learns
// it was not recorded).
func (s *AuditSink) flush(ctx context.Context, last *middleware.Event) error {
	s.write.Lock()
	defer s.write.Unlock()
	s.mu.Lock()
	if s.closed && last != nil {
		s.mu.Unlock()
		return errClosed
	}
	batch := s.queue
	s.queue = nil
	s.stopTimer()
	s.mu.Unlock()
	events := batch
	if last != nil {
		events = append(events[:len(events):len(events)], *last)
	}
	if len(events) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	err := s.insert(ctx, events)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.failures = 0
		return nil
	}
	s.queue = append(batch, s.queue...)
	s.trim()
	if len(s.queue) > 0 && !s.closed {
		s.failures++
		s.stopTimer()
		s.timer = time.AfterFunc(min(s.cfg.delay<<min(s.failures, 16), maxBackoff), s.flushLater)
	}
	return err
}

// trim drops the oldest queued events beyond the cap; s.mu is held.
func (s *AuditSink) trim() {
	if over := len(s.queue) - queuedBatches*s.cfg.batchSize; over > 0 {
		s.dropped.Add(uint64(over))
		clear(s.queue[:over])
		s.queue = s.queue[over:]
	}
}

// stopTimer disarms the batch timer; s.mu is held.
func (s *AuditSink) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// insert writes events as the next rows of the sink's chain, in one
// statement.
func (s *AuditSink) insert(ctx context.Context, events []middleware.Event) error {
	return s.chain.write(ctx, events)
}
