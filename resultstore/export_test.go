package resultstore

import "time"

// WithClockOffset adds offset() to Redis TIME in every script of the Redis
// store, so tests can move its clock forward (conformance's Advance).
func WithClockOffset(offset func() time.Duration) RedisOption {
	return redisOption(func(c *config) { c.clockOffset = offset })
}

// RecordKey is the Redis key of a result key in s.
func RecordKey(s *Redis, key string) string { return s.recordKey(key) }
