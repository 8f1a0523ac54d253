package agentsafeotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafeotel"
	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

const (
	procRead   = "/test.v1.Svc/Read"
	procRefund = "/orders.v1.Orders/Refund"
)

// secret is in every input: no span, event or metric may carry it.
const secret = "4111-1111-1111-1111"

var input = adapter.JSONInput([]byte(`{"order":"42","card":"` + secret + `"}`))

// otelFixture is an engine instrumented into an in-memory exporter and a
// manual metric reader.
type otelFixture struct {
	t      *testing.T
	eng    *middleware.Engine
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	store  *approvalstore.Memory
	clock  *clock
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type actorKey struct{}

func as(ctx context.Context, a middleware.Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

func actorOf(ctx context.Context) (middleware.Actor, error) {
	a, _ := ctx.Value(actorKey{}).(middleware.Actor)
	return a, nil
}

var (
	agent = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent"}
	boss  = middleware.Actor{ID: "manager-bob", Tenant: "acme", Kind: "user"}
)

// execute runs one governed unary call of proc, as an adapter does.
func execute(ctx context.Context, eng *middleware.Engine, proc string, c adapter.Call[any], attempt func(context.Context) (any, error)) (any, middleware.Envelope, error) {
	return adapter.Execute(ctx, adapter.Resolve(eng, proc), c, attempt)
}

func newOtelFixture(t *testing.T, reg *middleware.Registry, opts ...agentsafeotel.Option) *otelFixture {
	t.Helper()
	f := &otelFixture{t: t, spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader(), clock: &clock{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}}
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(f.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	t.Cleanup(func() {
		_ = f.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	inst, err := agentsafeotel.New(append([]agentsafeotel.Option{agentsafeotel.WithTracerProvider(f.tp), agentsafeotel.WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatalf("agentsafeotel.New: %v", err)
	}
	f.store = approvalstore.NewMemory(approvalstore.WithClock(f.clock.Now))
	f.eng, err = middleware.New(reg, inst.EngineOption(), middleware.WithApprovalStore(f.store), middleware.WithActor(actorOf), middleware.WithProtoFiles(nil),
		middleware.WithBudgetStore(budgetstore.NewMemory(budgetstore.WithClock(f.clock.Now))))
	if err != nil {
		t.Fatalf("middleware.New: %v", err)
	}
	return f
}

// executions returns the execution spans, oldest first, each with its
// attempt spans.
func (f *otelFixture) execution(executionID string) (tracetest.SpanStub, []tracetest.SpanStub) {
	f.t.Helper()
	var exe *tracetest.SpanStub
	all := f.spans.GetSpans()
	for i, s := range all {
		if strings.HasPrefix(s.Name, "agentsafe ") && attrs(s)["agentsafe.execution_id"].AsString() == executionID {
			exe = &all[i]
		}
	}
	if exe == nil {
		f.t.Fatalf("no execution span for %s among %d spans", executionID, len(all))
	}
	var attempts []tracetest.SpanStub
	for _, s := range all {
		if s.Parent.SpanID() == exe.SpanContext.SpanID() && s.Name == "agentsafe.attempt" {
			attempts = append(attempts, s)
		}
	}
	slices.SortFunc(attempts, func(a, b tracetest.SpanStub) int {
		return int(attrs(a)["agentsafe.attempt"].AsInt64() - attrs(b)["agentsafe.attempt"].AsInt64())
	})
	return *exe, attempts
}

func attrs(s tracetest.SpanStub) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// want checks the span carries each attribute with the value given (an
// attribute.Value) or, for nil, that it does not carry it at all.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	got := attrs(s)
	for k, w := range want {
		g, ok := got[k]
		switch {
		case w == nil && ok:
			t.Errorf("span %q carries %s=%s; it must not", s.Name, k, g.Emit())
		case w == nil:
		case !ok:
			t.Errorf("span %q lacks %s", s.Name, k)
		case g.Emit() != fmt.Sprint(w):
			t.Errorf("span %q: %s=%s, want %v", s.Name, k, g.Emit(), w)
		}
	}
}

func noPayload(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.Emit(), secret) {
				t.Errorf("span %q attribute %s carries the input", s.Name, kv.Key)
			}
		}
		for _, ev := range s.Events {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.Emit(), secret) {
					t.Errorf("span %q event %s attribute %s carries the input", s.Name, ev.Name, kv.Key)
				}
			}
		}
	}
}

// metrics collects every data point, keyed by metric name.
func (f *otelFixture) metrics() map[string]metricdata.Aggregation {
	f.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		f.t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != agentsafeotel.ScopeName {
			f.t.Errorf("metrics under scope %q, want %q", sm.Scope.Name, agentsafeotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sum returns the value of the counter point with exactly these attributes.
func sum(t *testing.T, ms map[string]metricdata.Aggregation, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	s, ok := ms[name].(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("metric %s is %T, want an int64 sum (have %v)", name, ms[name], keys(ms))
	}
	want := attribute.NewSet(kv...)
	for _, p := range s.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Value
		}
	}
	return 0
}

func histogram[N int64 | float64](t *testing.T, ms map[string]metricdata.Aggregation, name string, kv ...attribute.KeyValue) (count uint64, total N) {
	t.Helper()
	h, ok := ms[name].(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("metric %s is %T (have %v)", name, ms[name], keys(ms))
	}
	want := attribute.NewSet(kv...)
	for _, p := range h.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Count, p.Sum
		}
	}
	return 0, 0
}

