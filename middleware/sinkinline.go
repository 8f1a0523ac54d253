package middleware

import "fmt"

// SinkInline declares that the sink never blocks (a slog handler over a
// buffered writer, an in-memory counter): it is called on the execution's
// goroutine, as each event is emitted, with no worker and no queue. Within
// one execution it receives the events in order; executions call it
// concurrently, so it must be safe for concurrent use. A panic in it is
// recovered and loses that event only. Nothing is ever dropped or queued
// for it, so [Engine.Stats] counts its events delivered and none dropped;
// no bound applies, which is why it cannot be combined with [SinkTimeout]
// or [SinkQueue]. The trade is the one [Capability].Inline makes: no
// hand-off, and its time counts in the call's — a sink that does block
// slows every execution it serves. By default a sink has a worker and a
// queue of its own.
func SinkInline() SinkOption {
	return sinkOptionFunc(func(s *sinkConfig, c *config) { s.inline = true })
}

// inlineProblem is what is wrong with an inline sink given a queue or a
// bound, or "".
func (s *sinkConfig) inlineProblem() string {
	if !s.inline || !s.queued {
		return ""
	}
	return fmt.Sprintf("WithEventSink(%s): SinkInline calls the sink on the execution's goroutine, with no queue and no bound: drop SinkTimeout and SinkQueue", s.name)
}

// callInline delivers an event to an inline sink on the calling goroutine.
func (s *sinkQueue) callInline(it queued) {
	_ = s.safeCall(it) // a panicking sink loses its event, nothing more
	s.delivered.Add(1)
}
