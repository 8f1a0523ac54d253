package budgetstore

import "time"

// MemoryOption configures [NewMemory]. Each option has the type of the
// one store that understands it, so that passing a Redis option to
// NewMemory, say, does not compile instead of being ignored.
type MemoryOption interface{ applyMemory(*config) }

// RedisOption configures [NewRedis].
type RedisOption interface{ applyRedis(*config) }

type memoryOption func(*config)

func (f memoryOption) applyMemory(c *config) { f(c) }

type redisOption func(*config)

func (f redisOption) applyRedis(c *config) { f(c) }

type config struct {
	now func() time.Time
	// Redis only.
	prefix      string
	clockOffset func() time.Duration
	pinned      func() time.Time // tests only: replaces Redis TIME
}

func defaultConfig() config {
	return config{now: time.Now, prefix: "agentsafe:bgt"}
}

// WithClock sets the memory store's clock (default time.Now), for tests
// that move time. The Redis store always decides with Redis TIME.
func WithClock(now func() time.Time) MemoryOption {
	return memoryOption(func(c *config) {
		if now != nil {
			c.now = now
		}
	})
}

// WithKeyPrefix sets the prefix of the Redis store's keys; the default is
// "agentsafe:bgt". Stores that share a Redis but not their budgets (two
// applications, or tests) use different prefixes. It must not contain
// braces: every budget key is a hash tag of its own.
func WithKeyPrefix(prefix string) RedisOption {
	return redisOption(func(c *config) { c.prefix = prefix })
}
