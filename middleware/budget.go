package middleware

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentsafe/agentsafe/internal/amount"
	"github.com/agentsafe/agentsafe/internal/ids"
	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware/store"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Budget bounds what a capability's calls may spend over a rolling
// window, across every instance that shares the budget store: a loop of
// small calls cannot do what no single call may (twenty refunds of 450).
// A call that would take the window past Limit is refused
// (BUDGET_EXCEEDED, with when to retry) or brought to a person (Over
// "require_approval"): see [WithBudgetStore]. For example, refunds of at
// most 2,500.00 a day for each person an agent acts for, a manager asked
// past that:
//
//	middleware.Budget{Name: "refunds", Limit: 250000, Window: 24 * time.Hour,
//		Per: "person", Amount: "amount_cents", Over: "require_approval"}
type Budget struct {
	// Name identifies the budget. Capabilities that list a budget of the
	// same Name share it, and must agree on its Limit, Window and Per.
	Name string
	// Limit is what the calls may spend within one window: more than 0.
	Limit int64
	// Window is the length of the rolling window: more than 0. A call's
	// reservation counts while its age, by the store's clock, is under
	// Window.
	Window time.Duration
	// Per says whose calls spend together, each key getting the whole
	// limit, from the finest to the coarsest:
	//   - "actor": the whole actor (ID, Tenant, Kind and the OnBehalfOf
	//     chain), as approvals compare it;
	//   - "person": the person an agent acts for, within the tenant: the
	//     last entry of OnBehalfOf (the chain is nearest first), or the ID;
	//   - "tenant": the actor's tenant;
	//   - "audience": everyone the engine serves (see [WithAudience]).
	// Required: "" and any other string are invalid, as [New] reports.
	Per string
	// Amount names what one call spends: for an RPC procedure the dotted
	// path of an integer field of its request message ("amount_cents",
	// "refund.amount_cents"), for a net/http route a JSON Pointer into its
	// JSON body ("/amountCents"). Empty, the default, makes each call
	// spend 1: a call budget, the guard against a runaway loop. A call
	// whose amount is missing, negative, not an integer or beyond int64 is
	// INVALID_ARGUMENT, and nothing runs.
	Amount string
	// Over says what a call that would pass the limit gets:
	//   - "deny", or "" (the default): BUDGET_EXCEEDED (ResourceExhausted,
	//     HTTP 429), with Envelope.RetryAfter when enough of the window
	//     frees; nothing runs;
	//   - "require_approval": the approval gate, the reason naming the
	//     budget, the amount, what is spent and the limit; the approved
	//     resume spends past the limit if need be, recorded as an
	//     overdraft.
	// Any other string is invalid, as [New] reports.
	Over string
}

// The values of [Budget.Per] and [Budget.Over].
const (
	perActor            = "actor"
	perPerson           = "person"
	perTenant           = "tenant"
	perAudience         = "audience"
	overDeny            = "deny"
	overRequireApproval = "require_approval"
)

// budgetPers are the keys of a budget, from the finest to the coarsest.
var budgetPers = [...]string{perActor, perPerson, perTenant, perAudience}

func validPer(p string) bool { return slices.Contains(budgetPers[:], p) }

func validOver(o string) bool { return o == "" || o == overDeny || o == overRequireApproval }

// escalates reports whether a call over b's limit goes to the approval
// gate rather than being refused.
func (b Budget) escalates() bool { return b.Over == overRequireApproval }

// over is b.Over by its name: "" is "deny".
func (b Budget) over() string { return cmp.Or(b.Over, overDeny) }

// WithBudgetStore sets where the reservations of budgets ([Budget]) live
// (package budgetstore: an in-memory store for one process, Redis for
// many; agentsafepg for PostgreSQL). Without one, [New] refuses every
// capability with a budget.
//
// Each call of a capability with budgets reserves its amount on every one
// of them, after the result store (a replay spends nothing) and before
// the approval gate, atomically across instances: in no window do the
// reservations of a budget key exceed its limit, except approved
// overdrafts. Several budgets are reserved in name order, deny budgets
// first, all or none: a refusal gives back those already taken. Once an
// attempt has started, the reservation is spent, whatever the outcome; it
// is given back only when nothing ran (a later refusal, the caller gone
// before the first attempt) or the handler returned [NoEffect]. A store
// that fails is BUDGET_UNAVAILABLE, and nothing runs; a lost reply is
// asked again for the same execution before that.
func WithBudgetStore(s store.BudgetStore) Option {
	return optionFunc(func(c *config) { c.budgets = s })
}

