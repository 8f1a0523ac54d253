package middleware

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	retry "github.com/sethvargo/go-retry"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Engine runs governed executions. Build one with [New]; it is safe for
// concurrent use and holds no per-call state.
type Engine struct {
	cfg   config
	caps  map[string]*capability
	sinks []*sinkQueue
	audit *sinkQueue // also in sinks
	// traceSink is the tracer, when it also receives events (see Tracer).
	traceSink EventSink
	// observed: someone receives events, so they are built at all.
	observed bool
	// workers run the attempts (see attemptWorkers).
	workers *attemptWorkers
	// realClock: the clock is time.Now, so an execution's start time tells
	// whether it runs in a testing/synctest bubble (see bubbled).
	realClock bool
	// undeclared names procedures whose linked descriptor carries the
	// capability option although the engine was built from other files:
	// they fail closed instead of running ungoverned.
	undeclared map[string]bool

	// decisions wakes the gates waiting for a decision (wait.go).
	decisions decisionSignal
	// budgetsByName are the budgets of the capabilities, for Budget.
	budgetsByName map[string]Budget
}

// capability is a validated Capability with its defaults resolved, plus the
// run-time state the engine keeps per procedure.
type capability struct {
	Capability
	procedure string
	// timeout of one attempt, backoff base and approval expiry, resolved
	// against the engine defaults.
	timeout   time.Duration
	backoff   time.Duration
	expiresIn time.Duration
	// explicitTimeout is what a stream honours: a timeout only if set.
	explicitTimeout time.Duration
	// lease bounds an execution that consumed an approval (see Engine.lease).
	lease time.Duration
	// abandoned counts attempts left behind at their deadline that have not
	// returned yet.
	abandoned atomic.Int64
	// overrunWarned is when the engine last warned that an Inline attempt
	// overran its deadline (unix nanoseconds; 0: never).
	overrunWarned atomic.Int64
	// route is what adapters resolve the procedure to.
	route *route
	// budgets are the capability's budgets in the order they are
	// reserved; bindsInput is set when one reads the input or may need
	// an approval, so the input must bind.
	budgets    []*budgetRule
	bindsInput bool
	// previewWarned is when the engine last warned that the capability's
	// preview returned a text approvers cannot be shown (preview.go).
	previewWarned atomic.Int64
}

// New validates every capability of reg (which may be nil) and of the
// protobuf method options it finds (in protoregistry.GlobalFiles unless
// [WithProtoFiles] says otherwise), and returns an engine. A registry entry
// replaces the option of the same procedure as a whole. All problems,
// options included, are reported at once, in a *[ValidationError] whose
// entries name procedure and field.
func New(reg *Registry, opts ...Option) (*Engine, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	var errs []error
	for _, p := range cfg.problems {
		errs = append(errs, errors.New("agentsafe: "+p))
	}
	files := protoregistry.GlobalFiles
	if cfg.filesSet {
		files = cfg.files
	}
	merged, err := buildCapabilities(scanOptions(files), reg)
	undeclared := undeclaredOptions(files, merged)
	if err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, cfg.storeProblems(merged)...)
	errs = append(errs, cfg.resultProblems(merged)...)
	errs = append(errs, cfg.budgetProblems(merged)...)
	errs = append(errs, cfg.previewProblems(merged)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cfg.warn(merged)
	e := &Engine{cfg: cfg, caps: make(map[string]*capability, len(merged)), undeclared: undeclared, workers: newAttemptWorkers(),
		realClock: reflect.ValueOf(cfg.now).Pointer() == reflect.ValueOf(time.Now).Pointer(), budgetsByName: budgetsByName(merged)}
	for proc, c := range merged {
		e.caps[proc] = e.resolve(proc, c)
	}
	sinks := cfg.sinks
	if cfg.audit != nil {
		sinks = append(sinks, *cfg.audit)
	}
	e.traceSink, _ = cfg.tracer.(EventSink)
	e.observed = len(sinks) > 0 || e.traceSink != nil
	for _, sc := range sinks {
		q := newSinkQueue(sc.name, sc.call, sc.timeout, sc.queue, cfg.logger)
		q.inline = sc.inline
		e.sinks = append(e.sinks, q)
		if sc.audit != nil {
			q.audit = newAuditWriter(sc.audit)
			e.audit = q
		}
	}
	return e, nil
}

// storeProblems reports what needs an approval store on an engine without
// one: it would fail every such call at run time.
func (c *config) storeProblems(caps map[string]Capability) []error {
	if c.store != nil {
		return nil
	}
	var errs []error
	if c.condition {
		errs = append(errs, errors.New("agentsafe: WithApprovalCondition needs an approval store: add WithApprovalStore (approvalstore.NewMemory for one process, approvalstore.NewRedis for many)"))
	}
	for _, proc := range slices.Sorted(maps.Keys(caps)) {
		if caps[proc].Approval.Required {
			errs = append(errs, &FieldError{proc, "engine", "Approval.Required", "needs an approval store, and the engine has none: add WithApprovalStore (approvalstore.NewMemory for one process, approvalstore.NewRedis for many)"})
		}
	}
	return errs
}

