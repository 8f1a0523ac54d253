package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
)

// budgeted is a gated-style fixture whose capability has budgets on a
// memory budget store sharing the approval store's settable clock.
type budgeted struct {
	*gated
	budgets *budgetstore.Memory
	keys    *keyNotes
}

func newBudgeted(t *testing.T, c middleware.Capability, opts ...middleware.Option) *budgeted {
	b := &budgeted{}
	g := &gated{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	b.budgets = budgetstore.NewMemory(budgetstore.WithClock(g.clock))
	b.keys = &keyNotes{BudgetStore: b.budgets}
	opts = append([]middleware.Option{middleware.WithBudgetStore(b.keys)}, opts...)
	b.gated = newGatedWith(t, g, c, opts...)
	return b
}

// newGatedWith is newGated with the fixture's clock given.
func newGatedWith(t *testing.T, g *gated, c middleware.Capability, opts ...middleware.Option) *gated {
	g.store = approvalstore.NewMemory(approvalstore.WithClock(g.clock))
	opts = append([]middleware.Option{middleware.WithApprovalStore(g.store), middleware.WithActor(actorOf), middleware.WithProtoFiles(nil)}, opts...)
	g.fixture = newFixture(t, procRefund, c, opts...)
	return g
}

// keyNotes notes the budget key of the last reservation.
type keyNotes struct {
	store.BudgetStore
	mu  sync.Mutex
	key string
}

func (k *keyNotes) Reserve(ctx context.Context, req store.BudgetRequest) (store.BudgetReservation, error) {
	k.mu.Lock()
	k.key = req.Key
	k.mu.Unlock()
	return k.BudgetStore.Reserve(ctx, req)
}

func (k *keyNotes) last() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.key
}

// refundOf is a refund of amount, as JSON.
func refundOf(order, amount int) adapter.Input {
	return adapter.JSONInput(fmt.Appendf(nil, `{"order":"%d","amount":%d}`, order, amount))
}

// spend runs the refund as actor and returns its outcome.
func (b *budgeted) spend(actor middleware.Actor, in adapter.Input) (middleware.Envelope, error) {
	env, err, _ := b.call(actor, in, "")
	return env, err
}

// left reads what is left of a budget for actor.
func (b *budgeted) left(name string, actor middleware.Actor) int64 {
	b.t.Helper()
	left, err := b.eng.Budget(b.t.Context(), name, actor)
	if err != nil {
		b.t.Fatalf("Budget: %v", err)
	}
	return left
}

func writeWith(budgets ...middleware.Budget) middleware.Capability {
	return middleware.Capability{SideEffect: middleware.SideEffectWrite, Budgets: budgets}
}

var refunds = middleware.Budget{Name: "refunds", Limit: 1000, Window: 24 * time.Hour, Per: "person", Amount: "/amount"}

func TestBudgetDenyRefusesPastTheLimitWithRetryAfter(t *testing.T) {
	b := newBudgeted(t, writeWith(refunds))
	for i, amount := range []int{450, 450} {
		env, err := b.spend(agent, refundOf(i, amount))
		wantCode(t, env, err, middleware.CodeOK)
		b.advance(time.Hour)
	}
	if got := b.left("refunds", agent); got != 100 {
		t.Fatalf("left after two refunds of 450: %d, want 100", got)
	}
	env, err := b.spend(agent, refundOf(3, 450))
	wantCode(t, env, err, middleware.CodeBudgetExceeded)
	if b.runs.Load() != 2 {
		t.Errorf("the refused refund ran: %d runs", b.runs.Load())
	}
	// The first refund ages out 22 hours from now: then 450 fits.
	if env.RetryAfter != 22*time.Hour || env.Error.Retryable {
		t.Errorf("envelope %+v: want RetryAfter 22h, not retryable", env)
	}
	for _, want := range []string{`budget "refunds"`, "spends 450", "900 of its limit of 1000", "nothing ran"} {
		if !strings.Contains(env.Error.Message, want) {
			t.Errorf("message %q lacks %q", env.Error.Message, want)
		}
	}
	b.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventBudgetExceeded, middleware.EventFailed)
	ev := b.waitEvent(env.ExecutionID, middleware.EventBudgetExceeded)
	if ev.Budget != "refunds" || ev.Amount != 450 || ev.Spent != 900 || ev.Limit != 1000 || ev.RetryAfter != 22*time.Hour {
		t.Errorf("budget_exceeded %+v", ev)
	}
	b.advance(22 * time.Hour)
	env, err = b.spend(agent, refundOf(3, 450))
	wantCode(t, env, err, middleware.CodeOK)
}

