package approvalstore

import (
	"context"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

const (
	defaultListLimit  = 100
	defaultMaxPending = 20
	defaultRetention  = 24 * time.Hour
)

// Option configures either store: it is a [MemoryOption] and a
// [RedisOption]. Options that only one store understands have that
// store's type, so that passing a Redis option to NewMemory, say, does not
// compile instead of being ignored.
type Option interface {
	MemoryOption
	RedisOption
}

// MemoryOption configures [NewMemory].
type MemoryOption interface{ applyMemory(*config) }

// RedisOption configures [NewRedis].
type RedisOption interface{ applyRedis(*config) }

type optionFunc func(*config)

func (f optionFunc) applyMemory(c *config) { f(c) }
func (f optionFunc) applyRedis(c *config)  { f(c) }

type memoryOption func(*config)

func (f memoryOption) applyMemory(c *config) { f(c) }

type redisOption func(*config)

func (f redisOption) applyRedis(c *config) { f(c) }

type config struct {
	now        func() time.Time
	allowSelf  bool
	policy     func(ctx context.Context, rec store.ApprovalRecord, approver store.Actor) error
	maxPending int
	retention  time.Duration
	// Redis only.
	prefix      string
	waitN       int
	waitTimeout time.Duration
	clockOffset func() time.Duration
}

func defaultConfig() config {
	return config{now: time.Now, maxPending: defaultMaxPending, retention: defaultRetention, prefix: "agentsafe:apr", waitTimeout: time.Second}
}

// checkApprover applies the approver rule and the application's policy.
func (c config) checkApprover(ctx context.Context, rec store.ApprovalRecord, approver store.Actor) error {
	if err := store.CheckApprover(rec.Requester, approver, c.allowSelf); err != nil {
		return err
	}
	if c.policy != nil {
		return c.policy(ctx, rec, approver)
	}
	return nil
}

// WithClock sets the memory store's clock (default time.Now), for tests
// that move time. The Redis store always decides expiry with Redis TIME.
func WithClock(now func() time.Time) MemoryOption {
	return memoryOption(func(c *config) {
		if now != nil {
			c.now = now
		}
	})
}

// WithSelfApproval lets requesters approve their own requests. By default
// the approver must not be the requester or anyone in its OnBehalfOf chain.
func WithSelfApproval() Option {
	return optionFunc(func(c *config) { c.allowSelf = true })
}

// WithApproverPolicy runs policy inside Decide, after the self-approval and
// tenant checks: return an error wrapping store.ErrApproverNotAllowed
// to refuse (for example when the approver's role does not match the
// record's approval type). By default any other actor of the tenant may
// decide.
func WithApproverPolicy(policy func(ctx context.Context, rec store.ApprovalRecord, approver store.Actor) error) Option {
	return optionFunc(func(c *config) { c.policy = policy })
}

// WithMaxPendingPerActor caps the pending records of one requester; over it
// Create fails with store.ErrTooManyPending (RESOURCE_EXHAUSTED). The
// default is 20.
func WithMaxPendingPerActor(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxPending = n
		}
	})
}

// WithRetention sets how long a record is kept after it stopped mattering
// (its expiry, or its lease once consumed). The default is 24 hours. In
// Redis it is the key's TTL: garbage collection, never a decision.
func WithRetention(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.retention = d
		}
	})
}

// WithKeyPrefix sets the prefix of the Redis store's keys; the default is
// "agentsafe:apr". Stores that share a Redis but not their approvals (two
// applications, or tests) use different prefixes. It must not contain
// braces: every key is a hash tag of its own.
func WithKeyPrefix(prefix string) RedisOption {
	return redisOption(func(c *config) { c.prefix = prefix })
}

// WithWait makes the Redis store wait, after each consumption, until at
// least replicas replicas have acknowledged it, for at most timeout: WAIT
// is pipelined behind the consuming script on the same connection of the
// record's master. NewRedis fails, naming the master, when a master
// reports fewer connected replicas than that (INFO replication). With
// fewer acknowledgements later, Consume gives the consumption back (as
// Release does: the approval is approved again, not spent) and fails with
// an error that is not a decision, so the engine answers
// APPROVAL_UNAVAILABLE, runs nothing, and the caller may try again. By
// default the store does not wait (replicas 0), and a failover can lose a
// consumption that had not reached the new primary. timeout must be below
// the client's ReadTimeout (NewRedis checks); zero or less means one
// second. Only *redis.Client and *redis.ClusterClient support it.
func WithWait(replicas int, timeout time.Duration) RedisOption {
	return redisOption(func(c *config) {
		c.waitN = replicas
		if timeout > 0 {
			c.waitTimeout = timeout
		}
	})
}
