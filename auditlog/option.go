package auditlog

import (
	"crypto/ed25519"
	"time"

	"github.com/agentsafe/agentsafe/internal/auditchain"
)

// Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	chain auditchain.Config
}

// WithCheckpoints sets when the sink writes a checkpoint record: once
// every records were written after the last one, or interval after the
// first of them, whichever comes first. The defaults are 1,000 records
// and 10 seconds; zero or less keeps a default.
func WithCheckpoints(every int, interval time.Duration) Option {
	return optionFunc(func(c *config) { c.chain.SetCheckpoints(every, interval) })
}

// WithSigner signs every checkpoint with key (Ed25519), so that whoever
// can write the trail but does not hold key cannot rewrite what a
// checkpoint covers without the verifier noticing. By default checkpoints
// are not signed: then only checkpoints kept elsewhere ([OnCheckpoint])
// attest the trail. New fails when key is not an Ed25519 private key.
func WithSigner(key ed25519.PrivateKey) Option {
	return optionFunc(func(c *config) { c.chain.Signer = key })
}

// OnCheckpoint calls f with each checkpoint once its record is written,
// so that the application keeps it where the trail's writers cannot
// change it (another store, an object store with retention, a
// transparency log): `agentsafe audit verify --checkpoint` then catches
// a trail cut or rewritten before it. f is called on the sink's own
// goroutine (or Close's), one checkpoint at a time, in chain order; a
// slow f delays the next checkpoint, never a write. By default no hook
// is called.
func OnCheckpoint(f func(Checkpoint)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.chain.OnCheckpoint = nil
			return
		}
		c.chain.OnCheckpoint = func(cp auditchain.Checkpoint) { f(checkpointOf(cp)) }
	})
}
