package bench

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// TestScale runs 10,000 governed executions at once with per-attempt
// timeouts: a third succeed, a third time out honouring their context, and
// a third time out ignoring it (abandoned, returning late). It reports the
// peak goroutine count and checks that goroutines and heap return to their
// baseline once every handler has returned.
//
// The baseline is taken after a first round, with the runtime's cache of
// goroutine descriptors primed: the Go runtime keeps the descriptors of
// exited goroutines for reuse (a few MiB for tens of thousands), which is
// the runtime's and not growth.
func TestScale(t *testing.T) {
	const executions = 10_000
	eng, err := middleware.New(middleware.NewRegistry().Register(procRead, middleware.Capability{
		SideEffect: middleware.SideEffectRead, Timeout: 100 * time.Millisecond}),
		middleware.WithProtoFiles(nil), middleware.WithDefaults(middleware.Defaults{MaxAbandoned: executions}))
	if err != nil {
		t.Fatal(err)
	}
	startGoroutines, startHeap := settle()
	primeGoroutineCache(3 * executions)
	round(t, eng, executions)
	baseGoroutines, baseHeap := settle()
	t.Logf("first round: goroutines %d → %d, heap %d KiB → %d KiB (the runtime's goroutine cache)", startGoroutines, baseGoroutines, startHeap>>10, baseHeap>>10)
	round(t, eng, executions)
	goroutines, heap := settle()
	t.Logf("second round: goroutines %d → %d, heap %d KiB → %d KiB", baseGoroutines, goroutines, baseHeap>>10, heap>>10)
	if goroutines > baseGoroutines+5 {
		t.Errorf("goroutines did not return to baseline: %d → %d", baseGoroutines, goroutines)
	}
	if heap > baseHeap+1<<20 {
		t.Errorf("heap grew: %d KiB → %d KiB", baseHeap>>10, heap>>10)
	}
}

func round(t *testing.T, eng *middleware.Engine, executions int) {
	var peak atomic.Int64
	var running atomic.Int64
	late := make(chan struct{})
	var returned sync.WaitGroup
	var wg sync.WaitGroup
	codes := make([]middleware.Code, executions)
	route := adapter.Resolve(eng, procRead)
	for i := range executions {
		wg.Go(func() {
			_, env, _ := adapter.Execute(context.Background(), route, adapter.Call[any]{}, func(ctx context.Context) (any, error) {
				if n := running.Add(1); n > peak.Load() {
					peak.Store(n) // a racy maximum is enough for a report
				}
				defer running.Add(-1)
				switch i % 3 {
				case 1:
					<-ctx.Done()
					return nil, ctx.Err()
				case 2:
					returned.Add(1)
					defer returned.Done()
					<-late // ignores its context until the test lets it go
				}
				return nil, nil
			})
			if env.Error != nil {
				codes[i] = env.Error.Code
			}
		})
	}
	wg.Wait()
	peakGoroutines := runtime.NumGoroutine()
	close(late)
	returned.Wait()

	timeouts := 0
	for i, c := range codes {
		switch {
		case c == middleware.CodeTimeout:
			timeouts++
		case c != middleware.CodeOK:
			t.Fatalf("execution %d ended %s, want OK or TIMEOUT", i, c)
		}
	}
	// Every handler that waits for its context times out; a few quick ones
	// may too, when 10,000 goroutines share two cores for 100ms.
	if want := 2 * executions / 3; timeouts < want {
		t.Errorf("%d executions timed out, want at least %d", timeouts, want)
	}
	t.Logf("%d executions: peak %d handlers running at once, %d goroutines alive with the abandoned attempts", executions, peak.Load(), peakGoroutines)
}

// primeGoroutineCache has n goroutines alive at once, so that the runtime's
// cache of goroutine descriptors is at least that large before measuring.
func primeGoroutineCache(n int) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range n {
		wg.Go(func() { <-release })
	}
	close(release)
	wg.Wait()
}

// settle waits for goroutines that are finishing to exit, collects garbage
// and returns the goroutine count and live heap.
func settle() (int, uint64) {
	var ms runtime.MemStats
	n := runtime.NumGoroutine()
	for range 50 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			break
		} else {
			n = m
		}
	}
	runtime.ReadMemStats(&ms)
	return n, ms.HeapAlloc
}