func TestBudgetStartedCarriesWhatIsSpent(t *testing.T) {
	calls := middleware.Budget{Name: "calls", Limit: 10, Window: time.Hour, Per: "actor"}
	b := newBudgeted(t, writeWith(refunds, calls))
	env, err := b.spend(agent, refundOf(1, 800))
	wantCode(t, env, err, middleware.CodeOK)
	ev := b.waitEvent(env.ExecutionID, middleware.EventStarted)
	// refunds has 80% spent, calls 10%: the started event names the nearer its limit.
	if ev.Budget != "refunds" || ev.Amount != 800 || ev.Spent != 800 || ev.Limit != 1000 {
		t.Errorf("started %+v: want refunds, 800 of 1000", ev)
	}
}

func TestBudgetCallBudgetCountsCalls(t *testing.T) {
	b := newBudgeted(t, writeWith(middleware.Budget{Name: "calls", Limit: 3, Window: time.Minute, Per: "actor"}))
	for i := range 3 {
		env, err := b.spend(agent, refundOf(i, 1_000_000))
		wantCode(t, env, err, middleware.CodeOK)
	}
	env, err := b.spend(agent, refundOf(4, 1))
	wantCode(t, env, err, middleware.CodeBudgetExceeded)
	if env.RetryAfter != time.Minute {
		t.Errorf("RetryAfter %s, want the window: the calls were at one instant", env.RetryAfter)
	}
}

func TestBudgetAmountMustBeANonNegativeInteger(t *testing.T) {
	b := newBudgeted(t, writeWith(refunds))
	for name, body := range map[string]string{
		"missing":         `{"order":"1"}`,
		"negative":        `{"amount":-5}`,
		"a fraction":      `{"amount":4.5}`,
		"a string":        `{"amount":"450"}`,
		"beyond int64":    `{"amount":9223372036854775808}`,
		"null":            `{"amount":null}`,
		"not I-JSON":      `{"amount":1,"amount":2}`,
		"not JSON at all": `amount=5`,
	} {
		env, err := b.spend(agent, adapter.JSONInput([]byte(body)))
		if middleware.CodeOf(err) != middleware.CodeInvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
		_ = env
	}
	if b.runs.Load() != 0 || b.left("refunds", agent) != 1000 {
		t.Errorf("a refused amount ran (%d) or spent (%d left)", b.runs.Load(), b.left("refunds", agent))
	}
	for body, want := range map[string]int64{`{"amount":4.5e2}`: 450, `{"amount":100.0}`: 100, `{"amount":0}`: 0} {
		before := b.left("refunds", agent)
		env, err := b.spend(agent, adapter.JSONInput([]byte(body)))
		wantCode(t, env, err, middleware.CodeOK)
		if got := before - b.left("refunds", agent); got != want {
			t.Errorf("%s spent %d, want %d", body, got, want)
		}
	}
}