func keys(m map[string]metricdata.Aggregation) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func readCap(retries int, timeout time.Duration) middleware.Capability {
	return middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: timeout, Retry: middleware.Retry{MaxRetries: retries, Backoff: 10 * time.Millisecond}}
}

var method = attribute.String("rpc.method", "test.v1.Svc/Read")

func TestSuccessSpanTree(t *testing.T) {
	f := newOtelFixture(t, middleware.NewRegistry().Register(procRead, readCap(1, time.Second)))
	_, env, err := execute(as(t.Context(), agent), f.eng, procRead, adapter.Call[any]{Input: input}, func(ctx context.Context) (any, error) {
		_, span := f.tp.Tracer("app").Start(ctx, "db.query")
		span.End()
		return "ok", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	exe, attempts := f.execution(env.ExecutionID)
	if exe.Name != "agentsafe test.v1.Svc/Read" || exe.SpanKind != trace.SpanKindInternal || exe.Status.Code != codes.Unset {
		t.Errorf("execution span %q kind %s status %v", exe.Name, exe.SpanKind, exe.Status)
	}
	digest, _ := input.Digest(procRead)
	wantAttrs(t, exe, map[string]any{
		"rpc.method": "test.v1.Svc/Read", "agentsafe.execution_id": env.ExecutionID, "agentsafe.side_effect": "read",
		"agentsafe.risk": "low", "agentsafe.input_digest": digest, "agentsafe.actor.id": agent.ID,
		"agentsafe.code": "OK", "agentsafe.status": "completed", "agentsafe.attempts": 1,
		"error.type": nil, "agentsafe.approval_id": nil, "rpc.system.name": nil,
	})
	if len(attempts) != 1 {
		t.Fatalf("%d attempt spans under the execution, want 1", len(attempts))
	}
	wantAttrs(t, attempts[0], map[string]any{"agentsafe.attempt": 1, "agentsafe.code": "OK", "agentsafe.execution_id": env.ExecutionID, "error.type": nil, "agentsafe.retryable": nil})
	var handler *tracetest.SpanStub
	for _, s := range f.spans.GetSpans() {
		if s.Name == "db.query" {
			handler = &s
		}
	}
	if handler == nil || handler.Parent.SpanID() != attempts[0].SpanContext.SpanID() {
		t.Errorf("the handler's own span must nest under its attempt's span (SPEC §8)")
	}
	noPayload(t, f.spans.GetSpans())

	ms := f.metrics()
	if got := sum(t, ms, "agentsafe.executions", method, attribute.String("agentsafe.code", "OK")); got != 1 {
		t.Errorf("agentsafe.executions{OK} = %d, want 1", got)
	}
	if n, total := histogram[int64](t, ms, "agentsafe.execution.attempts", method); n != 1 || total != 1 {
		t.Errorf("agentsafe.execution.attempts: %d executions with %d attempts, want 1 and 1", n, total)
	}
	if n, _ := histogram[float64](t, ms, "agentsafe.execution.duration", method, attribute.String("agentsafe.code", "OK")); n != 1 {
		t.Errorf("agentsafe.execution.duration recorded %d times, want 1", n)
	}
}

func TestRetrySpanTree(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		f := newOtelFixture(t, middleware.NewRegistry().Register(procRead, readCap(2, time.Second)))
		n := 0
		_, env, err := execute(t.Context(), f.eng, procRead, adapter.Call[any]{}, func(ctx context.Context) (any, error) {
			if n++; n == 1 {
				return nil, middleware.Retryable(errors.New("backend unavailable"))
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		exe, attempts := f.execution(env.ExecutionID)
		wantAttrs(t, exe, map[string]any{"agentsafe.code": "OK", "agentsafe.attempts": 2})
		if len(attempts) != 2 {
			t.Fatalf("%d attempt spans, want 2", len(attempts))
		}
		wantAttrs(t, attempts[0], map[string]any{"agentsafe.attempt": 1, "agentsafe.code": "EXECUTION_FAILED", "agentsafe.retryable": true, "error.type": "EXECUTION_FAILED"})
		if attempts[0].Status.Code != codes.Error {
			t.Errorf("a failed attempt's span status is %v, want Error", attempts[0].Status)
		}
		wantAttrs(t, attempts[1], map[string]any{"agentsafe.attempt": 2, "agentsafe.code": "OK", "error.type": nil})
		if gap := attempts[1].StartTime.Sub(attempts[0].EndTime); gap != 10*time.Millisecond {
			t.Errorf("attempt 2 started %v after attempt 1 ended, want the backoff, 10ms", gap)
		}
		ms := f.metrics()
		if got := sum(t, ms, "agentsafe.retries", method, attribute.String("agentsafe.previous_code", "EXECUTION_FAILED")); got != 1 {
			t.Errorf("agentsafe.retries = %d, want 1", got)
		}
		if _, total := histogram[int64](t, ms, "agentsafe.execution.attempts", method); total != 2 {
			t.Errorf("agentsafe.execution.attempts sum %d, want 2", total)
		}
	})
}

func TestTimeoutSpanTree(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		const proc = "/payments.v1.Payments/Charge"
		f := newOtelFixture(t, middleware.NewRegistry().Register(proc, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: 50 * time.Millisecond}))
		release := make(chan struct{})
		_, env, err := execute(t.Context(), f.eng, proc, adapter.Call[any]{}, func(ctx context.Context) (any, error) {
			<-release // ignores its context: abandoned at the deadline
			return "charged", nil
		})
		if middleware.CodeOf(err) != middleware.CodeTimeout {
			t.Fatalf("code %s, want TIMEOUT", middleware.CodeOf(err))
		}
		exe, attempts := f.execution(env.ExecutionID)
		wantAttrs(t, exe, map[string]any{"agentsafe.code": "TIMEOUT", "agentsafe.status": "cancelled", "error.type": "TIMEOUT",
			"agentsafe.retryable": false, "agentsafe.side_effect": "external", "rpc.method": "payments.v1.Payments/Charge"})
		if exe.Status.Code != codes.Error || exe.Status.Description != "TIMEOUT" {
			t.Errorf("execution span status %v, want Error TIMEOUT", exe.Status)
		}
		if len(attempts) != 1 {
			t.Fatalf("%d attempt spans, want 1", len(attempts))
		}
		wantAttrs(t, attempts[0], map[string]any{"agentsafe.code": "TIMEOUT", "agentsafe.retryable": true, "agentsafe.abandoned": true, "error.type": "TIMEOUT"})
		if d := attempts[0].EndTime.Sub(attempts[0].StartTime); d != 50*time.Millisecond {
			t.Errorf("the attempt span lasted %v, want its timeout, 50ms", d)
		}

		close(release) // the late result lands
		synctest.Wait()
		ms := f.metrics()
		charge := attribute.String("rpc.method", "payments.v1.Payments/Charge")
		if got := sum(t, ms, "agentsafe.abandoned_results", charge, attribute.Bool("agentsafe.succeeded", true)); got != 1 {
			t.Errorf("agentsafe.abandoned_results{succeeded} = %d, want 1: an effect landed after TIMEOUT", got)
		}
		if got := sum(t, ms, "agentsafe.executions", charge, attribute.String("agentsafe.code", "TIMEOUT")); got != 1 {
			t.Errorf("agentsafe.executions{TIMEOUT} = %d, want 1", got)
		}
	})
}

