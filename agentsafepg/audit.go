package agentsafepg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/middleware"
)

// AuditSink is a strict audit sink (middleware.WithAuditSink) that writes
// events to agentsafe.audit_events. It is a middleware.BatchAuditSink:
// the engine hands it every record waiting for it at once, and it writes
// them in one INSERT, in order, all or none (group commit); the engine
// runs nothing on a capability.requested or capability.started that was
// not committed. A record is committed when RecordBatch (or Record)
// returns nil.
//
// It stores any event the engine can produce. A text field with a NUL
// byte or bytes that are not UTF-8 is escaped (a backslash as `\\`, each
// such byte as `\xNN`), one longer than its limit is cut (1 KiB for ids,
// names and codes, 16 KiB for an error, a comment or a reason, 64 KiB for a
// stack), and a time PostgreSQL cannot represent is clamped to its range;
// the row's altered column lists each such field ("error:escaped",
// "stack:truncated", "at:clamped"), and is NULL when the row is exactly
// the event. A batch PostgreSQL still refuses for a record's content fails
// with its data exception (SQLSTATE class 22), which the engine splits to
// isolate that record; any other failure (the database unreachable, the
// write's deadline) fails the whole batch, which the engine keeps and
// writes again with its next record, or on its own a little later when
// none comes.
//
// Its rows form a hash chain of its own (SPEC §15; migration 0008): each
// has chain (the sink's, [AuditSink.Chain]), chain_seq (1, 2, 3 … without
// gaps: a row takes its number when it is committed), prev and hash, a
// SHA-256 over prev and every field of the row as stored. After every
// 1,000 rows, and 10 seconds after the first row no checkpoint covers yet,
// it writes a checkpoint row ([WithCheckpoints], [WithSigner],
// [OnCheckpoint]); Close writes the last, which closes the chain. After a write whose reply was
// lost it reads its chain's head before the next write and goes on from
// there: a write that was committed is not written again. `agentsafe
// audit verify --postgres` checks the chains.
//
// Rows carry no payload: the fields of middleware.Event, with NULL for
// those an event type does not use. They are indexed for every event of an
// execution (execution_id, seq) and every execution of an actor
// (actor_tenant, actor_id, at of capability.requested).
//
// One AuditSink may serve several engines. [AuditSink.Close] stops it.
type AuditSink struct {
	pool  *pgxpool.Pool
	chain *chainWriter
	// mu is held for reading by each write, and by Close for writing, so
	// that Close returns once the writes in progress have ended.
	mu     sync.RWMutex
	closed bool
}

var _ middleware.BatchAuditSink = (*AuditSink)(nil)

// writeTimeout bounds a write whose context has no deadline (the engine's
// always has one: its audit bound).
const writeTimeout = 5 * time.Second

// AuditOption configures [NewAuditSink].
type AuditOption interface{ applyAudit(*auditConfig) }

type auditOption func(*auditConfig)

func (f auditOption) applyAudit(c *auditConfig) { f(c) }

type auditConfig struct {
	chain auditchain.Config
}

// errClosed is Record's error after Close.
var errClosed = errors.New("agentsafepg: the audit sink is closed")

// NewAuditSink returns an audit sink writing to pool, starting a new
// chain. It fails when the database cannot be reached or lacks the schema
// ([Migrate] creates it), or when an option is invalid. The sink never
// closes pool; close the sink first.
func NewAuditSink(pool *pgxpool.Pool, opts ...AuditOption) (*AuditSink, error) {
	if pool == nil {
		return nil, errors.New("agentsafepg: NewAuditSink needs a pool")
	}
	var cfg auditConfig
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
	return &AuditSink{pool: pool, chain: newChainWriter(pool, cfg.chain)}, nil
}

// Chain is the id of the sink's hash chain: "chn_", the time the sink was
// made, and 128 random bits.
func (s *AuditSink) Chain() string { return s.chain.w.ID() }

// Record implements middleware.AuditSink: it writes e, and returns once
// it is committed or with the error that kept it from that.
func (s *AuditSink) Record(ctx context.Context, e middleware.Event) error {
	return s.RecordBatch(ctx, []middleware.Event{e})
}

// RecordBatch implements middleware.BatchAuditSink: it writes events in
// one statement, in order (with a checkpoint row when one is due), and
// returns once they are committed or with the error that kept them all
// from that.
func (s *AuditSink) RecordBatch(ctx context.Context, events []middleware.Event) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	if len(events) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, writeTimeout)
		defer cancel()
	}
	return s.chain.write(ctx, events)
}

// Close stops the sink once the writes in progress have ended, and
// writes the chain's last checkpoint row (type audit.close), so that the
// whole chain is attested and a row added after it is found inserted: a
// later Record or RecordBatch
// fails, so that nothing runs on a record the sink will not write. Every
// record it accepted is committed. Close it after the servers whose
// engines use it have shut down: the engine hands the sink each record as
// it comes, and a record it hands over after Close is lost. It returns
// the error of the last checkpoint's write. Closing a closed sink is a
// no-op.
func (s *AuditSink) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, writeTimeout)
		defer cancel()
	}
	return s.chain.close(ctx)
}
