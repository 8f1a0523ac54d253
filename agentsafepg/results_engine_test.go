package agentsafepg_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// The engine-level tests of the result store: calls with a caller's
// Idempotency-Key made through middleware.Engine, one engine per simulated
// server instance, each with its own pool.

var sealKey = middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef0123456789abcdef")}

// newKeyedEngine returns an engine whose only capability is an external
// refund without approval; every call is the agent's, and results are
// kept in s.
func newKeyedEngine(t testing.TB, s store.ResultStore) *middleware.Engine {
	t.Helper()
	reg := middleware.NewRegistry().Register(refund, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: 5 * time.Second})
	eng, err := middleware.New(reg,
		middleware.WithResultStore(s),
		middleware.WithResultKey(sealKey),
		middleware.WithAudience("orders"),
		middleware.WithProtoFiles(nil), // the procedure is invented: no descriptor
		middleware.WithLogger(slog.New(slog.DiscardHandler)),
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// stringCodec stores the handler's string responses.
type stringCodec struct{}

func (stringCodec) Marshal(v any) ([]byte, error) {
	s, _ := v.(string)
	return []byte(s), nil
}

func (stringCodec) Unmarshal(b []byte) (any, error) { return string(b), nil }

// executeKeyed hands eng one refund call with the caller's key, as an
// adapter does.
func executeKeyed(ctx context.Context, eng *middleware.Engine, in adapter.Input, key string, attempt func(context.Context) (any, error)) (any, middleware.Envelope, error) {
	return adapter.Execute(ctx, adapter.Resolve(eng, refund), adapter.Call[any]{Input: in, IdempotencyKey: key, Surface: adapter.SurfaceRPC, Codec: stringCodec{}}, attempt)
}

// keyLedger counts handler runs per caller key, and answers with the
// execution that ran.
type keyLedger struct {
	mu   sync.Mutex
	runs map[string][]string // caller key → executions
}

func (l *keyLedger) handler(key string) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		l.mu.Lock()
		l.runs[key] = append(l.runs[key], x.ID)
		l.mu.Unlock()
		return "refunded by " + x.ID, nil
	}
}

// TestEngineRunsEachKeyOnce races 8 engines, each with its own pool, 64
// goroutines each, sending the same caller key for each of 200 distinct
// operations: exactly 200 handler runs; every other call is a replay of
// its operation's run, or IDEMPOTENCY_IN_FLIGHT.
func TestEngineRunsEachKeyOnce(t *testing.T) {
	url := migratedURL(t)
	engines := make([]*middleware.Engine, instances)
	for i := range engines {
		pool := newPool(t, url, func(c *pgxpool.Config) { c.MaxConns = 8 })
		engines[i] = newKeyedEngine(t, openResults(t, pool))
	}
	ctx := t.Context()
	for round := range 2 {
		l := &keyLedger{runs: make(map[string][]string)}
		var ran, replayed, inFlight atomic.Int64
		var unexpected sync.Map
		answers := make([]sync.Map, raceRecords) // per operation: who → the response it was answered with
		start := make(chan struct{})
		var wg sync.WaitGroup
		stride := workersPerInstance / contendersPerInstance
		for e, eng := range engines {
			for w := range workersPerInstance {
				wg.Go(func() {
					<-start
					for n := w % stride; n < raceRecords; n += stride {
						key := fmt.Sprintf("refund-%d-%d", round, n)
						v, env, err := executeKeyed(ctx, eng, refundInput(round, n), key, l.handler(key))
						switch code := middleware.CodeOf(err); {
						case err == nil && env.Replayed:
							replayed.Add(1)
							answers[n].Store(fmt.Sprintf("replay %d/%d", e, w), v)
						case err == nil:
							ran.Add(1)
							answers[n].Store(env.ExecutionID, v)
						case code == middleware.CodeIdempotencyInFlight:
							inFlight.Add(1)
						default:
							unexpected.Store(fmt.Sprintf("engine %d worker %d operation %d", e, w, n), err)
						}
					}
				})
			}
		}
		began := time.Now()
		close(start)
		wg.Wait()
		calls := int64(raceRecords * instances * contendersPerInstance)
		t.Logf("round %d: %d calls on %d keys from %d engines × %d goroutines in %v: %d ran, %d replayed, %d IDEMPOTENCY_IN_FLIGHT",
			round, calls, raceRecords, instances, workersPerInstance, time.Since(began).Round(time.Millisecond), ran.Load(), replayed.Load(), inFlight.Load())

		unexpected.Range(func(k, v any) bool {
			t.Errorf("%s: %v, want a run, a replay or IDEMPOTENCY_IN_FLIGHT", k, v)
			return true
		})
		total := 0
		for n := range raceRecords {
			runs := l.runs[fmt.Sprintf("refund-%d-%d", round, n)]
			total += len(runs)
			if len(runs) != 1 {
				t.Errorf("round %d: operation %d ran %d times (%v), want exactly once", round, n, len(runs), runs)
				continue
			}
			want := "refunded by " + runs[0]
			answers[n].Range(func(k, v any) bool {
				if v != want {
					t.Errorf("round %d: operation %d answered %v (%s), want its one run's %q", round, n, v, k, want)
				}
				return true
			})
		}
		if total != raceRecords || ran.Load() != raceRecords || ran.Load()+replayed.Load()+inFlight.Load() != calls {
			t.Fatalf("round %d: %d handler runs and %d calls that ran, of %d calls; want exactly %d runs", round, total, ran.Load(), calls, raceRecords)
		}
	}
}
