package middleware

import (
	"fmt"
	"iter"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Registry holds capabilities by procedure name: for services without
// method options, for net/http routes, and to override options. An entry
// replaces an option's capability as a whole. Registering records; nothing
// is checked until [New] validates every entry at once.
//
// The zero value is ready to use. A Registry is not safe for concurrent
// registration; build it before the engine.
type Registry struct {
	entries []registryEntry
}

type registryEntry struct {
	procedure string
	cap       Capability
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Register adds the capability of procedure and returns r, so registrations
// chain. Procedure names are "/package.Service/Method" for RPC frameworks
// (a name of that shape must name a method of the descriptors the engine
// knows, leading slash included: [New] refuses a typo rather than leave the
// method ungoverned) and any other name the application chooses for
// net/http routes. The registry is read once, by New: registering after
// that has no effect on the engine.
func (r *Registry) Register(procedure string, c Capability) *Registry {
	r.entries = append(r.entries, registryEntry{procedure, c})
	return r
}

// All iterates the registered capabilities in registration order.
func (r *Registry) All() iter.Seq2[string, Capability] {
	return func(yield func(string, Capability) bool) {
		if r == nil {
			return
		}
		for _, e := range r.entries {
			if !yield(e.procedure, e.cap) {
				return
			}
		}
	}
}

// ValidationError lists every problem found when building an engine. It
// unwraps to one *FieldError per problem, so errors.As finds any of them.
type ValidationError struct {
	Problems []*FieldError
}

func (v *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agentsafe: %d invalid capability metadata problem(s):", len(v.Problems))
	for _, p := range v.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the individual problems, for errors.Is and errors.As.
func (v *ValidationError) Unwrap() []error {
	errs := make([]error, len(v.Problems))
	for i, p := range v.Problems {
		errs[i] = p
	}
	return errs
}

// FieldError is one problem with one field of one procedure's capability.
type FieldError struct {
	Procedure string
	// Source says where the capability came from: "registry" or "option";
	// "engine" for what the engine's configuration lacks for it.
	Source  string
	Field   string
	Problem string
}

func (f *FieldError) Error() string {
	return fmt.Sprintf("%s (%s): %s: %s", f.Procedure, f.Source, f.Field, f.Problem)
}

// validate appends every problem of c to problems.
func validate(procedure, source string, c Capability, problems []*FieldError) []*FieldError {
	add := func(field, format string, args ...any) {
		problems = append(problems, &FieldError{procedure, source, field, fmt.Sprintf(format, args...)})
	}
	if procedure == "" {
		add("Procedure", "must not be empty")
	}
	if !c.SideEffect.valid() {
		add("SideEffect", "must be one of none, read, write, destructive, external (got %s); it is never inferred", c.SideEffect)
	}
	if !c.Risk.valid() {
		add("Risk", "must be one of low, medium, high, critical (got %s)", c.Risk)
	}
	if c.Timeout < 0 {
		add("Timeout", "must not be negative (got %s)", c.Timeout)
	}
	if c.Retry.MaxRetries < 0 {
		add("Retry.MaxRetries", "must not be negative (got %d)", c.Retry.MaxRetries)
	}
	if c.Retry.Backoff < 0 {
		add("Retry.Backoff", "must not be negative (got %s)", c.Retry.Backoff)
	}
	if c.Dedup < 0 {
		add("Dedup", "must not be negative (got %s)", c.Dedup)
	}
	for _, s := range c.Exposure {
		if !s.valid() {
			add("Exposure", "must list rpc, http or mcp (got %s)", s)
		}
	}
	if c.Approval.Quorum < 0 {
		add("Approval.Quorum", "must not be negative (got %d)", c.Approval.Quorum)
	}
	if c.Approval.ExpiresIn < 0 {
		add("Approval.ExpiresIn", "must not be negative (got %s)", c.Approval.ExpiresIn)
	}
	if c.Retry.MaxRetries > 0 && c.SideEffect.WriteLike() && !c.Idempotent {
		add("Retry.MaxRetries", "side effect %s is write-like: it may only be retried when declared Idempotent (got MaxRetries %d without Idempotent)", c.SideEffect, c.Retry.MaxRetries)
	}
	if c.Approval.Required && c.Streaming {
		add("Approval.Required", "a streaming procedure cannot require approval: an approval binds one input")
	}
	return problems
}

// rpcName matches the procedure names of RPC frameworks, with or without
// their leading slash; every other name is a net/http route name.
var rpcName = regexp.MustCompile(`^/?[A-Za-z_]\w*(\.[A-Za-z_]\w*)+/[A-Za-z_]\w*$`)

// checkName reports a registry name that looks like an RPC name but could
// never match a call: a typo must never leave a method ungoverned. With
// known == nil (WithProtoFiles(nil)) existence is not checked.
func checkName(procedure string, known map[string]bool, problems []*FieldError) []*FieldError {
	if !rpcName.MatchString(procedure) {
		return problems
	}
	add := func(format string, args ...any) {
		problems = append(problems, &FieldError{procedure, "registry", "Procedure", fmt.Sprintf(format, args...)})
	}
	if !strings.HasPrefix(procedure, "/") {
		add("an RPC procedure name starts with a slash: register %q", "/"+procedure)
		return problems
	}
	if known != nil && !known[procedure] {
		add("names no method of the protobuf descriptors the engine knows: check the spelling, link the service's generated package, or pass its files with WithProtoFiles")
	}
	return problems
}

// buildCapabilities validates the option capabilities and the registry and
// merges them, the registry winning. It reports every problem at once.
func buildCapabilities(found scanned, reg *Registry) (map[string]Capability, error) {
	problems := found.problems
	caps := make(map[string]Capability, len(found.entries))
	for _, e := range found.entries {
		problems = validate(e.procedure, "option", e.cap, problems)
		problems = checkBudgets(e.procedure, "option", e.cap, found.inputs[e.procedure], problems)
		caps[e.procedure] = e.cap
	}
	seen := make(map[string]bool)
	if reg != nil {
		for _, e := range reg.entries {
			if seen[e.procedure] {
				problems = append(problems, &FieldError{e.procedure, "registry", "Procedure", "registered more than once"})
				continue
			}
			seen[e.procedure] = true
			problems = checkName(e.procedure, found.methods, problems)
			c := e.cap
			if found.streaming[e.procedure] {
				c.Streaming = true // the descriptor knows; a Go value cannot say "unset"
			}
			problems = validate(e.procedure, "registry", c, problems)
			problems = checkBudgets(e.procedure, "registry", c, found.inputs[e.procedure], problems)
			if found.noSideEffects[e.procedure] && c.SideEffect.WriteLike() {
				problems = append(problems, &FieldError{e.procedure, "registry", "SideEffect",
					fmt.Sprintf("%s is write-like, but the method declares idempotency_level = NO_SIDE_EFFECTS", c.SideEffect)})
			}
			caps[e.procedure] = c
		}
	}
	problems = agreeBudgets(caps, problems)
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b *FieldError) int { return strings.Compare(a.Procedure, b.Procedure) })
		return nil, &ValidationError{Problems: problems}
	}
	return caps, nil
}

func sortedKeys(m map[string]*capability) []string {
	return slices.Sorted(maps.Keys(m))
}