// budgetRule is a validated Budget of one capability.
type budgetRule struct {
	Budget
	// key is the budget key of a perAudience budget: the same for every
	// call.
	key string
	// last is the key of the actor that called last: a loop of calls by
	// one agent, what budgets are for, derives its key once.
	last atomic.Pointer[actorKey]
}

// actorKey is a budget key and the actor it was derived for.
type actorKey struct {
	actor Actor
	key   string
}

// resolveBudgets orders a capability's budgets as they are reserved: deny
// budgets first, so that one over its limit refuses before any
// require_approval budget escalates, each kind in name order.
func (e *Engine) resolveBudgets(bs []Budget) []*budgetRule {
	if len(bs) == 0 {
		return nil
	}
	out := make([]*budgetRule, len(bs))
	for i, b := range bs {
		out[i] = &budgetRule{Budget: b}
		if b.Per == perAudience {
			out[i].key = budgetKey(e.cfg.audience, b, Actor{})
		}
	}
	slices.SortStableFunc(out, func(a, b *budgetRule) int {
		return cmp.Or(compareBool(a.escalates(), b.escalates()), strings.Compare(a.Name, b.Name)) // deny first
	})
	return out
}

// budgetKey is the store's key of budget b for actor a, in audience: who
// spends together under b.Per, never shared across budgets or audiences.
func budgetKey(audience string, b Budget, a Actor) string {
	var buf [12]string // on the stack for a chain of up to four: a key is derived on every call
	parts := append(buf[:0], "budget", audience, b.Name, b.Per)
	switch b.Per {
	case perActor:
		parts = append(parts, a.ID, a.Tenant, a.Kind, strconv.Itoa(len(a.OnBehalfOf)))
		parts = append(parts, a.OnBehalfOf...)
	case perPerson:
		parts = append(parts, a.Tenant, person(a))
	case perTenant:
		parts = append(parts, a.Tenant)
	}
	return ids.Derive(store.BudgetKeyPrefix, parts...)
}

// person is who an actor acts for: the last entry of its chain (nearest
// first), or itself.
func person(a Actor) string {
	if n := len(a.OnBehalfOf); n > 0 {
		return a.OnBehalfOf[n-1]
	}
	return a.ID
}

func (x *execution) budgetKey(r *budgetRule) string {
	if r.key != "" {
		return r.key
	}
	if last := r.last.Load(); last != nil && store.SameActor(last.actor, x.actor) {
		return last.key
	}
	key := budgetKey(x.e.cfg.audience, r.Budget, x.actor)
	r.last.Store(&actorKey{actor: x.actor, key: key})
	return key
}

// spend is what an execution did with one budget of its capability.
type spend struct {
	rule   *budgetRule
	key    string
	amount int64
	// spent is what the window held at the step: with this execution's
	// reservation when reserved, without it when refused.
	spent     int64
	reserved  bool
	overdraft bool
	// escalated: over a require_approval budget's limit, so reserved as
	// an overdraft once an approval is consumed.
	escalated bool
}

// budgetRetries are the waits before the engine re-issues a Reserve
// whose reply was lost, as for Consume: at most three tries.
var budgetRetries = consumeRetries