// warn logs, once each, the configurations that are legal but risky.
func (c *config) warn(caps map[string]Capability) {
	if c.filesSet && c.files == nil {
		for proc := range caps {
			if rpcName.MatchString(proc) {
				c.logger.Warn("agentsafe: WithProtoFiles(nil): registry names of RPC procedures are not checked against any descriptor, so a misspelt one leaves its method ungoverned", "first", proc)
				break
			}
		}
	}
	gated := c.condition
	var unaudited []string
	for _, proc := range slices.Sorted(maps.Keys(caps)) {
		gated = gated || caps[proc].Approval.Required
		if caps[proc].SideEffect.WriteLike() && len(c.sinks) == 0 && c.audit == nil {
			unaudited = append(unaudited, proc)
		}
	}
	if l, ok := c.store.(interface{ ProcessLocal() bool }); gated && ok && l.ProcessLocal() {
		c.logger.Warn("agentsafe: approvals are kept in this process only (the memory store): a restart loses them and other instances never see them; use approvalstore.NewRedis to share them")
	}
	if len(unaudited) > 0 {
		c.logger.Warn("agentsafe: write-like capabilities have no event sink, so their executions leave no audit trail (WithEventSink)", "count", len(unaudited), "first", unaudited[0])
	}
	if (len(c.sinks) > 0 || c.audit != nil || c.tracer != nil) && len(c.digestKey) == 0 {
		c.logger.Warn("agentsafe: events carry the plain input digest, which can be guessed back for small inputs; set a deployment key with WithDigestKey")
	}
}

func (e *Engine) resolve(proc string, c Capability) *capability {
	c.Exposure = slices.Clone(c.Exposure) // the registry is read once: the caller's slice stays theirs
	c.Budgets = slices.Clone(c.Budgets)
	rc := &capability{Capability: c, procedure: proc, timeout: c.Timeout, backoff: c.Retry.Backoff, expiresIn: c.Approval.ExpiresIn, explicitTimeout: c.Timeout}
	if rc.timeout == 0 {
		rc.timeout = e.cfg.defaultTimeout
	}
	if rc.backoff == 0 {
		rc.backoff = e.cfg.defaultBackoff
	}
	if rc.expiresIn == 0 {
		rc.expiresIn = e.cfg.defaultExpiry
	}
	rc.lease = e.lease(rc)
	rc.budgets = e.resolveBudgets(c.Budgets)
	for _, b := range c.Budgets {
		rc.bindsInput = rc.bindsInput || b.Amount != "" || b.escalates()
	}
	rc.route = &route{e: e, proc: proc, cap: rc, governed: true}
	return rc
}

func (c *capability) resolved() Capability {
	out := c.Capability
	out.Timeout, out.Retry.Backoff, out.Approval.ExpiresIn = c.timeout, c.backoff, c.expiresIn
	// Zero means the default quorum, one approver.
	out.Approval.Quorum = max(out.Approval.Quorum, 1)
	out.Exposure = slices.Clone(c.Exposure) // a reader's copy can never change where it is served
	out.Budgets = slices.Clone(c.Budgets)
	return out
}

// governs reports whether a call to procedure ends in an envelope: it has a
// capability, its linked descriptor declares one the engine was not built
// with (such a call fails closed), or the engine is strict and the
// procedure is not exempt.
func (e *Engine) governs(procedure string) bool {
	if _, ok := e.caps[procedure]; ok || e.undeclared[procedure] {
		return true
	}
	return e.cfg.strict && !exempt(procedure)
}

// exempt lists the procedures strict mode never refuses: infrastructure a
// load balancer or tool calls without metadata.
func exempt(procedure string) bool {
	return strings.HasPrefix(procedure, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(procedure, "/grpc.reflection.v1.ServerReflection/") ||
		strings.HasPrefix(procedure, "/grpc.reflection.v1alpha.ServerReflection/")
}

// Capabilities iterates every governed procedure and its capability (defaults
// resolved), sorted by procedure. Use [Capability.Hints] for tool listings.
func (e *Engine) Capabilities() iter.Seq2[string, Capability] {
	return func(yield func(string, Capability) bool) {
		for _, proc := range sortedKeys(e.caps) {
			if !yield(proc, e.caps[proc].resolved()) {
				return
			}
		}
	}
}

// newBackoff returns the backoff sequence of one execution: exponential from
// the capability's base, capped, with optional jitter. A go-retry Backoff
// holds state, so every execution gets its own.
func (e *Engine) newBackoff(base time.Duration) retry.Backoff {
	b := retry.WithCappedDuration(e.cfg.maxBackoff, retry.NewExponential(base))
	if e.cfg.jitter > 0 {
		b = retry.WithCappedDuration(e.cfg.maxBackoff, retry.WithJitter(e.cfg.jitter, b))
	}
	return b
}

func (e *Engine) String() string {
	return fmt.Sprintf("agentsafe.Engine(%d capabilities, strict=%t)", len(e.caps), e.cfg.strict)
}
