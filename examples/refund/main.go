// Command refund shows agentsafe protecting a small order service from an
// agent that times out, loops and calls twice. It runs a scripted agent
// against the engine and prints what happened and the audit events of each
// call.
//
//	go run ./examples/refund
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

const (
	getOrder       = "/orders.v1.OrderService/GetOrder"
	refundOrder    = "/orders.v1.OrderService/RefundOrder"
	notifyCustomer = "/orders.v1.OrderService/NotifyCustomer"
	slowReport     = "/orders.v1.OrderService/SlowReport"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "refund:", err)
		os.Exit(1)
	}
}

func run() error {
	reg := middleware.NewRegistry().
		Register(getOrder, middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: time.Second,
			Retry: middleware.Retry{MaxAttempts: 2, Backoff: 20 * time.Millisecond}}).
		Register(refundOrder, middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Risk: middleware.RiskHigh,
			Timeout: time.Second, Retry: middleware.Retry{MaxAttempts: 1, Backoff: 20 * time.Millisecond}}).
		Register(notifyCustomer, middleware.Capability{SideEffect: middleware.SideEffectExternal, Timeout: time.Second}).
		Register(slowReport, middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: 200 * time.Millisecond})
	audit := &printer{}
	eng, err := middleware.New(reg, middleware.WithEventSink(audit))
	if err != nil {
		return err
	}
	svc := newService()
	ctx := context.Background()

	step := func(title string, proc string, ctx context.Context, fn middleware.AttemptFunc) middleware.Envelope {
		fmt.Printf("\n== %s\n", title)
		v, env, err := eng.Execute(ctx, middleware.Call{Procedure: proc}, fn)
		if err != nil {
			fmt.Printf("   result: %s %s (%q, retryable for the agent: %t) after %d attempt(s)\n", env.Status, env.Error.Code, env.Error.Message, env.Error.Retryable, env.Attempts)
		} else {
			fmt.Printf("   result: %s after %d attempt(s): %v\n", env.Status, env.Attempts, v)
		}
		audit.flush(env.ExecutionID)
		return env
	}

	svc.flakyReads.Store(1)
	step("a read that fails once is retried in the same execution", getOrder, ctx, svc.getOrder)

	svc.flakyNotify.Store(1)
	step("an external write that fails is NOT retried: the agent decides", notifyCustomer, ctx, svc.notify)

	first := step("a refund runs once; the payment gateway dedups by idempotency key", refundOrder, ctx, svc.refund)
	second := step("the agent calls refund again: a new execution, refused by the business rule", refundOrder, ctx, svc.refund)
	fmt.Printf("   re-invocation is a new execution: %s != %s; gateway charged %d time(s)\n", first.ExecutionID, second.ExecutionID, svc.gateway.count())

	late := step("a handler that ignores its context: TIMEOUT at the deadline (bounded reporting)", slowReport, ctx, svc.slowIgnoringContext)
	time.Sleep(300 * time.Millisecond) // the abandoned handler finishes after all
	fmt.Println("   ...later, the abandoned attempt returned; its result was discarded and reported:")
	audit.flush(late.ExecutionID, middleware.EventAbandonedResult)

	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	step("the agent gives up after 50ms: CANCELLED, never retried", slowReport, cctx, svc.slowHonouringContext)
	return nil
}

// service is the order service's business logic, written the way agentsafe
// asks: it forwards its context and hands the idempotency key downstream.
type service struct {
	flakyReads, flakyNotify atomic.Int32
	mu                      sync.Mutex
	refunded                map[string]bool
	gateway                 *gateway
}

func newService() *service {
	return &service{refunded: map[string]bool{}, gateway: &gateway{seen: map[string]bool{}}}
}

func (s *service) getOrder(ctx context.Context) (any, error) {
	if s.flakyReads.Add(-1) >= 0 {
		return nil, middleware.Retryable(errors.New("orders database: connection reset"))
	}
	return "order 42: 120.00 EUR, delivered", nil
}

func (s *service) notify(ctx context.Context) (any, error) {
	if s.flakyNotify.Add(-1) >= 0 {
		return nil, middleware.Retryable(errors.New("mail relay: 503"))
	}
	return "email sent", nil
}

func (s *service) refund(ctx context.Context) (any, error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refunded["42"] {
		// Cross-invocation deduplication is business state, not plumbing.
		return nil, middleware.NewError(middleware.CodeExecutionFailed, "ALREADY_REFUNDED: order 42 was refunded before")
	}
	if err := s.gateway.charge(ctx, x.IdempotencyKey, -12000); err != nil {
		return nil, err
	}
	s.refunded["42"] = true
	return "refunded 120.00 EUR", nil
}

func (s *service) slowIgnoringContext(ctx context.Context) (any, error) {
	time.Sleep(400 * time.Millisecond) // never looks at ctx
	return "report", nil
}

func (s *service) slowHonouringContext(ctx context.Context) (any, error) {
	select {
	case <-time.After(400 * time.Millisecond):
		return "report", nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// gateway is a downstream payment system that treats the idempotency key as
// a deduplication token.
type gateway struct {
	mu   sync.Mutex
	seen map[string]bool
	n    int
}

func (g *gateway) charge(ctx context.Context, key string, cents int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen[key] {
		return nil // already applied under this key
	}
	g.seen[key] = true
	g.n++
	return ctx.Err()
}

func (g *gateway) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// printer buffers events per execution and prints them after the call, so
// the output of one step stays together.
type printer struct {
	mu     sync.Mutex
	events []middleware.Event
}

func (p *printer) HandleEvent(_ context.Context, e middleware.Event) {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
}

// flush prints the events of one execution, or only those of the given types.
func (p *printer) flush(executionID string, only ...middleware.EventType) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.events {
		if e.ExecutionID != executionID || (len(only) > 0 && !slices.Contains(only, e.Type)) {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "   event %-28s %s", e.Type, e.ExecutionID)
		if e.Attempt > 0 {
			fmt.Fprintf(&b, " attempt=%d", e.Attempt)
		}
		if e.PreviousErrorCode != middleware.CodeOK {
			fmt.Fprintf(&b, " previous=%s", e.PreviousErrorCode)
		}
		if e.Type.Final() {
			fmt.Fprintf(&b, " attempts=%d", e.Attempts)
		}
		if e.Code != middleware.CodeOK {
			fmt.Fprintf(&b, " code=%s", e.Code)
		}
		if e.Type == middleware.EventAbandonedResult {
			fmt.Fprintf(&b, " succeeded=%t", e.Succeeded)
		}
		if e.Error != "" {
			fmt.Fprintf(&b, " error=%q", e.Error)
		}
		fmt.Println(b.String())
	}
}