// reserveBudgets is stage 2e: reserve the call's amount on every budget
// of its capability, deny budgets first. A deny budget over its limit
// refuses the call (BUDGET_EXCEEDED); a require_approval one adds a
// reason for the approval gate, and is reserved as an overdraft once the
// approval is consumed (overdraw). Nothing has run when it refuses; what
// was reserved is given back when the execution finalizes.
func (x *execution) reserveBudgets() ([]string, *Error) {
	rules := x.cap.budgets
	if len(rules) == 0 {
		return nil, nil
	}
	budgets := x.e.cfg.budgets
	if budgets == nil { // New refuses this; never trust that it ran
		return nil, &Error{Code: CodeBudgetUnavailable, Message: "the capability has budgets, but this engine has no budget store (WithBudgetStore)", Retryable: true}
	}
	x.spends = make([]spend, len(rules))
	var reasons []string
	for i, r := range rules {
		n, err := x.amountOf(i, r)
		if err != nil {
			return nil, err
		}
		s := &x.spends[i]
		s.rule, s.key, s.amount = r, x.budgetKey(r), n
		res, err := x.reserve(budgets, store.BudgetRequest{Key: s.key, ExecutionID: x.id, Amount: n, Limit: r.Limit, Window: r.Window})
		if err != nil {
			return nil, err
		}
		s.spent = res.Spent
		if res.Reserved {
			s.reserved, s.overdraft = true, res.Overdraft
			continue
		}
		x.emit(Event{Type: EventBudgetExceeded, Budget: r.Name, Amount: n, Spent: res.Spent, Limit: r.Limit, RetryAfter: res.RetryAfter})
		if !r.escalates() {
			return nil, &Error{Code: CodeBudgetExceeded, retryAfter: res.RetryAfter, Message: x.exceeded(s, res.RetryAfter)}
		}
		s.escalated = true
		reasons = append(reasons, fmt.Sprintf("budget %q: this call spends %d; %d of its limit of %d are spent in the last %s (per %s)",
			r.Name, n, res.Spent, r.Limit, r.Window, r.Per))
	}
	return reasons, nil
}

// exceeded is the message of a call refused by a deny budget.
func (x *execution) exceeded(s *spend, retryAfter time.Duration) string {
	r := s.rule
	msg := fmt.Sprintf("budget %q is exhausted: this call spends %d, and %d of its limit of %d are spent in the last %s (per %s); nothing ran",
		r.Name, s.amount, s.spent, r.Limit, r.Window, r.Per)
	if retryAfter > 0 {
		return msg + fmt.Sprintf("; enough frees in %s", retryAfter.Round(time.Second))
	}
	if s.amount > r.Limit {
		return msg + "; the amount is over the limit: it never fits"
	}
	return msg
}

// amountOf reads what the call spends on budget i: 1 for a call budget,
// else the amount at its path, read from the input the digest bound (an
// amount read for an earlier budget on the same path is read once).
func (x *execution) amountOf(i int, r *budgetRule) (int64, *Error) {
	if r.Amount == "" {
		return 1, nil
	}
	for j := range i {
		if s := &x.spends[j]; s.rule.Amount == r.Amount {
			return s.amount, nil
		}
	}
	if x.call.Input == nil || x.digest == "" { // bind computed the digest for every input that binds
		return 0, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("budget %q spends %s, and the call has no input to read it from; nothing ran", r.Name, r.Amount)}
	}
	var n int64
	var err error
	if reader, ok := x.call.Input.(seam.AmountReader); ok {
		n, err = reader.Amount(r.Amount)
	} else {
		var doc []byte
		if doc, err = x.call.Input.JSON(); err == nil {
			n, err = amount.JSON(doc, r.Amount)
		}
	}
	if err != nil {
		return 0, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("budget %q: %v; nothing ran", r.Name, err), Cause: err}
	}
	return n, nil
}

// reserve calls the store's Reserve, re-issuing it for the same execution
// (Reserve is idempotent per execution) when the store failed rather than
// answered, within the caller's deadline. If every try failed, a try whose
// reply was lost may have reserved: it is released in the background, a
// no-op unless this execution holds a reservation.
func (x *execution) reserve(budgets store.BudgetStore, req store.BudgetRequest) (store.BudgetReservation, *Error) {
	for try := 0; ; try++ {
		res, err := budgets.Reserve(x.ctx, req)
		if err == nil {
			return res, nil
		}
		if x.ctx.Err() != nil || try == len(budgetRetries) || !x.sleepWithin(budgetRetries[try]) {
			x.e.releaseBudget(x.ctx, req)
			if x.ctx.Err() != nil {
				return res, x.cancelled()
			}
			return res, &Error{Code: CodeBudgetUnavailable, Retryable: true, Message: "the budget store is unavailable; nothing ran", Cause: err}
		}
	}
}

