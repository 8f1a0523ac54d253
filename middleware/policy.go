package middleware

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/agentsafe/agentsafe/internal/seam"
)

// Policy decides, per call, whether a governed call may go on: allowed,
// denied, gated behind an approval, or hidden as if the procedure had no
// handler. Install policies with [WithPolicy]. The engine asks them twice
// per call: first as at a listing (Listing set, no input), before anything
// of the call is read, where only a hide counts (SPEC §3 stage 2.0: no
// malformed header, undecodable body or expired deadline may then tell a
// hidden procedure exists); then, after binding the input and before the
// approval gate, with the input. Over MCP they are also asked at every
// tool listing. A policy must be safe for concurrent use.
type Policy interface {
	// Name identifies the policy in events, inventories and drift checks
	// (see [Engine.WriteSnapshot]); unique per engine, and stable across
	// releases, since removing a name reads as a widening.
	Name() string
	// Decide judges one call. An error (or a panic) fails the call closed
	// with POLICY_UNAVAILABLE; nothing runs.
	Decide(ctx context.Context, in PolicyInput) (PolicyDecision, error)
}

// PolicyInput is what a policy may look at. Reading the call's input is
// lazy: Input and Digest run the I-JSON check of the input digest first, so
// a policy never judges a document the engine would refuse to bind (the
// call is then refused with INVALID_ARGUMENT, whatever the policy
// decided). They may only be called during Decide.
type PolicyInput struct {
	// Actor is who the call is for (see [WithActor]).
	Actor Actor
	// Procedure is the governed procedure, "/package.Service/Method" or a
	// net/http route name.
	Procedure string
	// Capability is the procedure's capability, defaults resolved. It must
	// not be modified.
	Capability Capability
	// Surface is where the call came in: rpc, http or mcp.
	Surface Surface
	// Listing is true when the policy is asked without the call's input:
	// whether to list the capability as a tool (MCP tools/list), and at
	// the start of every call whether to hide it. A capability a policy
	// hides at listing is not listed, and its calls are answered as
	// absent before anything of them is read.
	Listing bool
	x       *execution // nil at listing and for calls without input
}

// Input returns the call's input as JSON: a JSON body, or the pinned
// protojson rendering of a protobuf message; nil for an input that is not
// JSON, a call without one, or a listing. It has passed the I-JSON check
// the input digest applies, so it means one thing to every reader.
func (in PolicyInput) Input() ([]byte, error) {
	if in.x == nil {
		return nil, nil
	}
	in.x.extra().inputRead = true
	return in.x.inputJSON()
}

// Digest returns the call's input digest (the one approvals bind to), or
// "" for a call without input and at a listing.
func (in PolicyInput) Digest() (string, error) {
	if in.x == nil {
		return "", nil
	}
	in.x.extra().inputRead = true
	if err := in.x.lazyBind(); err != nil {
		return "", err
	}
	return in.x.digest, nil
}

// PolicyDecision is what a policy decided about one call: [Allow],
// [Deny], [RequireApproval] or [Hide]. The zero value allows. Decisions
// compare with ==.
type PolicyDecision struct {
	verdict verdict
	reason  string
}

// verdict orders the decisions by precedence: a higher one wins.
type verdict uint8

const (
	verdictAllow verdict = iota
	verdictRequireApproval
	verdictDeny
	verdictHide
)

// Allow lets the call go on, as far as this policy is concerned.
func Allow() PolicyDecision { return PolicyDecision{} }

// Deny refuses the call with POLICY_DENIED; reason is the message the
// caller sees. Nothing runs.
func Deny(reason string) PolicyDecision { return PolicyDecision{verdictDeny, reason} }

// RequireApproval gates the call behind a human approval, as
// Approval.Required would; reason is shown to approvers. The engine needs
// an approval store (without one the call fails APPROVAL_UNAVAILABLE).
func RequireApproval(reason string) PolicyDecision {
	return PolicyDecision{verdictRequireApproval, reason}
}

// Hide answers the call exactly as the framework answers a procedure with
// no handler, and leaves it out of MCP tool listings.
func Hide() PolicyDecision { return PolicyDecision{verdict: verdictHide} }

func (d PolicyDecision) String() string {
	switch d.verdict {
	case verdictRequireApproval:
		return "require_approval: " + d.reason
	case verdictDeny:
		return "deny: " + d.reason
	case verdictHide:
		return "hide"
	}
	return "allow"
}