func eventNames(s tracetest.SpanStub) []string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Name)
	}
	return out
}

func eventAttrs(s tracetest.SpanStub, name string) map[string]string {
	for _, e := range s.Events {
		if e.Name == name {
			m := map[string]string{}
			for _, kv := range e.Attributes {
				m[string(kv.Key)] = kv.Value.Emit()
			}
			return m
		}
	}
	return nil
}

func TestApprovalFlow(t *testing.T) {
	f := newOtelFixture(t, middleware.NewRegistry().Register(procRefund, middleware.Capability{
		SideEffect: middleware.SideEffectWrite, Risk: middleware.RiskHigh, Approval: middleware.Approval{Required: true, Type: "manager"},
	}), agentsafeotel.WithRPCSystem("connectrpc"))
	runs := 0
	call := func(approvalID string) middleware.Envelope {
		_, env, _ := execute(as(t.Context(), agent), f.eng, procRefund, adapter.Call[any]{Input: input, ApprovalID: approvalID}, func(context.Context) (any, error) {
			runs++
			return nil, nil
		})
		return env
	}

	// The request: an execution span with the approval_requested event and
	// no attempt.
	req := call("")
	exe, attempts := f.execution(req.ExecutionID)
	if len(attempts) != 0 || req.Error == nil || req.Error.Code != middleware.CodeApprovalRequired {
		t.Fatalf("request: %d attempts, envelope %+v", len(attempts), req)
	}
	wantAttrs(t, exe, map[string]any{"agentsafe.code": "APPROVAL_REQUIRED", "agentsafe.status": "approval_required", "agentsafe.approval_id": req.ApprovalID,
		"agentsafe.attempts": 0, "rpc.system.name": "connectrpc", "agentsafe.risk": "high", "error.type": nil})
	if exe.Status.Code != codes.Unset {
		t.Errorf("an approval request is not an error: span status %v", exe.Status)
	}
	if got := eventNames(exe); !slices.Equal(got, []string{"capability.approval_requested"}) {
		t.Errorf("request span events %q", got)
	}
	if ev := eventAttrs(exe, "capability.approval_requested"); ev["agentsafe.approval_id"] != req.ApprovalID || ev["agentsafe.reason"] == "" {
		t.Errorf("approval_requested event attributes %v", ev)
	}

	// The decision, inside the approver's own request span.
	f.clock.advance(90 * time.Second)
	ctx, decideSpan := f.tp.Tracer("console").Start(t.Context(), "POST /api/approvals/{id}/decision")
	if _, err := f.eng.Decide(ctx, req.ApprovalID, store.Decision{Approve: true, Approver: boss, Comment: "customer called; " + secret}); err != nil {
		t.Fatal(err)
	}
	decideSpan.End()
	var decided tracetest.SpanStub
	for _, s := range f.spans.GetSpans() {
		if s.Name == "POST /api/approvals/{id}/decision" {
			decided = s
		}
	}
	if ev := eventAttrs(decided, "capability.approved"); ev["agentsafe.approval_id"] != req.ApprovalID || ev["agentsafe.approver.id"] != boss.ID || ev["agentsafe.execution_id"] != req.ExecutionID {
		t.Errorf("the decider's span lacks a capability.approved event naming approval, approver and requesting execution: %v", ev)
	}

	// The resume: approval_consumed on the execution span, one attempt.
	res := call(req.ApprovalID)
	exe, attempts = f.execution(res.ExecutionID)
	if len(attempts) != 1 || runs != 1 {
		t.Fatalf("resume: %d attempt spans, %d runs; want 1 and 1", len(attempts), runs)
	}
	wantAttrs(t, exe, map[string]any{"agentsafe.code": "OK", "agentsafe.approval_id": req.ApprovalID, "agentsafe.attempts": 1})
	if ev := eventAttrs(exe, "capability.approval_consumed"); ev["agentsafe.approver.id"] != boss.ID || ev["agentsafe.approval_id"] != req.ApprovalID {
		t.Errorf("resume span events %q, approval_consumed %v", eventNames(exe), ev)
	}

	// A second resume is denied: the span says why.
	again := call(req.ApprovalID)
	exe, attempts = f.execution(again.ExecutionID)
	if len(attempts) != 0 || runs != 1 {
		t.Fatalf("a second resume ran: %d attempts, %d runs", len(attempts), runs)
	}
	if ev := eventAttrs(exe, "capability.approval_denied"); ev["agentsafe.code"] != "APPROVAL_CONSUMED" {
		t.Errorf("second resume: approval_denied event %v", ev)
	}
	wantAttrs(t, exe, map[string]any{"agentsafe.code": "APPROVAL_CONSUMED", "error.type": "APPROVAL_CONSUMED", "agentsafe.status": "failed"})
	noPayload(t, f.spans.GetSpans())

	ms := f.metrics()
	refund := attribute.String("rpc.method", "orders.v1.Orders/Refund")
	system := attribute.String("rpc.system.name", "connectrpc")
	if n, total := histogram[float64](t, ms, "agentsafe.approval.wait", system, refund, attribute.String("agentsafe.decision", "approved")); n != 1 || total != 90 {
		t.Errorf("agentsafe.approval.wait: %d decisions totalling %vs, want 1 of 90s", n, total)
	}
	for code, want := range map[string]int64{"APPROVAL_REQUIRED": 1, "OK": 1, "APPROVAL_CONSUMED": 1} {
		if got := sum(t, ms, "agentsafe.executions", system, refund, attribute.String("agentsafe.code", code)); got != want {
			t.Errorf("agentsafe.executions{%s} = %d, want %d", code, got, want)
		}
	}
	if n, _ := histogram[int64](t, ms, "agentsafe.execution.attempts", system, refund); n != 1 {
		t.Errorf("agentsafe.execution.attempts recorded %d executions, want only the one that ran", n)
	}
}

