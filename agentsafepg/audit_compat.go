package agentsafepg

import (
	"context"
	"time"
)

// What the sink kept before the engine batched for it (see
// middleware.BatchAuditSink): it has no queue of its own now, so these
// keep existing code compiling and do what is left to do.

// WithBatch configured the sink's own batching.
//
// Deprecated: the engine writes every record waiting for the sink in one
// RecordBatch (group commit), so the sink has nothing to batch; WithBatch
// changes nothing.
func WithBatch(size int, delay time.Duration) AuditOption {
	return auditOption(func(*auditConfig) {})
}

// Flush wrote the sink's queued events.
//
// Deprecated: the sink queues nothing (the engine's queue holds what waits
// for it, and writes it without a call); Flush returns nil.
func (s *AuditSink) Flush(ctx context.Context) error { return nil }

// Dropped counted the events the sink's own queue lost.
//
// Deprecated: the sink has no queue; the engine counts what a sink lost,
// per sink (middleware.Engine.Stats). Dropped returns 0.
func (s *AuditSink) Dropped() uint64 { return 0 }
