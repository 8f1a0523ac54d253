package middleware_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
)

// TestStressExactlyOneEnvelopeAndFinalEvent races thousands of executions
// with random timeouts, cancellations, panics, late results and retries, and
// checks that each ends in exactly one envelope and one final event that
// agree with each other.
func TestStressExactlyOneEnvelopeAndFinalEvent(t *testing.T) {
	const executions = 2000
	inBubble(t, func(t *testing.T) {
		rec := &agentsafetest.Recorder{}
		reg := middleware.NewRegistry().
			Register(procRead, read(2, 20*time.Millisecond)).
			Register(procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: 20 * time.Millisecond}).
			Register(procIdemWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: 20 * time.Millisecond, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}})
		eng, err := middleware.New(reg, middleware.WithEventSink(rec, middleware.SinkQueue(1<<16)), middleware.WithDefaults(middleware.Defaults{MaxAbandoned: executions * 3}), middleware.WithProtoFiles(nil))
		if err != nil {
			t.Fatal(err)
		}
		procs := []string{procRead, procWrite, procIdemWrite}
		envs := make([]middleware.Envelope, executions)
		var wg sync.WaitGroup
		for i := range executions {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			wg.Go(func() {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if rng.IntN(4) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(40))*time.Millisecond, cancel)
				}
				_, envs[i], _ = execute(eng, ctx, call{Procedure: procs[rng.IntN(len(procs))]}, func(ctx context.Context) (any, error) {
					switch rng.IntN(6) {
					case 0:
						return "ok", nil
					case 1:
						return nil, errTransient
					case 2:
						time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // ignores its context
						return "late", nil
					case 3:
						<-ctx.Done()
						return nil, ctx.Err()
					case 4:
						panic("boom")
					default:
						return nil, errors.New("permanent")
					}
				})
			})
		}
		wg.Wait()
		time.Sleep(time.Second) // every abandoned handler has returned by now
		synctest.Wait()

		finals := make(map[string][]middleware.Event)
		for _, e := range rec.Events() {
			if e.Type.Final() {
				finals[e.ExecutionID] = append(finals[e.ExecutionID], e)
			}
		}
		seen := make(map[string]bool)
		for _, env := range envs {
			if env.ExecutionID == "" || seen[env.ExecutionID] {
				t.Fatalf("envelope without a unique execution id: %+v", env)
			}
			seen[env.ExecutionID] = true
			f := finals[env.ExecutionID]
			if len(f) != 1 {
				t.Fatalf("execution %s has %d final events, want exactly 1", env.ExecutionID, len(f))
			}
			code := middleware.CodeOK
			if env.Error != nil {
				code = env.Error.Code
			}
			if f[0].Code != code || f[0].Attempts != env.Attempts {
				t.Fatalf("final event %+v disagrees with envelope %+v", f[0], env)
			}
			evs := rec.Execution(env.ExecutionID)
			i := len(evs) - 1
			for evs[i].Type == middleware.EventAbandonedResult {
				i--
			}
			if !evs[i].Type.Final() {
				t.Fatalf("execution %s: an event followed its final event: %v", env.ExecutionID, evs)
			}
		}
		if len(finals) != executions {
			t.Fatalf("%d executions produced final events, want %d", len(finals), executions)
		}
	})
}