// overdraw runs after the approval gate consumed an approval for a call
// that a require_approval budget escalated: the approved call spends past
// the limit if need be, recorded as an overdraft. If the store fails, the
// approval is given back: nothing ran.
func (x *execution) overdraw() *Error {
	for i := range x.spends {
		s := &x.spends[i]
		if !s.escalated {
			continue
		}
		res, err := x.reserve(x.e.cfg.budgets, store.BudgetRequest{Key: s.key, ExecutionID: x.id, Amount: s.amount,
			Limit: s.rule.Limit, Window: s.rule.Window, Overdraft: true})
		if err != nil {
			x.giveBack()
			return err
		}
		s.spent, s.reserved, s.overdraft = res.Spent, res.Reserved, res.Overdraft
	}
	return nil
}

// budgetFields fills the budget fields of ev (capability.started) with
// the reserved budget nearest its limit: the largest share spent.
func (x *execution) budgetFields(ev *Event) {
	var tight *spend
	share := func(s *spend) float64 { return float64(s.spent) / float64(s.rule.Limit) }
	for i := range x.spends {
		s := &x.spends[i]
		if s.reserved && (tight == nil || share(s) > share(tight)) {
			tight = s
		}
	}
	if tight != nil {
		ev.Budget, ev.Amount, ev.Spent, ev.Limit = tight.rule.Name, tight.amount, tight.spent, tight.rule.Limit
	}
}

// settleBudgets is part of stage 6: the reservations of an execution in
// which nothing ran, or whose every attempt returned [NoEffect], are given
// back now (a repeat right after must find them free), bounded, outside
// the caller's context. A failed release leaves the amount spent until it
// ages out of the window: the budget errs on the side of less.
func (x *execution) settleBudgets() {
	if len(x.spends) == 0 || !x.hadNoEffect() {
		return
	}
	for i := range x.spends {
		if s := &x.spends[i]; s.reserved {
			s.reserved = false
			req := store.BudgetRequest{Key: s.key, ExecutionID: x.id, Amount: s.amount}
			x.writeStore(func(ctx context.Context) error { return x.e.cfg.budgets.Release(ctx, req) })
		}
	}
}

// releaseBudget gives back what a Reserve whose reply was lost may have
// reserved, in the background, bounded.
func (e *Engine) releaseBudget(ctx context.Context, req store.BudgetRequest) {
	inBackground(ctx, func(ctx context.Context) error { return e.cfg.budgets.Release(ctx, req) })
}

// Budget reads what is left of the budget named name for the key actor
// spends under (see [Budget.Per]): its limit less what the reservations
// within its window add up to, by the store's clock. It is negative after
// an approved overdraft. The budget must be one a capability of the
// engine lists.
func (e *Engine) Budget(ctx context.Context, name string, actor Actor) (left int64, err error) {
	r, ok := e.budgetsByName[name]
	if !ok {
		return 0, fmt.Errorf("agentsafe: no capability of this engine has a budget named %q", name)
	}
	if e.cfg.budgets == nil {
		return 0, errors.New("agentsafe: this engine has no budget store (WithBudgetStore)")
	}
	u, err := e.cfg.budgets.Read(ctx, budgetKey(e.cfg.audience, r, actor), r.Window)
	if err != nil {
		return 0, err
	}
	return r.Limit - u.Spent, nil
}

// checkBudgets appends every problem of c's budgets to problems. input is
// the request message of an RPC procedure, when the engine knows it (nil
// for a net/http route, or with WithProtoFiles(nil)).
func checkBudgets(procedure, source string, c Capability, input protoreflect.MessageDescriptor, problems []*FieldError) []*FieldError {
	seen := map[string]bool{}
	for i, b := range c.Budgets {
		field := fmt.Sprintf("Budgets[%d]", i)
		if b.Name != "" {
			field = fmt.Sprintf("Budgets[%s]", b.Name)
		}
		add := func(sub, format string, args ...any) {
			problems = append(problems, &FieldError{procedure, source, field + sub, fmt.Sprintf(format, args...)})
		}
		switch {
		case b.Name == "":
			add(".Name", "must not be empty: capabilities share a budget by its name")
		case seen[b.Name]:
			add(".Name", "is listed twice on this capability")
		}
		seen[b.Name] = true
		if b.Limit <= 0 {
			add(".Limit", "must be more than 0 (got %d)", b.Limit)
		}
		if b.Window <= 0 {
			add(".Window", "must be more than 0 (got %s)", b.Window)
		}
		if !validPer(b.Per) {
			add(".Per", "must be one of actor, person, tenant, audience (got %q)", b.Per)
		}
		if !validOver(b.Over) {
			add(".Over", "must be deny or require_approval (got %q)", b.Over)
		}
		if c.Streaming {
			add("", "a streaming procedure cannot have a budget: a stream has no one input to spend by, and is never refused once it runs")
		}
		if b.Amount != "" {
			if err := checkAmount(procedure, b.Amount, input); err != nil {
				add(".Amount", "%v", err)
			}
		}
	}
	return problems
}

