package budgetstore

import "time"

// WithClockOffset adds offset() to Redis TIME in every script of the Redis
// store, so tests can move its clock forward (conformance's Advance).
func WithClockOffset(offset func() time.Duration) RedisOption {
	return redisOption(func(c *config) { c.clockOffset = offset })
}

// WithPinnedClock makes every script of the Redis store decide at now()
// instead of Redis TIME, so tests can check the window's edges to the
// microsecond (real time passes between a test's steps).
func WithPinnedClock(now func() time.Time) RedisOption {
	return redisOption(func(c *config) { c.pinned = now })
}

// Keys are the Redis keys of a budget key in s.
func Keys(s *Redis, key string) []string { return s.keys(key) }

// Held is how many executions the memory store indexes for key, and how
// many reservations it keeps for it.
func Held(m *Memory, key string) (held, ring int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.keys[key]; l != nil {
		return len(l.held), l.n
	}
	return 0, 0
}
