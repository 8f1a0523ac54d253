// Package testenv holds what this module's tests share about their
// environment.
package testenv

import "go.uber.org/goleak"

// IgnoreIdleSinkWorkers is the goleak option every test binary of the
// module uses: an engine's workers (its sinks', its attempts') wait about a
// second for work before they exit, so some may still be idle when the
// tests end. Idle, they are parked in one function of the engine's; a
// worker stuck in a sink call or a handler is not idle, and is still
// reported.
func IgnoreIdleSinkWorkers() goleak.Option {
	return goleak.IgnoreTopFunction("github.com/agentsafe/agentsafe/middleware.park")
}
