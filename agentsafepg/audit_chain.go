package agentsafepg

import (
	"context"
	"crypto/ed25519"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/internal/auditpg"
	"github.com/agentsafe/agentsafe/middleware"
)

// WithCheckpoints sets when the audit sink writes a checkpoint row:
// once every records were written after the last one, or interval after
// the first of them, whichever comes first. The defaults are 1,000
// records and 10 seconds; zero or less keeps a default.
func WithCheckpoints(every int, interval time.Duration) AuditOption {
	return auditOption(func(c *auditConfig) { c.chain.SetCheckpoints(every, interval) })
}

// WithSigner signs every checkpoint row with key (Ed25519), so that
// whoever can write the table but does not hold key cannot rewrite what a
// checkpoint covers without `agentsafe audit verify` noticing. By default
// checkpoints are not signed: then only checkpoints kept elsewhere
// ([OnCheckpoint]) attest the trail. NewAuditSink fails when key is not an
// Ed25519 private key.
func WithSigner(key ed25519.PrivateKey) AuditOption {
	return auditOption(func(c *auditConfig) { c.chain.Signer = key })
}

// OnCheckpoint calls f with each checkpoint once its row is committed, so
// that the application keeps it where the table's writers cannot change
// it (another database, an object store with retention):
// `agentsafe audit verify --checkpoint` then catches a trail cut or
// rewritten before it. f is called one checkpoint at a time, in chain
// order, after the write that committed it; keep it short (hand the
// checkpoint to a queue of your own). By default no hook is called.
func OnCheckpoint(f func(auditlog.Checkpoint)) AuditOption {
	return auditOption(func(c *auditConfig) {
		if f == nil {
			c.chain.OnCheckpoint = nil
			return
		}
		c.chain.OnCheckpoint = func(cp auditchain.Checkpoint) {
			f(auditlog.Checkpoint{Chain: cp.Chain, Seq: cp.Seq, Hash: cp.Hash.String(), Time: cp.Time, Signature: cp.Signature, Final: cp.Final})
		}
	})
}

// chainWriter gives the sink's rows their places in its chain and writes
// them (migration 0008).
type chainWriter struct {
	pool *pgxpool.Pool

	// mu serializes the chain's writes: the sink's, and its timer's.
	mu sync.Mutex
	w  *auditchain.Writer
	// unsure: the reply of a write was lost, so whether it was committed
	// is known only from the chain's head, read before the next write.
	// pending is that write's events and sealed rows; skip, once the head
	// showed it committed, the events of it the engine may send again.
	unsure  bool
	pending []middleware.Event
	sealed  []auditchain.Sealed
	resent  auditchain.Resent
	// timer arms the checkpoint due by time.
	timer  *auditchain.Timer
	closed bool
	// hook keeps OnCheckpoint calls in chain order, outside mu.
	hook sync.Mutex
}

func newChainWriter(pool *pgxpool.Pool, cfg auditchain.Config) *chainWriter {
	c := &chainWriter{pool: pool, w: auditchain.NewWriter(cfg, time.Now())}
	c.timer = auditchain.NewTimer(c.checkpointLater)
	return c
}

// write writes events as the chain's next rows, in one statement, with a
// checkpoint after every N records; it returns once they are committed or
// with the error that kept them all from that.
func (c *chainWriter) write(ctx context.Context, events []middleware.Event) error {
	c.mu.Lock()
	cps, err := c.writeLocked(ctx, events, nil)
	c.handoff(cps) // unlocks c.mu
	return err
}

// writeLocked does write's work with c.mu held; extra rows (a checkpoint)
// follow the events'. It returns the checkpoints committed.
func (c *chainWriter) writeLocked(ctx context.Context, events []middleware.Event, extra []auditchain.Record) ([]auditchain.Checkpoint, error) {
	if c.closed {
		return nil, errClosed
	}
	if c.unsure {
		if err := c.settle(ctx); err != nil {
			return nil, err
		}
	}
	events = c.resent.Drop(events)
	if len(events) == 0 && len(extra) == 0 {
		return nil, nil
	}
	recs := auditchain.AppendEvents(make([]auditchain.Record, 0, len(events)+len(extra)), events)
	recs = append(recs, extra...)
	sealed := c.w.Seal(nil, recs, false)
	err := auditpg.Insert(ctx, c.pool, sealed)
	switch {
	case err == nil:
		c.w.Commit(sealed)
		c.timer.Arm(c.w)
		return auditchain.Checkpoints(sealed), nil
	case auditpg.IsServerError(err) && !auditpg.IsChainConflict(err):
		return nil, err // refused: nothing was committed, no place taken
	}
	// The reply was lost (or a place was taken: an earlier write whose
	// reply was lost was committed after all): the head decides.
	c.unsure, c.pending, c.sealed = true, events, sealed
	return nil, err
}

// settle reads the chain's head after a write whose reply was lost: if
// the write was committed, the chain goes on after it, and its events are
// not written again when the engine sends them once more.
func (c *chainWriter) settle(ctx context.Context) error {
	seq, h, err := auditpg.Head(ctx, c.pool, c.w.ID())
	if err != nil {
		return err
	}
	committed := len(c.sealed) > 0 && c.sealed[len(c.sealed)-1].Hash == h &&
		uint64(c.sealed[len(c.sealed)-1].Record.Int(auditchain.ChainSeq)) == seq
	if committed {
		c.w.Commit(c.sealed)
		c.resent.Remember(c.pending)
	} else if cur, _ := c.w.Head(); seq != cur {
		c.w.SetHead(seq, h) // not ours to explain: go on from what is stored
	}
	c.unsure, c.pending, c.sealed = false, nil, nil
	return nil
}

// handoff unlocks c.mu and gives cps to the hook, in order.
func (c *chainWriter) handoff(cps []auditchain.Checkpoint) {
	if len(cps) == 0 {
		c.mu.Unlock()
		return
	}
	c.hook.Lock()
	c.mu.Unlock()
	defer c.hook.Unlock()
	c.w.Handoff(cps)
}

// checkpointLater writes the checkpoint due by time: the timer's
// callback of generation gen.
func (c *chainWriter) checkpointLater(gen uint64) {
	c.mu.Lock()
	now := time.Now()
	if c.closed || !c.timer.Fire(gen, c.w, now) {
		c.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	cps, err := c.writeLocked(ctx, nil, []auditchain.Record{auditchain.CheckpointRecord(now)})
	if err != nil && !c.closed {
		c.timer.Retry(now)
	}
	c.handoff(cps)
}

// close writes the chain's last checkpoint (a record after it is found
// inserted), when it has rows, and stops the chain.
func (c *chainWriter) close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	var cps []auditchain.Checkpoint
	var err error
	if seq, _ := c.w.Head(); seq > 0 || c.unsure {
		cps, err = c.writeLocked(ctx, nil, []auditchain.Record{auditchain.CloseRecord(time.Now())})
	}
	c.closed = true
	c.timer.Stop()
	c.handoff(cps)
	if err != nil {
		return errors.Join(errors.New("agentsafepg: the audit sink's last checkpoint"), err)
	}
	return nil
}
