package approvalstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// The engine-level tests: approvals requested, decided and resumed through
// middleware.Engine, with one engine per simulated server instance, each
// with its own Redis client, as a deployment has them.

const refund = "/orders.v1.Orders/Refund"

var (
	agent   = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}}
	manager = middleware.Actor{ID: "manager-bob", Tenant: "acme", Kind: "user"}
)

// newEngine returns an engine whose only capability, a refund, always needs
// a manager's approval; every call is the agent's.
func newEngine(t testing.TB, store store.ApprovalStore) *middleware.Engine {
	t.Helper()
	reg := middleware.NewRegistry().Register(refund, middleware.Capability{
		SideEffect: middleware.SideEffectExternal,
		Risk:       middleware.RiskHigh,
		Approval:   middleware.Approval{Required: true, Type: "manager"},
	})
	eng, err := middleware.New(reg,
		middleware.WithApprovalStore(store),
		middleware.WithAudience("orders"),
		middleware.WithProtoFiles(nil), // the procedure is invented: no descriptor
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func refundInput(round, n int) adapter.Input {
	return adapter.JSONInput(fmt.Appendf(nil, `{"order":%d,"round":%d,"amount":"120.00"}`, n, round))
}

// execute hands eng one refund call, as an adapter does.
func execute(ctx context.Context, eng *middleware.Engine, in adapter.Input, approvalID string, attempt func(context.Context) (any, error)) (middleware.Envelope, error) {
	_, env, err := adapter.Execute(ctx, adapter.Resolve(eng, refund), adapter.Call[any]{Input: in, ApprovalID: approvalID}, attempt)
	return env, err
}

// requestApproved asks eng for an approval of in and has a manager approve
// it, returning its id.
func requestApproved(t testing.TB, ctx context.Context, eng *middleware.Engine, in adapter.Input) string {
	t.Helper()
	env, err := execute(ctx, eng, in, "", func(context.Context) (any, error) {
		t.Error("a call without an approval must run nothing")
		return nil, nil
	})
	if middleware.CodeOf(err) != middleware.CodeApprovalRequired || env.ApprovalID == "" {
		t.Fatalf("a gated call must answer APPROVAL_REQUIRED with an id: %v, %+v", err, env)
	}
	if _, err := eng.Decide(ctx, env.ApprovalID, store.Decision{Approve: true, Approver: manager, Comment: "ok"}); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return env.ApprovalID
}

// ledger counts handler runs per approval id.
type ledger struct {
	mu   sync.Mutex
	runs map[string]int
}

func (l *ledger) handler(ctx context.Context) (any, error) {
	x, ok := middleware.ExecutionFromContext(ctx)
	if !ok || x.Approval == nil {
		return nil, fmt.Errorf("a gated handler ran without a consumed approval: %+v", x)
	}
	l.mu.Lock()
	l.runs[x.Approval.ID]++
	l.mu.Unlock()
	return "refunded", nil
}

// TestRedisEngineSingleUse races engines to resume the same approved
// records: exactly one call per record runs its handler, on any instance;
// every other call gets APPROVAL_CONSUMED. TestRedisCluster runs it on a
// Cluster too.
func TestRedisEngineSingleUse(t *testing.T) {
	srv := redistest.Start(t)
	raceEngines(t, 3, 200, func() redis.UniversalClient { return srv.Client() })
}

const (
	instances          = 8  // engines, each with its own Redis client
	workersPerInstance = 64 // goroutines per engine
	// contendersPerInstance is how many of an engine's goroutines resume each
	// record: every record is raced by instances·contendersPerInstance calls
	// from all engines at once, and every goroutine takes part in the race
	// for 1/(workersPerInstance/contendersPerInstance) of the records.
	contendersPerInstance = 8
)

func raceEngines(t *testing.T, rounds, records int, client func() redis.UniversalClient) {
	prefix := newPrefix()
	engines := make([]*middleware.Engine, instances)
	for i := range engines {
		s, err := approvalstore.NewRedis(client(), approvalstore.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		engines[i] = newEngine(t, s)
	}
	ctx := t.Context()
	for round := range rounds {
		ids := make([]string, records)
		for n := range ids {
			ids[n] = requestApproved(t, ctx, engines[0], refundInput(round, n))
		}
		l := &ledger{runs: make(map[string]int)}
		var completed, consumed atomic.Int64
		var unexpected sync.Map
		start := make(chan struct{})
		var wg sync.WaitGroup
		stride := workersPerInstance / contendersPerInstance
		for e, eng := range engines {
			for w := range workersPerInstance {
				wg.Go(func() {
					<-start
					for n := w % stride; n < records; n += stride {
						env, err := execute(ctx, eng, refundInput(round, n), ids[n], l.handler)
						switch code := middleware.CodeOf(err); {
						case err == nil && env.Status == middleware.StatusCompleted:
							completed.Add(1)
						case code == middleware.CodeApprovalConsumed:
							consumed.Add(1)
						default:
							unexpected.Store(fmt.Sprintf("engine %d worker %d record %d", e, w, n), err)
						}
					}
				})
			}
		}
		began := time.Now()
		close(start)
		wg.Wait()
		calls := int64(records * instances * contendersPerInstance)
		t.Logf("round %d: %d calls on %d records from %d engines in %v", round, calls, records, instances, time.Since(began).Round(time.Millisecond))

		unexpected.Range(func(k, v any) bool { t.Errorf("%s: %v, want success or APPROVAL_CONSUMED", k, v); return true })
		total := 0
		for n, id := range ids {
			if runs := l.runs[id]; runs != 1 {
				t.Errorf("round %d: record %d ran its handler %d times, want exactly once", round, n, runs)
			}
			total += l.runs[id]
		}
		if total != records || completed.Load() != int64(records) || completed.Load()+consumed.Load() != calls {
			t.Fatalf("round %d: %d handler runs, %d completed and %d APPROVAL_CONSUMED of %d calls; want %d runs and completions, the rest consumed",
				round, total, completed.Load(), consumed.Load(), calls, records)
		}
	}
}
