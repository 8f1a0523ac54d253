// Package testenv holds what this module's tests share about their
// environment.
package testenv

import "go.uber.org/goleak"

// IgnoreIdleSinkWorkers is the goleak option every test binary of the
// module uses: an engine's sink worker waits about a second for events
// before it exits, so one may still be idle when the tests end. A worker
// stuck in a sink call is not idle, and is still reported.
func IgnoreIdleSinkWorkers() goleak.Option {
	return goleak.IgnoreTopFunction("github.com/agentsafe/agentsafe/middleware.(*sinkQueue).work")
}
