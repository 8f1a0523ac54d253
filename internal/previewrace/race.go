// Package previewrace races engines that share an approval store over
// approvals bound to a preview, while a writer flips the previewed state:
// the test of SPEC §14 that every shared store (Redis, PostgreSQL) runs
// from its own tests.
package previewrace

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// Procedure is the raced capability: an external refund that always needs
// a manager's approval and previews the order it refunds.
const Procedure = "/orders.v1.Orders/Refund"

var (
	agent   = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}}
	manager = middleware.Actor{ID: "manager-bob", Tenant: "acme", Kind: "user"}
)

const (
	engines   = 8  // each with a store of its own (its own client or pool)
	perEngine = 64 // concurrent resumes on each engine
	// contenders is how many of an engine's goroutines resume each
	// approval: every approval is raced by engines·contenders = 64
	// resumes at once, and each goroutine takes part in the race for
	// 1/(perEngine/contenders) of the approvals.
	contenders = 8
	tries      = 12 // resumes per goroutine and approval before it gives up on it
)

// errChanged is the refusal of a conditional write that found the order
// changed since it was approved.
var errChanged = errors.New("the order changed since the refund was approved")

// orders are the previewed state: each order's version is 1 (as
// approved) or 2 (refunded elsewhere), flipped by the writer.
type orders struct {
	mu       sync.Mutex
	versions []int
	// writes[n] are the states the refunds of order n landed against;
	// ran[n] counts its handler runs, running[n] those running now.
	writes  [][]string
	ran     []int
	running []atomic.Int32
	// overlap counts handler runs of one approval that overlapped.
	overlap atomic.Int32
	// poke asks the writer for a flip: previews and handlers poke it, so
	// the state changes while resumes are between their check and their
	// write, at the rate of the race, without sleeping or spinning.
	poke chan struct{}
	// staleSeen is closed once a resume of the race was refused stale:
	// the writer flips nothing before, so the race always has one, whatever
	// pokes a preview of the requests (run on a goroutine of its own, its
	// poke may come late) left behind, and however the first stale
	// resume's Consume and a later one's interleave.
	staleSeen chan struct{}
	staleOnce sync.Once
}

func state(order, version int) string { return fmt.Sprintf("order %d version %d", order, version) }

func (o *orders) nudge() {
	select {
	case o.poke <- struct{}{}:
	default:
	}
}

func (o *orders) preview(_ context.Context, in middleware.PreviewInput) (middleware.Preview, error) {
	n := orderOf(in.Input)
	// Read, then poke: the first preview of the race reads the state the
	// race starts with, before any flip.
	defer o.nudge()
	o.mu.Lock()
	defer o.mu.Unlock()
	v := o.versions[n]
	return middleware.Preview{Text: fmt.Sprintf("refund 120.00 EUR of order %d to card ****1234 (version %d)", n, v), State: []byte(state(n, v))}, nil
}

// refund is the handler: a conditional write, UPDATE … WHERE version =
// $approved, that returns NoEffect when the order changed.
func (o *orders) refund(n int) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		if o.running[n].Add(1) > 1 {
			o.overlap.Add(1)
		}
		defer o.running[n].Add(-1)
		o.nudge()
		runtime.Gosched() // let the writer in between the check and the write
		o.mu.Lock()
		defer o.mu.Unlock()
		o.ran[n]++
		if string(x.ApprovedState) != state(n, o.versions[n]) {
			return nil, middleware.NoEffect(errChanged)
		}
		o.writes[n] = append(o.writes[n], string(x.ApprovedState))
		return "refunded", nil
	}
}

// flip toggles every order between version 1 and 2, until stop.
func (o *orders) flip(stop <-chan struct{}) {
	select {
	case <-stop:
		return
	case <-o.staleSeen: // a resume is refused stale before the first flip
	}
	for {
		select {
		case <-stop:
			return
		case <-o.poke:
		}
		o.mu.Lock()
		for n := range o.versions {
			o.versions[n] = 3 - o.versions[n]
		}
		o.mu.Unlock()
	}
}

// written reports whether a refund of order n landed.
func (o *orders) written(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.writes[n]) > 0
}