func TestBudgetKeysFollowPer(t *testing.T) {
	alice1 := middleware.Actor{ID: "agent-1", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"assistant-9", "user-alice"}}
	alice2 := middleware.Actor{ID: "agent-2", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}}
	aliceHerself := middleware.Actor{ID: "user-alice", Tenant: "acme", Kind: "user"}
	bob := middleware.Actor{ID: "agent-1", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-bob"}}
	otherTenant := middleware.Actor{ID: "agent-1", Tenant: "globex", Kind: "agent", OnBehalfOf: []string{"assistant-9", "user-alice"}}
	for _, tc := range []struct {
		per    string
		shared []middleware.Actor // spend together with alice1
		apart  []middleware.Actor // each have a limit of their own
	}{
		{"actor", nil, []middleware.Actor{alice2, aliceHerself, bob, otherTenant}},
		{"person", []middleware.Actor{alice2, aliceHerself}, []middleware.Actor{bob, otherTenant}},
		{"tenant", []middleware.Actor{alice2, aliceHerself, bob}, []middleware.Actor{otherTenant}},
		{"audience", []middleware.Actor{alice2, aliceHerself, bob, otherTenant}, nil},
	} {
		t.Run(tc.per, func(t *testing.T) {
			b := newBudgeted(t, writeWith(middleware.Budget{Name: "calls", Limit: 1, Window: time.Hour, Per: tc.per}))
			env, err := b.spend(alice1, refundOf(1, 1))
			wantCode(t, env, err, middleware.CodeOK)
			for _, a := range tc.shared {
				env, err := b.spend(a, refundOf(1, 1))
				if middleware.CodeOf(err) != middleware.CodeBudgetExceeded {
					t.Errorf("%+v spends with %+v under %s, but got %v", a, alice1, tc.per, err)
				}
				_ = env
			}
			for _, a := range tc.apart {
				env, err := b.spend(a, refundOf(1, 1))
				if err != nil {
					t.Errorf("%+v has a limit of its own under %s, but got %v", a, tc.per, err)
				}
				_ = env
			}
		})
	}
}

func TestBudgetRequireApprovalEscalatesAndOverdraws(t *testing.T) {
	escalating := refunds
	escalating.Over = "require_approval"
	b := newBudgeted(t, writeWith(escalating))
	env, err := b.spend(agent, refundOf(1, 900))
	wantCode(t, env, err, middleware.CodeOK)

	env, err = b.spend(agent, refundOf(2, 450))
	wantCode(t, env, err, middleware.CodeApprovalRequired)
	if b.runs.Load() != 1 {
		t.Fatalf("the escalated refund ran before its approval")
	}
	rec, gerr := b.eng.Get(b.t.Context(), env.ApprovalID)
	if gerr != nil {
		t.Fatal(gerr)
	}
	reason := strings.Join(rec.Reasons, "; ")
	for _, want := range []string{`budget "refunds"`, "spends 450", "900 of its limit of 1000"} {
		if !strings.Contains(reason, want) {
			t.Errorf("the approval's reasons %q lack %q", reason, want)
		}
	}
	b.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventBudgetExceeded, middleware.EventApprovalRequested, middleware.EventFailed)
	if b.left("refunds", agent) != 100 {
		t.Errorf("an escalated call spent before its approval: %d left", b.left("refunds", agent))
	}

	b.approve(env.ApprovalID)
	env2, err, _ := b.call(agent, refundOf(2, 450), env.ApprovalID)
	wantCode(t, env2, err, middleware.CodeOK)
	if left := b.left("refunds", agent); left != -350 {
		t.Errorf("the approved refund spent past the limit: %d left, want -350", left)
	}
	if u, _ := b.budgets.Read(b.t.Context(), b.keys.last(), 24*time.Hour); u.Overdrafts != 1 || u.Overdrawn != 450 {
		t.Errorf("the approved refund is not recorded as an overdraft: %+v", u)
	}
	ev := b.waitEvent(env2.ExecutionID, middleware.EventStarted)
	if ev.Budget != "refunds" || ev.Spent != 1350 || ev.Limit != 1000 {
		t.Errorf("started %+v: want refunds, 1350 of 1000", ev)
	}
}