// TestBudgetSpentAndLimit: a call that reserves on a budget records what
// the window holds and the limit as gauges, by budget, and on its span; a
// call over the budget is counted and gets a span event saying why.
func TestBudgetSpentAndLimit(t *testing.T) {
	f := newOtelFixture(t, middleware.NewRegistry().Register(procRefund, middleware.Capability{SideEffect: middleware.SideEffectWrite,
		Budgets: []middleware.Budget{{Name: "refunds", Limit: 500, Window: time.Hour, Per: "actor", Amount: "/amount"}}}))
	call := func(amount int) middleware.Envelope {
		in := adapter.JSONInput(fmt.Appendf(nil, `{"amount":%d,"card":"%s"}`, amount, secret))
		_, env, _ := execute(as(t.Context(), agent), f.eng, procRefund, adapter.Call[any]{Input: in}, func(context.Context) (any, error) { return nil, nil })
		return env
	}
	ok := call(450)
	exe, _ := f.execution(ok.ExecutionID)
	if ev := eventAttrs(exe, "capability.started"); ev["agentsafe.budget"] != "refunds" || ev["agentsafe.budget.spent"] != "450" || ev["agentsafe.budget.limit"] != "500" || ev["agentsafe.budget.amount"] != "450" {
		t.Errorf("the started span event: %v", ev)
	}
	refunds := []attribute.KeyValue{attribute.String("rpc.method", "orders.v1.Orders/Refund"), attribute.String("agentsafe.budget", "refunds")}
	ms := f.metrics()
	if got := gauge(t, ms, "agentsafe.budget.spent", refunds...); got != 450 {
		t.Errorf("agentsafe.budget.spent = %d, want 450", got)
	}
	if got := gauge(t, ms, "agentsafe.budget.limit", refunds...); got != 500 {
		t.Errorf("agentsafe.budget.limit = %d, want 500", got)
	}

	refused := call(100)
	if refused.Error == nil || refused.Error.Code != middleware.CodeBudgetExceeded {
		t.Fatalf("over the budget: %+v", refused)
	}
	exe, _ = f.execution(refused.ExecutionID)
	if ev := eventAttrs(exe, "capability.budget_exceeded"); ev["agentsafe.budget"] != "refunds" || ev["agentsafe.budget.amount"] != "100" ||
		ev["agentsafe.budget.spent"] != "450" || ev["agentsafe.retry_after"] != "3600" {
		t.Errorf("the budget_exceeded span event: %v", ev)
	}
	ms = f.metrics()
	if got := sum(t, ms, "agentsafe.budget.exceeded", refunds...); got != 1 {
		t.Errorf("agentsafe.budget.exceeded = %d, want 1", got)
	}
	noPayload(t, f.spans.GetSpans())
}