func (o *orders) set(version int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for n := range o.versions {
		o.versions[n] = version
	}
}

func orderOf(input []byte) int {
	var n int
	fmt.Sscanf(string(input), `{"order":%d}`, &n)
	return n
}

func input(n int) adapter.Input { return adapter.JSONInput(fmt.Appendf(nil, `{"order":%d}`, n)) }

// Race builds eight engines, each on a store open returns (sharing one
// backend), requests and approves records approvals of a refund at
// version 1, and has 64 goroutines on each engine resume them (each
// approval raced by 64 resumes at once, across the engines) while a
// writer flips every order between version 1 and 2.
// It checks SPEC §14's guarantees: a resume while the order is at version
// 2 is APPROVAL_STALE and consumes nothing; no write ever lands against a
// state other than the approved one (the handler's conditional write is
// the last guard); runs of one approval never overlap, and at most one
// writes; a write that found the state changed returns NoEffect and gives
// the approval back. Once the writer stops at version 1, every approval
// that has not run runs once: nothing a stale resume or a NoEffect did
// spent it.
func Race(t *testing.T, records int, open func(t *testing.T) store.ApprovalStore) {
	o := &orders{versions: make([]int, records), writes: make([][]string, records), ran: make([]int, records),
		running: make([]atomic.Int32, records), poke: make(chan struct{}, 1), staleSeen: make(chan struct{})}
	o.set(1)
	engs := make([]*middleware.Engine, engines)
	for i := range engs {
		engs[i] = newEngine(t, open(t), o.preview)
	}
	ctx := t.Context()
	ids := make([]string, records)
	for n := range ids {
		ids[n] = requestApproved(t, ctx, engs[0], n)
	}

	// The race starts with every order refunded elsewhere (version 2), so
	// the first resume (at least) finds it changed and is refused stale;
	// only then does the writer start flipping.
	o.set(2)
	var completed, stale, consumed, noEffect atomic.Int64
	var unexpected sync.Map
	stop := make(chan struct{})
	flipped := make(chan struct{})
	go func() { o.flip(stop); close(flipped) }()
	start := make(chan struct{})
	var wg sync.WaitGroup
	stride := perEngine / contenders
	for e, eng := range engs {
		for w := range perEngine {
			wg.Go(func() {
				<-start
				for n := w % stride; n < records; n += stride {
					// Until the refund is written: an approval consumed by
					// another resume may come back (NoEffect).
					for try := 0; try < tries && !o.written(n); try++ {
						env, err := execute(ctx, eng, n, ids[n], o.refund(n))
						switch code := middleware.CodeOf(err); {
						case err == nil:
							completed.Add(1)
						case code == middleware.CodeApprovalStale && env.Attempts == 0:
							stale.Add(1)
							o.staleOnce.Do(func() { close(o.staleSeen) })
						case code == middleware.CodeApprovalConsumed && env.Attempts == 0:
							consumed.Add(1)
						case errors.Is(err, errChanged) && env.Attempts == 1:
							noEffect.Add(1)
						default:
							unexpected.Store(fmt.Sprintf("engine %d worker %d order %d", e, w, n), err)
						}
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	close(stop)
	<-flipped
	t.Logf("%d approvals raced by %d resumes each on %d engines: %d completed, %d stale, %d no effect (given back), %d consumed",
		records, engines*contenders, engines, completed.Load(), stale.Load(), noEffect.Load(), consumed.Load())
	unexpected.Range(func(k, v any) bool {
		t.Errorf("%s: %v; want success, APPROVAL_STALE, APPROVAL_CONSUMED or the handler's NoEffect", k, v)
		return true
	})

	// The state is back to what was approved: every approval that has not
	// run runs now, once.
	o.set(1)
	for n, id := range ids {
		if len(o.writes[n]) > 0 {
			continue
		}
		if _, err := execute(ctx, engs[n%engines], n, id, o.refund(n)); err != nil {
			t.Errorf("order %d: with the state as approved, its approval must run once: %v (a stale resume or a NoEffect spent it)", n, err)
		}
	}
	for n, id := range ids {
		if len(o.writes[n]) != 1 || o.writes[n][0] != state(n, 1) {
			t.Errorf("order %d: writes landed against %q; want exactly one, against the approved %q", n, o.writes[n], state(n, 1))
		}
		if _, err := execute(ctx, engs[0], n, id, o.refund(n)); middleware.CodeOf(err) != middleware.CodeApprovalConsumed {
			t.Errorf("order %d: after its run, a resume: %v; want APPROVAL_CONSUMED", n, err)
		}
	}
	if o.overlap.Load() != 0 {
		t.Errorf("runs of one approval overlapped %d times: an approval runs at most once at a time", o.overlap.Load())
	}
	if stale.Load() == 0 {
		t.Error("no resume was refused stale: the writer never got in, and the race tested nothing")
	}
	runs := 0
	for n := range o.ran {
		runs += o.ran[n]
	}
	if want := records + int(noEffect.Load()); runs != want {
		t.Errorf("%d handler runs; want one per approval plus one per NoEffect (%d)", runs, want)
	}
}

// GivesBack checks, on a store open returns, that a conditional write that
// finds the state changed between the resume's check and its write
// returns NoEffect and the approval is approved again: the next resume is
// refused stale, and once the state is back it runs once.
func GivesBack(t *testing.T, open func(t *testing.T) store.ApprovalStore) {
	o := &orders{versions: []int{1}, writes: make([][]string, 1), ran: make([]int, 1), running: make([]atomic.Int32, 1), poke: make(chan struct{}, 1)}
	s := open(t)
	eng := newEngine(t, s, o.preview)
	ctx := t.Context()
	id := requestApproved(t, ctx, eng, 0)
	faster := func(ctx context.Context) (any, error) {
		o.set(2) // a writer elsewhere, faster than this write
		return o.refund(0)(ctx)
	}
	if _, err := execute(ctx, eng, 0, id, faster); !errors.Is(err, errChanged) {
		t.Fatalf("the write that found the order changed: %v", err)
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.Status != store.ApprovalApproved || rec.ConsumedBy != "" {
		t.Fatalf("NoEffect must give the approval back at once: %s consumed by %q, %v", rec.Status, rec.ConsumedBy, err)
	}
	if _, err := execute(ctx, eng, 0, id, o.refund(0)); middleware.CodeOf(err) != middleware.CodeApprovalStale {
		t.Errorf("the next resume, the order changed: %v, want APPROVAL_STALE", err)
	}
	o.set(1)
	if _, err := execute(ctx, eng, 0, id, o.refund(0)); err != nil || len(o.writes[0]) != 1 {
		t.Errorf("once the order is as approved: %v, %d writes; want one", err, len(o.writes[0]))
	}
}

// newEngine is one instance of the service: a refund that needs a
// manager's approval and previews the order.
func newEngine(t *testing.T, s store.ApprovalStore, preview func(context.Context, middleware.PreviewInput) (middleware.Preview, error)) *middleware.Engine {
	t.Helper()
	reg := middleware.NewRegistry().Register(Procedure, middleware.Capability{
		SideEffect: middleware.SideEffectExternal,
		Risk:       middleware.RiskHigh,
		Approval:   middleware.Approval{Required: true, Type: "manager"},
		Preview:    preview,
	})
	eng, err := middleware.New(reg,
		middleware.WithApprovalStore(s),
		middleware.WithAudience("orders"),
		middleware.WithProtoFiles(nil), // the procedure is invented: no descriptor
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func execute(ctx context.Context, eng *middleware.Engine, n int, approvalID string, attempt func(context.Context) (any, error)) (middleware.Envelope, error) {
	_, env, err := adapter.Execute(ctx, adapter.Resolve(eng, Procedure), adapter.Call[any]{Input: input(n), ApprovalID: approvalID}, attempt)
	return env, err
}

// requestApproved has the agent ask for the refund of order n and a
// manager approve it, as the order is now.
func requestApproved(t *testing.T, ctx context.Context, eng *middleware.Engine, n int) string {
	t.Helper()
	env, err := execute(ctx, eng, n, "", func(context.Context) (any, error) {
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