func TestBudgetDenyRefusesBeforeRequireApprovalEscalates(t *testing.T) {
	approve := middleware.Budget{Name: "a-escalates", Limit: 1, Window: time.Hour, Per: "actor", Over: "require_approval"}
	deny := middleware.Budget{Name: "z-denies", Limit: 1, Window: time.Hour, Per: "actor"}
	b := newBudgeted(t, writeWith(approve, deny))
	env, err := b.spend(agent, refundOf(1, 1))
	wantCode(t, env, err, middleware.CodeOK)
	env, err = b.spend(agent, refundOf(2, 1))
	wantCode(t, env, err, middleware.CodeBudgetExceeded)
	if env.ApprovalID != "" {
		t.Errorf("an approval was requested although a deny budget refuses: %+v", env)
	}
	// The deny budget is reserved first although its name sorts last: the
	// escalating one is never asked, so only one budget_exceeded is emitted.
	b.wantTypes(env.ExecutionID, middleware.EventRequested, middleware.EventBudgetExceeded, middleware.EventFailed)
	if ev := b.waitEvent(env.ExecutionID, middleware.EventBudgetExceeded); ev.Budget != "z-denies" {
		t.Errorf("budget_exceeded names %q, want the deny budget z-denies", ev.Budget)
	}
}

func TestBudgetsAreReservedAllOrNone(t *testing.T) {
	// large is reserved first (name order), so each refusal by small must
	// give back what large took.
	large := middleware.Budget{Name: "a-large", Limit: 10, Window: time.Hour, Per: "actor"}
	small := middleware.Budget{Name: "b-small", Limit: 1, Window: time.Hour, Per: "actor"}
	b := newBudgeted(t, writeWith(small, large))
	env, err := b.spend(agent, refundOf(1, 1))
	wantCode(t, env, err, middleware.CodeOK)
	for range 3 {
		env, err = b.spend(agent, refundOf(2, 1))
		wantCode(t, env, err, middleware.CodeBudgetExceeded)
	}
	if left := b.left("a-large", agent); left != 9 {
		t.Errorf("refused calls kept what they took of the other budget: %d left of 10, want 9", left)
	}
}

func TestBudgetIsGivenBackWhenNothingRan(t *testing.T) {
	t.Run("an approval is required first", func(t *testing.T) {
		c := writeWith(refunds)
		c.Approval = middleware.Approval{Required: true}
		b := newBudgeted(t, c)
		id := b.requested(refundOf(1, 400))
		if left := b.left("refunds", agent); left != 1000 {
			t.Errorf("the call that asked for an approval kept its reservation: %d left", left)
		}
		b.approve(id)
		env, err, _ := b.call(agent, refundOf(1, 400), id)
		wantCode(t, env, err, middleware.CodeOK)
		if left := b.left("refunds", agent); left != 600 {
			t.Errorf("the approved call: %d left, want 600", left)
		}
	})
	t.Run("the caller left before the first attempt", func(t *testing.T) {
		leave := &leavingStore{BudgetStore: budgetstore.NewMemory()}
		g := &gated{now: time.Now()}
		g2 := newGatedWith(t, g, writeWith(refunds), middleware.WithBudgetStore(leave))
		ctx, cancel := context.WithCancel(as(t.Context(), agent))
		leave.cancel = cancel
		_, env, err := execute(g2.eng, ctx, call{Procedure: procRefund, Input: refundOf(1, 400)}, func(context.Context) (any, error) {
			t.Error("the handler ran for a caller that left")
			return nil, nil
		})
		wantCode(t, env, err, middleware.CodeCancelled)
		if left, _ := g2.eng.Budget(t.Context(), "refunds", agent); left != 1000 {
			t.Errorf("the call whose caller left kept its reservation: %d left", left)
		}
	})
	t.Run("strict audit failed at started", func(t *testing.T) {
		b := newBudgeted(t, writeWith(refunds), middleware.WithAuditSink(failAt(middleware.EventStarted)))
		env, err := b.spend(agent, refundOf(1, 400))
		wantCode(t, env, err, middleware.CodeAuditUnavailable)
		if left := b.left("refunds", agent); left != 1000 || b.runs.Load() != 0 {
			t.Errorf("nothing ran (%d runs), yet %d left", b.runs.Load(), left)
		}
	})
}