// WithPolicy adds p to the policies every governed call is judged by, in
// the order added. They compose with the precedence hide > deny >
// require_approval > allow, whatever their order: one hide hides (the
// policies after it are not asked), otherwise an error or a panic of any
// fails the call closed with POLICY_UNAVAILABLE (CANCELLED when it failed
// with the context's error because the caller left), otherwise one deny
// denies, and every policy requiring approval adds its reason to the
// approval record. By default there are none. Nil is ignored; an empty or
// repeated name fails [New].
func WithPolicy(p Policy) Option {
	return optionFunc(func(c *config) {
		if p == nil {
			return
		}
		name := p.Name()
		switch {
		case name == "":
			c.problems = append(c.problems, fmt.Sprintf("WithPolicy: a policy of type %T has an empty Name", p))
		case slices.ContainsFunc(c.policies, func(q namedPolicy) bool { return q.name == name }):
			c.problems = append(c.problems, fmt.Sprintf("WithPolicy: two policies are named %q", name))
		}
		c.policies = append(c.policies, namedPolicy{name, p})
	})
}

// namedPolicy is a policy with its name, read once.
type namedPolicy struct {
	name string
	p    Policy
}

// conditionName is the policy name of [WithApprovalCondition].
const conditionName = "approval-condition"

// condition is [WithApprovalCondition] as a policy: it only ever requires
// approval, and says nothing at a listing.
type condition func(ctx context.Context, q ApprovalQuery) (bool, string, error)

func (condition) Name() string { return conditionName }

func (f condition) Decide(ctx context.Context, in PolicyInput) (PolicyDecision, error) {
	if in.Listing {
		return Allow(), nil
	}
	required, reason, err := f(ctx, ApprovalQuery{Procedure: in.Procedure, Capability: in.Capability, Actor: in.Actor, in: in})
	if err != nil || !required {
		return Allow(), err
	}
	return RequireApproval(reason), nil
}

// hidden is the error of a call answered as if the procedure had no
// handler; why is for events only.
func hidden(why string) *Error {
	return &Error{Code: CodeCapabilityNotFound, Message: "no such procedure", Cause: errors.New(why), hidden: true}
}

// hiding is stage 2.0 (SPEC §3, §12): whether the call must look exactly
// like one of a procedure that does not exist. It is decided before
// anything that could tell the procedure exists — before the caller's
// context is checked and before any agentsafe header or the input is read
// — so that no refusal, and no caller who already left, can tell it apart
// (see [Engine.hides]).
func (x *execution) hiding() *Error {
	err := x.e.hides(x.ctx, x.proc(), x.cap, Surface(x.call.Surface), x.actor, x.actorErr())
	x.hidden = err != nil
	return err
}

// hides decides whether a call of proc by actor a on surface s is hidden:
// a surface c is not exposed on hides it before anything else; then every
// policy is asked as at a listing (Listing set, no input; the zero actor
// when the actor function failed, actorErr), and one hide hides. A policy
// that fails there does not hide: the call goes on, and the policies are
// asked again, with the input, at stage 2c. (So a policy that hides by
// asking a service on the caller's context cannot hide from a caller whose
// deadline has already passed: it is told CANCELLED.)
func (e *Engine) hides(ctx context.Context, proc string, c *capability, s Surface, a Actor, actorErr error) *Error {
	if s.valid() && !c.Exposed(s) {
		return hidden(fmt.Sprintf("%s is not exposed on %s", proc, s))
	}
	if len(e.cfg.policies) == 0 {
		return nil
	}
	if actorErr != nil {
		a = Actor{}
	}
	in := PolicyInput{Actor: a, Procedure: proc, Capability: c.resolved(), Surface: s, Listing: true}
	if hider, _ := e.askListing(ctx, in); hider != "" {
		return hidden(fmt.Sprintf("hidden by policy %q", hider))
	}
	return nil
}

// absent is stage 2.0 for an adapter's guard, which sees a call before
// its framework reads any of it. A hidden call is recorded, when record
// is set, as an execution answered as absent (requested and failed,
// through the sinks' queues); for any other nothing is recorded: it goes
// on to Execute, which decides again on the context it has then (an
// interceptor's, maybe, with more to tell the actor by).
func (e *Engine) absent(ctx context.Context, proc string, c *capability, s Surface, record bool) bool {
	if s.valid() && c.Exposed(s) && len(e.cfg.policies) == 0 {
		return false // nothing could hide it: the actor need not be asked
	}
	a, actorErr := e.actorOf(ctx)
	err := e.hides(ctx, proc, c, s, a, actorErr)
	if err == nil || !record {
		return err != nil
	}
	x := e.opened(ctx, proc, seam.Call{Surface: uint8(s)}, c, false, a, actorErr)
	x.hidden = true
	x.requested()
	x.finish(nil, err)
	return true
}

// askListing asks every policy about in, as at a listing, until one hides:
// hider names it; failed reports whether one before it failed. An
// approval condition says nothing at a listing and is not asked.
func (e *Engine) askListing(ctx context.Context, in PolicyInput) (hider string, failed bool) {
	for _, np := range e.cfg.policies {
		if _, cond := np.p.(condition); cond {
			continue // it only gates calls
		}
		d, err := ask(ctx, np, in)
		switch {
		case err != nil:
			failed = true
		case d.verdict == verdictHide:
			return np.name, failed
		}
	}
	return "", failed
}