// gauge returns the value of the gauge point with exactly these attributes.
func gauge(t *testing.T, ms map[string]metricdata.Aggregation, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	g, ok := ms[name].(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("metric %s is %T, want an int64 gauge (have %v)", name, ms[name], keys(ms))
	}
	want := attribute.NewSet(kv...)
	for _, p := range g.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Value
		}
	}
	return -1
}

func TestStreamSpan(t *testing.T) {
	f := newOtelFixture(t, middleware.NewRegistry().Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true}))
	env, err := adapter.ExecuteStream(t.Context(), adapter.Resolve(f.eng, procRead), adapter.Call[struct{}]{}, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	exe, attempts := f.execution(env.ExecutionID)
	wantAttrs(t, exe, map[string]any{"agentsafe.streaming": true, "agentsafe.code": "OK"})
	if len(attempts) != 1 {
		t.Errorf("%d attempt spans for a stream, want 1", len(attempts))
	}
}

func TestInstrumentationWithGlobalProviders(t *testing.T) {
	// With no provider given, the global no-op providers are used: nothing
	// breaks, nothing is recorded.
	inst, err := agentsafeotel.New()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := middleware.New(middleware.NewRegistry().Register(procRead, readCap(0, time.Second)), inst.EngineOption(), middleware.WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	var recording bool
	_, _, err = execute(t.Context(), eng, procRead, adapter.Call[any]{}, func(ctx context.Context) (any, error) {
		recording = trace.SpanFromContext(ctx).IsRecording()
		return nil, nil
	})
	if err != nil || recording {
		t.Errorf("with the global no-op provider: err %v, recording %t", err, recording)
	}
}

// A net/http route is named in HTTP's semantic conventions, not RPC's:
// http.route and http.request.method, on the span and the metric points.
func TestNetHTTPRoutesGetHTTPAttributes(t *testing.T) {
	const route = "POST /refunds/{id}"
	f := newOtelFixture(t, middleware.NewRegistry().Register(route, readCap(0, time.Second)))
	_, env, err := execute(as(t.Context(), agent), f.eng, route, adapter.Call[any]{}, func(context.Context) (any, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := f.execution(env.ExecutionID)
	wantAttrs(t, exe, map[string]any{"http.route": "/refunds/{id}", "http.request.method": "POST", "rpc.method": nil})
	if n := sum(t, f.metrics(), "agentsafe.executions", semconv.HTTPRoute("/refunds/{id}"), semconv.HTTPRequestMethodKey.String("POST"),
		attribute.String("agentsafe.code", "OK")); n != 1 {
		t.Errorf("agentsafe.executions for the route = %d, want 1", n)
	}
}

// The duration histogram has boundaries for RPC latencies, from a
// millisecond up: not one bucket for everything under five seconds.
func TestExecutionDurationHasRPCLatencyBuckets(t *testing.T) {
	f := newOtelFixture(t, middleware.NewRegistry().Register(procRead, readCap(0, time.Second)))
	execute(as(t.Context(), agent), f.eng, procRead, adapter.Call[any]{Input: input}, func(context.Context) (any, error) { return nil, nil })
	h, ok := f.metrics()["agentsafe.execution.duration"].(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) == 0 {
		t.Fatalf("no agentsafe.execution.duration points")
	}
	bounds := h.DataPoints[0].Bounds
	if len(bounds) < 10 || bounds[0] > 0.001 || !slices.Contains(bounds, 0.1) {
		t.Errorf("duration bounds %v: want RPC latency buckets from 1ms", bounds)
	}
}

// WithFilter leaves executions out of spans and metrics, and the
// instrumentation scope carries the version.
func TestFilterAndScopeVersion(t *testing.T) {
	f := newOtelFixture(t, middleware.NewRegistry().Register(procRead, readCap(0, time.Second)).Register("/test.v1.Svc/Write", middleware.Capability{SideEffect: middleware.SideEffectWrite}),
		agentsafeotel.WithFilter(func(x middleware.ExecutionInfo) bool { return x.Procedure != procRead }))
	execute(as(t.Context(), agent), f.eng, procRead, adapter.Call[any]{}, func(context.Context) (any, error) { return nil, nil })
	_, env, _ := execute(as(t.Context(), agent), f.eng, "/test.v1.Svc/Write", adapter.Call[any]{}, func(context.Context) (any, error) { return nil, nil })
	for _, s := range f.spans.GetSpans() {
		if attrs(s)["rpc.method"].AsString() == strings.TrimPrefix(procRead, "/") {
			t.Errorf("a filtered execution has span %q", s.Name)
		}
		if s.InstrumentationScope.Name == agentsafeotel.ScopeName && s.InstrumentationScope.Version != agentsafeotel.Version {
			t.Errorf("span %q scope version %q, want %q", s.Name, s.InstrumentationScope.Version, agentsafeotel.Version)
		}
	}
	f.execution(env.ExecutionID) // the other one is reported
	if n := sum(t, f.metrics(), "agentsafe.executions", semconv.RPCMethod(strings.TrimPrefix(procRead, "/")), attribute.String("agentsafe.code", "OK")); n != 0 {
		t.Errorf("a filtered execution counted in agentsafe.executions: %d", n)
	}
}

// ObserveEngine reports the events an engine's sinks dropped.
func TestDroppedEventsAreAMetric(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		inst, err := agentsafeotel.New(agentsafeotel.WithMeterProvider(mp))
		if err != nil {
			t.Fatal(err)
		}
		block := make(chan struct{})
		eng, err := middleware.New(middleware.NewRegistry().Register(procRead, readCap(0, time.Second)), inst.EngineOption(), middleware.WithProtoFiles(nil),
			middleware.WithEventSink(middleware.EventSinkFunc(func(context.Context, middleware.Event) { <-block }), middleware.SinkTimeout(10*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		if err := inst.ObserveEngine(eng); err != nil {
			t.Fatal(err)
		}
		execute(t.Context(), eng, procRead, adapter.Call[any]{}, func(context.Context) (any, error) { return nil, nil })
		time.Sleep(time.Second)
		close(block)
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var dropped int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "agentsafe.events.dropped" {
					for _, p := range s.DataPoints {
						dropped += p.Value
					}
				}
			}
		}
		if dropped != 2 {
			t.Errorf("agentsafe.events.dropped = %d, want the stalled execution's 2 later events", dropped)
		}
		_ = mp.Shutdown(context.Background())
	})
}

// TestAStaleResumeIsASpanEvent: a resume refused because the state the
// approval was given for changed says so on its execution's span.
func TestAStaleResumeIsASpanEvent(t *testing.T) {
	version := "v1"
	f := newOtelFixture(t, middleware.NewRegistry().Register(procRefund, middleware.Capability{
		SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true},
		Preview: func(context.Context, middleware.PreviewInput) (middleware.Preview, error) {
			return middleware.Preview{Text: "refund 120.00 EUR", State: []byte(version)}, nil
		},
	}))
	call := func(approvalID string) middleware.Envelope {
		_, env, _ := execute(as(t.Context(), agent), f.eng, procRefund, adapter.Call[any]{Input: input, ApprovalID: approvalID}, func(context.Context) (any, error) {
			return nil, nil
		})
		return env
	}
	req := call("")
	if _, err := f.eng.Decide(t.Context(), req.ApprovalID, store.Decision{Approve: true, Approver: boss}); err != nil {
		t.Fatal(err)
	}
	version = "v2"
	stale := call(req.ApprovalID)
	exe, attempts := f.execution(stale.ExecutionID)
	if ev := eventAttrs(exe, "capability.approval_stale"); len(attempts) != 0 || ev["agentsafe.code"] != "APPROVAL_STALE" || ev["agentsafe.approval_id"] != req.ApprovalID {
		t.Errorf("a stale resume: %d attempts, span events %q, approval_stale %v", len(attempts), eventNames(exe), ev)
	}
}