// leavingStore cancels the caller once its reservation is taken.
type leavingStore struct {
	store.BudgetStore
	cancel func()
}

func (l *leavingStore) Reserve(ctx context.Context, req store.BudgetRequest) (store.BudgetReservation, error) {
	res, err := l.BudgetStore.Reserve(ctx, req)
	l.cancel()
	return res, err
}

// failAt is a strict audit sink that fails for one event type.
type failAt middleware.EventType

func (f failAt) Record(_ context.Context, e middleware.Event) error {
	if e.Type == middleware.EventType(f) {
		return errors.New("audit store down")
	}
	return nil
}

func TestBudgetIsSpentOnceAnAttemptStarted(t *testing.T) {
	b := newBudgeted(t, writeWith(refunds))
	_, env, err := execute(b.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refundOf(1, 300)}, func(context.Context) (any, error) {
		return nil, errors.New("the payment provider hung up")
	})
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	if left := b.left("refunds", agent); left != 700 {
		t.Errorf("a failed attempt may have had its effect: %d left, want 700", left)
	}
}

func TestNoEffectGivesTheBudgetAndTheApprovalBack(t *testing.T) {
	c := writeWith(refunds)
	c.Approval = middleware.Approval{Required: true}
	b := newBudgeted(t, c)
	id := b.requested(refundOf(1, 400))
	b.approve(id)
	declined := middleware.NewError(middleware.CodeExecutionFailed, "the card was declined")
	_, env, err := execute(b.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refundOf(1, 400), ApprovalID: id}, func(context.Context) (any, error) {
		return nil, middleware.NoEffect(declined)
	})
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	if env.Error.Message != "the card was declined" {
		t.Errorf("the handler's declared error reached the caller as %q", env.Error.Message)
	}
	if !errors.Is(err, declined) {
		t.Errorf("the handler's error is not reachable: %v", err)
	}
	if left := b.left("refunds", agent); left != 1000 {
		t.Errorf("a failure without effect kept its reservation: %d left", left)
	}
	// Given back before the call was answered, not in the background: a
	// resume right after finds it approved.
	if rec, err := b.eng.Get(t.Context(), id); err != nil || rec.Status != store.ApprovalApproved {
		t.Fatalf("the approval was not given back before the answer: %+v %v", rec, err)
	}
	env, err, _ = b.call(agent, refundOf(1, 400), id)
	wantCode(t, env, err, middleware.CodeOK)
	if left := b.left("refunds", agent); left != 600 {
		t.Errorf("the second resume: %d left, want 600", left)
	}
}

func TestNoEffectOnOneAttemptOfManyKeepsTheBudget(t *testing.T) {
	c := writeWith(refunds)
	c.Idempotent, c.Retry = true, middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}
	b := newBudgeted(t, c)
	var n atomic.Int32
	_, env, err := execute(b.eng, as(t.Context(), agent), call{Procedure: procRefund, Input: refundOf(1, 300)}, func(context.Context) (any, error) {
		if n.Add(1) == 1 {
			return nil, errTransient // may have had its effect
		}
		return nil, middleware.NoEffect(errors.New("declined"))
	})
	wantCode(t, env, err, middleware.CodeExecutionFailed)
	if left := b.left("refunds", agent); left != 700 {
		t.Errorf("the first attempt may have had its effect, yet %d left", left)
	}
}

func TestNoEffectIsTransparent(t *testing.T) {
	base := errors.New("declined")
	err := middleware.NoEffect(base)
	if !errors.Is(err, base) || err.Error() != "declined" || middleware.NoEffect(nil) != nil {
		t.Errorf("NoEffect(%v) = %v", base, err)
	}
}