// decide is stage 2c: the capability's own approval requirement and every
// policy. It returns the reasons an approval is needed (none: the call
// goes on), or the refusal.
func (x *execution) decide() ([]string, *Error) {
	var reasons []string
	if x.cap.Approval.Required {
		reasons = append(reasons, "the capability always requires approval")
	}
	if len(x.e.cfg.policies) == 0 {
		return reasons, nil
	}
	in := x.policyInput()
	var failed, denied error
	var denial string
	for _, np := range x.e.cfg.policies {
		d, err := ask(x.ctx, np, in)
		switch {
		case err != nil:
			failed = errors.Join(failed, err)
		case d.verdict == verdictHide:
			return nil, hidden(fmt.Sprintf("hidden by policy %q", np.name))
		case d.verdict == verdictDeny && denied == nil:
			denied, denial = fmt.Errorf("policy %q denied the call: %s", np.name, d.reason), d.reason
		case d.verdict == verdictRequireApproval:
			reasons = append(reasons, d.reason)
		}
	}
	switch {
	case x.more != nil && x.more.inputRead && x.more.bindErr != nil: // a policy asked for an input that does not bind
		return nil, x.unbound(x.more.bindErr)
	case failed != nil && x.ctx.Err() != nil && (errors.Is(failed, context.Canceled) || errors.Is(failed, context.DeadlineExceeded)):
		return nil, x.cancelled() // the caller left: not the policy's failure
	case failed != nil:
		return nil, &Error{Code: CodePolicyUnavailable, Message: "a policy could not decide on the call; nothing ran", Retryable: true, Cause: failed}
	case denied != nil:
		if denial == "" {
			denial = "a policy denied the call"
		}
		return nil, &Error{Code: CodePolicyDenied, Message: denial, Cause: denied}
	}
	if len(reasons) > 0 && x.digest == "" && x.call.Input != nil {
		// A policy gated a call nothing had bound yet: the approval binds it.
		if err := x.lazyBind(); err != nil {
			return nil, x.unbound(err)
		}
	}
	return reasons, nil
}

// ask runs one policy; a panic in it is its error.
func ask(ctx context.Context, np namedPolicy, in PolicyInput) (d PolicyDecision, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = PolicyDecision{}, fmt.Errorf("policy %q panicked: %v", np.name, p)
		}
	}()
	d, err = np.p.Decide(ctx, in)
	if err != nil {
		err = fmt.Errorf("policy %q: %w", np.name, err)
	}
	return d, err
}

func (x *execution) policyInput() PolicyInput {
	in := PolicyInput{Actor: x.actor, Procedure: x.proc(), Capability: x.cap.resolved(), Surface: Surface(x.call.Surface)}
	if x.call.Input != nil && !x.streaming {
		in.x = x
	}
	return in
}

// lazyBind runs the I-JSON check and the digest of stage 2b for a reader
// that needs them although nothing else did; a failure is kept, so that
// the call is refused.
func (x *execution) lazyBind() error {
	switch {
	case x.digest != "":
		return nil
	case x.bindErr() != nil:
		return x.bindErr()
	}
	d, err := x.call.Input.Digest(x.proc())
	if err != nil {
		x.extra().bindErr = err
		return err
	}
	x.digest, x.eventDigest = d, x.e.keyedDigest(d)
	return nil
}

// inputJSON is the input as JSON for policies, checked first, rendered
// once per execution.
func (x *execution) inputJSON() ([]byte, error) {
	if err := x.lazyBind(); err != nil {
		return nil, err
	}
	m := x.extra()
	if m.json == nil {
		b, err := x.call.Input.JSON()
		if err != nil {
			return nil, err
		}
		m.json = b
	}
	return m.json, nil
}

// unbound is the refusal of a call whose safety depends on an input that
// cannot be bound faithfully.
func (x *execution) unbound(err error) *Error {
	return &Error{Code: CodeInvalidArgument, Message: "the input cannot be bound to an approval: " + err.Error(), Cause: unboundInput{err}}
}

// listed reports whether the capability c of proc is listed as a tool on
// surface s for the caller of ctx: it is exposed there, and no policy
// hides it when asked with Listing set. A policy error, or an actor that
// cannot be told while a policy of the application's would judge it,
// leaves it out: closed.
func (e *Engine) listed(ctx context.Context, proc string, c *capability, s Surface) bool {
	if c == nil || !c.Exposed(s) {
		return false
	}
	if len(e.cfg.policies) == 0 {
		return true
	}
	a, err := e.actorOf(ctx)
	if err != nil { // closed, if a policy of the application's would judge it
		return !slices.ContainsFunc(e.cfg.policies, func(np namedPolicy) bool { _, cond := np.p.(condition); return !cond })
	}
	hider, failed := e.askListing(ctx, PolicyInput{Actor: a, Procedure: proc, Capability: c.resolved(), Surface: s, Listing: true})
	return hider == "" && !failed
}