// checkAmount reports why path cannot name the amount of procedure's
// calls: an integer field of the request message for an RPC procedure
// (checked when the engine knows the message), a JSON Pointer for a
// net/http route.
func checkAmount(procedure, path string, input protoreflect.MessageDescriptor) error {
	if !rpcName.MatchString(procedure) {
		return amount.CheckPointer(path)
	}
	if input == nil {
		// No descriptor to check it against (WithProtoFiles(nil)): the
		// call's input reads it, and one without it is refused.
		if strings.HasPrefix(path, "/") {
			return amount.CheckPointer(path)
		}
		if slices.Contains(strings.Split(path, "."), "") {
			return fmt.Errorf("%q is not a dotted path of field names, like \"refund.amount_cents\"", path)
		}
		return nil
	}
	return amount.CheckProto(input, path)
}

// agreeBudgets reports budgets that share a name but not their Limit,
// Window or Per: one budget key would hold two meanings.
func agreeBudgets(caps map[string]Capability, problems []*FieldError) []*FieldError {
	first := map[string]Budget{}
	firstAt := map[string]string{}
	for _, proc := range slices.Sorted(maps.Keys(caps)) {
		for _, b := range caps[proc].Budgets {
			f, ok := first[b.Name]
			if !ok {
				first[b.Name], firstAt[b.Name] = b, proc
				continue
			}
			if f.Limit != b.Limit || f.Window != b.Window || f.Per != b.Per {
				problems = append(problems, &FieldError{proc, "engine", "Budgets[" + b.Name + "]", fmt.Sprintf(
					"shares its name with the budget of %s, so it must agree on Limit, Window and Per (%d per %s over %s there, %d per %s over %s here)",
					firstAt[b.Name], f.Limit, f.Per, f.Window, b.Limit, b.Per, b.Window)})
			}
		}
	}
	return problems
}

// budgetProblems reports what budgets need of the engine's configuration:
// a budget store, and an approval store for require_approval budgets.
func (c *config) budgetProblems(caps map[string]Capability) []error {
	var errs []error
	local := false
	for _, proc := range slices.Sorted(maps.Keys(caps)) {
		for _, b := range caps[proc].Budgets {
			field := "Budgets[" + b.Name + "]"
			if c.budgets == nil {
				errs = append(errs, &FieldError{proc, "engine", field, "needs a budget store, and the engine has none: add WithBudgetStore (budgetstore.NewMemory for one process, budgetstore.NewRedis for many)"})
			}
			if b.escalates() && c.store == nil {
				errs = append(errs, &FieldError{proc, "engine", field + ".Over", "require_approval needs an approval store, and the engine has none: add WithApprovalStore"})
			}
			local = true
		}
	}
	if l, ok := c.budgets.(interface{ ProcessLocal() bool }); len(errs) == 0 && local && ok && l.ProcessLocal() {
		c.logger.Warn("agentsafe: budgets are kept in this process only (the memory budget store): every instance gets each limit again, and a restart forgets what was spent; use budgetstore.NewRedis to share them")
	}
	return errs
}

// budgetsByName indexes the budgets of caps by name (New has checked that
// budgets sharing a name agree).
func budgetsByName(caps map[string]Capability) map[string]Budget {
	out := map[string]Budget{}
	for _, c := range caps {
		for _, b := range c.Budgets {
			out[b.Name] = b
		}
	}
	return out
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