func TestBudgetReplaySpendsNothing(t *testing.T) {
	b := newBudgeted(t, writeWith(refunds), middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: make([]byte, 32)}))
	run := func() middleware.Envelope {
		_, env, err := adapter.Execute(as(t.Context(), agent), adapter.Resolve(b.eng, procRefund),
			adapter.Call[any]{Input: refundOf(1, 300), Surface: adapter.SurfaceRPC, IdempotencyKey: "refund-1"},
			func(context.Context) (any, error) { return "refunded", nil })
		wantCode(t, env, err, middleware.CodeOK)
		return env
	}
	run()
	if env := run(); !env.Replayed {
		t.Fatalf("the repeat was not replayed: %+v", env)
	}
	if left := b.left("refunds", agent); left != 700 {
		t.Errorf("the replay spent again: %d left, want 700", left)
	}
}

// flakyBudgets loses the reply of the first lose Reserves (they reserve),
// or, down, fails every Reserve without reserving.
type flakyBudgets struct {
	store.BudgetStore
	mu       sync.Mutex
	lose     int
	reserves int
	down     bool
}

func (f *flakyBudgets) Reserve(ctx context.Context, req store.BudgetRequest) (store.BudgetReservation, error) {
	f.mu.Lock()
	f.reserves++
	lose, down := f.lose > 0, f.down
	if lose {
		f.lose--
	}
	f.mu.Unlock()
	if down {
		return store.BudgetReservation{}, errors.New("connection refused")
	}
	res, err := f.BudgetStore.Reserve(ctx, req)
	if lose {
		return store.BudgetReservation{}, errors.New("i/o timeout: the reply was lost")
	}
	return res, err
}

func TestBudgetLostReplyIsAskedAgainForTheSameExecution(t *testing.T) {
	inBubble(t, func(t *testing.T) { // the retries wait on the fake clock
		flaky := &flakyBudgets{BudgetStore: budgetstore.NewMemory(), lose: 2}
		g := newGatedWith(t, &gated{now: time.Now()}, writeWith(refunds), middleware.WithBudgetStore(flaky))
		env, err, _ := g.call(agent, refundOf(1, 300), "")
		wantCode(t, env, err, middleware.CodeOK)
		if flaky.reserves != 3 {
			t.Errorf("%d Reserves, want 3: two lost replies, then the answer", flaky.reserves)
		}
		if left, _ := g.eng.Budget(t.Context(), "refunds", agent); left != 700 {
			t.Errorf("a re-issued Reserve reserved twice: %d left, want 700", left)
		}
	})
}

func TestBudgetStoreDownFailsClosed(t *testing.T) {
	inBubble(t, func(t *testing.T) { // the retries wait on the fake clock
		flaky := &flakyBudgets{BudgetStore: budgetstore.NewMemory(), down: true}
		g := newGatedWith(t, &gated{now: time.Now()}, writeWith(refunds), middleware.WithBudgetStore(flaky))
		env, err, _ := g.call(agent, refundOf(1, 300), "")
		wantCode(t, env, err, middleware.CodeBudgetUnavailable)
		if !env.Error.Retryable || g.runs.Load() != 0 || flaky.reserves != 3 {
			t.Errorf("envelope %+v, %d runs, %d tries: want retryable, nothing run, three tries", env, g.runs.Load(), flaky.reserves)
		}
	})
}

