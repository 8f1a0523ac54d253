package agentsafetest

import (
	"testing"
	"testing/synctest"
	"time"
)

// workersIdle is longer than an engine's sink workers wait for events
// before they exit.
const workersIdle = 2 * time.Second

// Test runs f in a testing/synctest bubble, like synctest.Test, for tests
// of code governed by an engine built inside the bubble: before the bubble
// ends it lets the fake clock run past the second an idle sink worker
// waits before it exits (time stops once the bubble's root goroutine
// returns, so the workers must be gone by then). It costs no real time.
func Test(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		t.Cleanup(func() { time.Sleep(workersIdle) })
		f(t)
	})
}
