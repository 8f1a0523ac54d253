package agentsafecel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
)

// Rule is one decision and the CEL expression that says when it applies.
type Rule struct {
	// When is a CEL expression of type bool over the package's variables.
	When string
	// Then is the decision when When holds: middleware.Hide(),
	// middleware.Deny(reason), middleware.RequireApproval(reason), or
	// middleware.Allow() (which decides nothing).
	Then middleware.PolicyDecision
}

// costLimit bounds the work of one rule's evaluation, so that a rule can
// never stall the calls it judges.
const costLimit = 100_000

// New compiles rules into a policy named name. It reports every rule that
// does not compile or is not of type bool, all at once, naming each.
func New(name string, rules ...Rule) (middleware.Policy, error) {
	if name == "" {
		return nil, errors.New("agentsafecel: a policy needs a name")
	}
	env, err := cel.NewEnv(
		cel.Variable("actor", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("procedure", cel.StringType),
		cel.Variable("capability", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("surface", cel.StringType),
		cel.Variable("listing", cel.BoolType),
		cel.Variable("input", cel.DynType),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		return nil, err
	}
	p := &policy{name: name}
	var problems []error
	for i, r := range rules {
		ast, iss := env.Compile(r.When)
		if iss.Err() != nil {
			problems = append(problems, fmt.Errorf("agentsafecel: %s rule %d %q: %w", name, i, r.When, iss.Err()))
			continue
		}
		if ast.OutputType() != cel.BoolType {
			problems = append(problems, fmt.Errorf("agentsafecel: %s rule %d %q: is of type %s, want bool", name, i, r.When, ast.OutputType()))
			continue
		}
		prg, err := env.Program(ast, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(100))
		if err != nil {
			problems = append(problems, fmt.Errorf("agentsafecel: %s rule %d %q: %w", name, i, r.When, err))
			continue
		}
		if typos := unknownKeys(ast.NativeRep().Expr()); len(typos) > 0 {
			problems = append(problems, fmt.Errorf("agentsafecel: %s rule %d %q: no such key %s", name, i, r.When, strings.Join(typos, ", ")))
			continue
		}
		readsInput := false
		for _, ref := range ast.NativeRep().ReferenceMap() {
			readsInput = readsInput || ref.Name == "input"
		}
		kind, reason := classify(r.Then)
		p.rules = append(p.rules, rule{Rule: r, prg: prg, readsInput: readsInput, kind: kind, reason: reason})
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return p, nil
}

type policy struct {
	name  string
	rules []rule
}

type rule struct {
	Rule
	prg        cel.Program
	readsInput bool
	kind       kind
	reason     string
}

// kind is what a rule's decision does, strongest last.
type kind int

const (
	allow kind = iota
	requireApproval
	deny
	hide
)

// classify reads a decision back: its kind and reason, from its String
// form, checked by making the decision again from them.
func classify(d middleware.PolicyDecision) (kind, string) {
	if d == middleware.Hide() {
		return hide, ""
	}
	if r, ok := strings.CutPrefix(d.String(), "deny: "); ok && d == middleware.Deny(r) {
		return deny, r
	}
	if r, ok := strings.CutPrefix(d.String(), "require_approval: "); ok && d == middleware.RequireApproval(r) {
		return requireApproval, r
	}
	return allow, ""
}

func (p *policy) Name() string { return p.name }

// Decide evaluates every rule and composes what matched, strongest
// first: hide > an error > deny > require_approval > allow. A rule that
// fails to evaluate does not stop the others, so that one failing on the
// caller's input never tells the caller about a procedure a later rule
// hides.
func (p *policy) Decide(ctx context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
	vars := map[string]any{
		"actor":      actor(in.Actor),
		"procedure":  in.Procedure,
		"capability": capability(in.Capability),
		"surface":    in.Surface.String(),
		"listing":    in.Listing,
		"input":      nil,
	}
	var inputErr error
	inputRead := false
	var failed []error
	var denial *string
	var reasons []string
	for i, r := range p.rules {
		if r.readsInput {
			if in.Listing {
				continue // nothing to judge
			}
			if !inputRead {
				vars["input"], inputErr = input(in)
				inputRead = true
				if inputErr != nil {
					failed = append(failed, inputErr)
				}
			}
			if inputErr != nil {
				continue
			}
		}
		out, _, err := r.prg.ContextEval(ctx, vars)
		if err != nil {
			failed = append(failed, fmt.Errorf("rule %d %q: %w", i, r.When, err))
			continue
		}
		if matched, _ := out.Value().(bool); !matched {
			continue
		}
		switch r.kind {
		case hide:
			return middleware.Hide(), nil
		case deny:
			if denial == nil {
				denial = &r.reason
			}
		case requireApproval:
			reasons = append(reasons, r.reason)
		}
	}
	switch {
	case len(failed) > 0:
		return middleware.Allow(), errors.Join(failed...)
	case denial != nil:
		return middleware.Deny(*denial), nil
	case len(reasons) > 0:
		return middleware.RequireApproval(strings.Join(reasons, "; ")), nil
	}
	return middleware.Allow(), nil
}

// input is the call's input, decoded; nil without one.
func input(in middleware.PolicyInput) (any, error) {
	doc, err := in.Input()
	if err != nil || doc == nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// keys are the keys of the variables whose keys are fixed: a rule naming
// another is a typo, which would fail every call it judges.
var keys = map[string][]string{
	"actor":      slices.Sorted(maps.Keys(actor(middleware.Actor{}))),
	"capability": slices.Sorted(maps.Keys(capability(middleware.Capability{}))),
}

// unknownKeys lists what e selects of actor or capability (actor.x,
// has(actor.x), or actor["x"]) that they do not have.
func unknownKeys(e celast.Expr) []string {
	var bad []string
	celast.PreOrderVisit(e, celast.NewExprVisitor(func(e celast.Expr) {
		var variable celast.Expr
		var key string
		switch e.Kind() {
		case celast.SelectKind:
			variable, key = e.AsSelect().Operand(), e.AsSelect().FieldName()
		case celast.CallKind:
			c := e.AsCall()
			if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[1].Kind() != celast.LiteralKind {
				return
			}
			k, ok := c.Args()[1].AsLiteral().Value().(string)
			if !ok {
				return
			}
			variable, key = c.Args()[0], k
		default:
			return
		}
		if variable.Kind() != celast.IdentKind {
			return
		}
		if known, fixed := keys[variable.AsIdent()]; fixed && !slices.Contains(known, key) {
			bad = append(bad, variable.AsIdent()+"."+key)
		}
	}))
	return bad
}

func actor(a middleware.Actor) map[string]any {
	return map[string]any{"id": a.ID, "tenant": a.Tenant, "kind": a.Kind, "onBehalfOf": onBehalfOf(a)}
}

func onBehalfOf(a middleware.Actor) []any {
	out := make([]any, len(a.OnBehalfOf))
	for i, id := range a.OnBehalfOf {
		out[i] = id
	}
	return out
}

func capability(c middleware.Capability) map[string]any {
	return map[string]any{
		"sideEffect":       c.SideEffect.String(),
		"risk":             c.Risk.String(),
		"idempotent":       c.Idempotent,
		"writeLike":        c.SideEffect.WriteLike(),
		"approvalRequired": c.Approval.Required,
		"approvalType":     c.Approval.Type,
		"toolName":         c.ToolName,
		"description":      c.Description,
	}
}