func TestBudgetValidationListsEveryProblem(t *testing.T) {
	reg := middleware.NewRegistry().
		Register("refund", writeWith(
			middleware.Budget{Name: "", Limit: 0, Window: -time.Second, Per: "", Over: "refuse", Amount: "amount"},
			middleware.Budget{Name: "dup", Limit: 1, Window: time.Hour, Per: "actor"},
			middleware.Budget{Name: "dup", Limit: 1, Window: time.Hour, Per: "actor", Amount: "/a~2"},
		)).
		Register("shared-1", writeWith(middleware.Budget{Name: "shared", Limit: 5, Window: time.Hour, Per: "tenant"})).
		Register("shared-2", writeWith(middleware.Budget{Name: "shared", Limit: 6, Window: time.Hour, Per: "tenant"})).
		Register("window-1", writeWith(middleware.Budget{Name: "window", Limit: 5, Window: time.Hour, Per: "tenant"})).
		Register("window-2", writeWith(middleware.Budget{Name: "window", Limit: 5, Window: time.Minute, Per: "tenant"})).
		Register("per-1", writeWith(middleware.Budget{Name: "per", Limit: 5, Window: time.Hour, Per: "tenant"})).
		Register("per-2", writeWith(middleware.Budget{Name: "per", Limit: 5, Window: time.Hour, Per: "actor"})).
		Register("stream", middleware.Capability{SideEffect: middleware.SideEffectRead, Streaming: true,
			Budgets: []middleware.Budget{{Name: "s", Limit: 1, Window: time.Hour, Per: "actor"}}}).
		Register("escalates", writeWith(middleware.Budget{Name: "e", Limit: 1, Window: time.Hour, Per: "actor", Over: "require_approval"}))
	_, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	if err == nil {
		t.Fatal("New accepted invalid budgets")
	}
	for _, want := range []string{
		"refund (registry): Budgets[0].Name: must not be empty",
		"refund (registry): Budgets[0].Limit: must be more than 0 (got 0)",
		"refund (registry): Budgets[0].Window: must be more than 0 (got -1s)",
		`refund (registry): Budgets[0].Per: must be one of actor, person, tenant, audience (got "")`,
		`refund (registry): Budgets[0].Over: must be deny or require_approval (got "refuse")`,
		`refund (registry): Budgets[0].Amount: "amount" is not a JSON Pointer`,
		"refund (registry): Budgets[dup].Name: is listed twice",
		`refund (registry): Budgets[dup].Amount: JSON Pointer "/a~2"`,
		"shared-2 (engine): Budgets[shared]: shares its name with the budget of shared-1",
		"window-2 (engine): Budgets[window]: shares its name with the budget of window-1",
		"per-2 (engine): Budgets[per]: shares its name with the budget of per-1",
		"stream (registry): Budgets[s]: a streaming procedure cannot have a budget",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	// What the engine lacks, once the capabilities are valid.
	reg = middleware.NewRegistry().
		Register("refund", writeWith(middleware.Budget{Name: "r", Limit: 1, Window: time.Hour, Per: "actor"})).
		Register("escalates", writeWith(middleware.Budget{Name: "e", Limit: 1, Window: time.Hour, Per: "actor", Over: "require_approval"}))
	_, err = middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(discard))
	for _, want := range []string{
		"refund (engine): Budgets[r]: needs a budget store",
		"escalates (engine): Budgets[e]: needs a budget store",
		"escalates (engine): Budgets[e].Over: require_approval needs an approval store",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestBudgetOnMemoryWarnsAtStartUp(t *testing.T) {
	var log strings.Builder
	_, err := middleware.New(middleware.NewRegistry().Register("refund", writeWith(middleware.Budget{Name: "calls", Limit: 5, Window: time.Hour, Per: "actor"})),
		middleware.WithBudgetStore(budgetstore.NewMemory()), middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "budgets are kept in this process only") {
		t.Errorf("no warning about budgets on memory:\n%s", log.String())
	}
}

func TestEngineBudgetNamesOnlyItsBudgets(t *testing.T) {
	b := newBudgeted(t, writeWith(refunds))
	if _, err := b.eng.Budget(t.Context(), "unknown", agent); err == nil {
		t.Error("Budget of an unknown name succeeded")
	}
}

func TestBudgetAmountFromAProtoRequest(t *testing.T) {
	const proc = "/agentsafe.test.v1.TestService/Write"
	budget := func(path string) middleware.Capability {
		return writeWith(middleware.Budget{Name: "spend", Limit: 100, Window: time.Hour, Per: "audience", Amount: path})
	}
	for path, want := range map[string]string{
		"mode":        "is string, not an integer",
		"/amount":     `has no field "/amount"`,
		"amount.more": "is not a message",
	} {
		_, err := middleware.New(middleware.NewRegistry().Register(proc, budget(path)), middleware.WithBudgetStore(budgetstore.NewMemory()),
			middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithLogger(discard))
		if err == nil || !strings.Contains(err.Error(), proc+" (registry): Budgets[spend].Amount: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("Amount %q: %v, want %q", path, err, want)
		}
	}
	eng, err := middleware.New(middleware.NewRegistry().Register(proc, budget("amount")), middleware.WithBudgetStore(budgetstore.NewMemory()),
		middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{40, 60} {
		_, env, err := execute(eng, t.Context(), call{Procedure: proc, Input: adapter.ProtoInput(&testv1.Request{Amount: n})}, noop)
		wantCode(t, env, err, middleware.CodeOK)
	}
	_, env, err := execute(eng, t.Context(), call{Procedure: proc, Input: adapter.ProtoInput(&testv1.Request{Amount: 1})}, noop)
	wantCode(t, env, err, middleware.CodeBudgetExceeded)
	_, env, err = execute(eng, t.Context(), call{Procedure: proc, Input: adapter.ProtoInput(&testv1.Request{Amount: -1})}, noop)
	wantCode(t, env, err, middleware.CodeInvalidArgument)
}

func TestSlogSinkLogsTheBudget(t *testing.T) {
	var buf strings.Builder
	sink := middleware.NewSlogSink(slog.New(slog.NewJSONHandler(&buf, nil)))
	sink.HandleEvent(t.Context(), middleware.Event{Type: middleware.EventBudgetExceeded, ExecutionID: "exe_1", Procedure: procRefund,
		Budget: "refunds", Amount: 450, Spent: 1800, Limit: 2000, RetryAfter: time.Hour})
	for _, want := range []string{`"budget":"refunds"`, `"amount":450`, `"spent":1800`, `"limit":2000`, `"retry_after":3600000000000`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("slog output lacks %s:\n%s", want, buf.String())
		}
	}
}

// overdraftDown fails every Reserve of an overdraft: the store goes down
// between the approval's consumption and the approved call's reservation.
type overdraftDown struct{ store.BudgetStore }

func (o overdraftDown) Reserve(ctx context.Context, req store.BudgetRequest) (store.BudgetReservation, error) {
	if req.Overdraft {
		return store.BudgetReservation{}, errors.New("connection refused")
	}
	return o.BudgetStore.Reserve(ctx, req)
}

func TestBudgetOverdraftStoreDownGivesTheApprovalBack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		escalating := refunds
		escalating.Over = "require_approval"
		g := newGatedWith(t, &gated{now: time.Now()}, writeWith(escalating),
			middleware.WithBudgetStore(overdraftDown{budgetstore.NewMemory()}))
		env, err, _ := g.call(agent, refundOf(1, 900), "")
		wantCode(t, env, err, middleware.CodeOK)
		id := g.requested(refundOf(2, 450))
		g.approve(id)
		env, err, _ = g.call(agent, refundOf(2, 450), id)
		wantCode(t, env, err, middleware.CodeBudgetUnavailable)
		if g.runs.Load() != 1 {
			t.Errorf("the approved call ran without its reservation: %d runs", g.runs.Load())
		}
		synctest.Wait() // the approval is given back in the background
		if rec, err := g.eng.Get(t.Context(), id); err != nil || rec.Status != store.ApprovalApproved {
			t.Errorf("nothing ran, yet the approval was not given back: %+v %v", rec, err)
		}
	})
}

func TestBudgetReserveWhoseRepliesWereAllLostIsGivenBack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		flaky := &flakyBudgets{BudgetStore: budgetstore.NewMemory(), lose: 3}
		g := newGatedWith(t, &gated{now: time.Now()}, writeWith(refunds), middleware.WithBudgetStore(flaky))
		env, err, _ := g.call(agent, refundOf(1, 300), "")
		wantCode(t, env, err, middleware.CodeBudgetUnavailable)
		if g.runs.Load() != 0 {
			t.Errorf("the refund ran although the store never answered")
		}
		synctest.Wait() // the lost reservation is released in the background
		if left, _ := g.eng.Budget(t.Context(), "refunds", agent); left != 1000 {
			t.Errorf("a reservation whose every reply was lost stayed: %d left, want 1000", left)
		}
	})
}
