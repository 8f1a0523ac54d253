package resultstore

import (
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// WithClockOffset adds offset() to Redis TIME in every script of the Redis
// store, so tests can move its clock forward (conformance's Advance).
func WithClockOffset(offset func() time.Duration) RedisOption {
	return redisOption(func(c *config) { c.clockOffset = offset })
}

// Keys are the Redis keys of a result key's record and its owner's index
// in s.
func Keys(s *Redis, k store.ResultKey) []string { return s.keys(k) }
