package middleware

import (
	"fmt"
	"time"

	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// WithProtoFiles makes the engine read method options from files instead of
// protoregistry.GlobalFiles; registry entries with RPC names must name
// methods of files. Nil turns option scanning off, leaving only the
// registry, and with it the check that RPC names exist (logged once as a
// warning at start-up).
func WithProtoFiles(files *protoregistry.Files) Option {
	return optionFunc(func(c *config) { c.files, c.filesSet = files, true })
}

// procedureOf returns the procedure name of a method: "/package.Service/Method".
func procedureOf(md protoreflect.MethodDescriptor) string {
	return "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
}

// capabilityFromOptions reads the agentsafe.v1.capability option of md. It
// reports false when the method carries none. The capability is not
// validated here; [New] validates every one it finds. The problems returned
// are what no Capability can express (a malformed duration, an
// idempotency_level that contradicts the side effect); New reports them with
// the others.
func capabilityFromOptions(md protoreflect.MethodDescriptor) (Capability, bool, []*FieldError) {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil || !proto.HasExtension(opts, agentsafev1.E_Capability) {
		return Capability{}, false, nil
	}
	pc, _ := proto.GetExtension(opts, agentsafev1.E_Capability).(*agentsafev1.Capability)
	proc := procedureOf(md)
	var problems []*FieldError
	bad := func(field, format string, args ...any) {
		problems = append(problems, &FieldError{proc, "option", field, fmt.Sprintf(format, args...)})
	}
	c := Capability{
		Description: pc.GetDescription(),
		Idempotent:  pc.GetIdempotent(),
		Inline:      pc.GetInline(),
		ToolName:    pc.GetToolName(),
		Streaming:   md.IsStreamingClient() || md.IsStreamingServer(),
		Retry:       Retry{MaxRetries: int(pc.GetRetry().GetMaxRetries())},
		Approval:    Approval{Required: pc.GetApproval().GetRequired(), Type: pc.GetApproval().GetType(), Quorum: int(pc.GetApproval().GetQuorum())},
	}
	// The enums share their numbering with SideEffect, Risk (shifted by the
	// unspecified value) and Surface, so unknown numbers up to 255 become
	// invalid values that validation reports by name. A number past a
	// byte is reported here: converted, it would wrap around into a valid
	// value.
	wraps := func(field string, n int32) bool {
		if n >= 0 && n <= 255 {
			return false
		}
		bad(field, "unknown enum value %d", n)
		return true
	}
	if n := int32(pc.GetSideEffect()); !wraps("SideEffect", n) {
		c.SideEffect = SideEffect(n)
	} // else unspecified, which validation reports too
	if r := int32(pc.GetRisk()); r != int32(agentsafev1.Risk_RISK_UNSPECIFIED) && !wraps("Risk", r) {
		c.Risk = Risk(r - 1)
	}
	dur := func(field string, d *durationpb.Duration) time.Duration {
		if d == nil {
			return 0
		}
		if err := d.CheckValid(); err != nil {
			bad(field, "%v", err)
			return 0
		}
		return d.AsDuration()
	}
	for _, e := range pc.GetExposure() {
		if !wraps("Exposure", int32(e)) {
			c.Exposure = append(c.Exposure, Surface(e)) // numbered alike; unknown numbers are invalid
		}
	}
	c.Dedup = dur("Dedup", pc.GetDedup())
	c.Timeout = dur("Timeout", pc.GetTimeout())
	c.Retry.Backoff = dur("Retry.Backoff", pc.GetRetry().GetBackoff())
	c.Approval.ExpiresIn = dur("Approval.ExpiresIn", pc.GetApproval().GetExpiresIn())
	for i, pb := range pc.GetBudgets() {
		b := Budget{Name: pb.GetName(), Limit: pb.GetLimit(), Amount: pb.GetAmount(),
			Window: dur(fmt.Sprintf("Budgets[%d].Window", i), pb.GetWindow())}
		// BUDGET_PER_ACTOR … _AUDIENCE are 1 … 4; unspecified stays "",
		// and an unknown number is named, both invalid.
		switch n := int(pb.GetPer()); {
		case n > 0 && n <= len(budgetPers):
			b.Per = budgetPers[n-1]
		case n != 0:
			b.Per = fmt.Sprintf("BudgetPer(%d)", n)
		}
		// Unspecified and DENY are deny; an unknown number stays invalid.
		switch n := pb.GetOver(); n {
		case agentsafev1.BudgetOver_BUDGET_OVER_UNSPECIFIED:
		case agentsafev1.BudgetOver_BUDGET_OVER_DENY:
			b.Over = overDeny
		case agentsafev1.BudgetOver_BUDGET_OVER_REQUIRE_APPROVAL:
			b.Over = overRequireApproval
		default:
			b.Over = fmt.Sprintf("BudgetOver(%d)", int32(n))
		}
		c.Budgets = append(c.Budgets, b)
	}
	if opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS && c.SideEffect.WriteLike() {
		bad("idempotency_level", "NO_SIDE_EFFECTS contradicts side effect %s, which is write-like", c.SideEffect)
	}
	return c, true, problems
}

// scanned is what the engine learns from the descriptors at start-up.
type scanned struct {
	entries  []registryEntry // methods carrying the option
	problems []*FieldError
	// methods names every method of the files; streaming every streaming
	// method, with or without the option, so a registry entry for one is
	// known to stream too; noSideEffects every method declaring
	// idempotency_level = NO_SIDE_EFFECTS.
	methods, streaming, noSideEffects map[string]bool
	// inputs holds the request message of every method.
	inputs map[string]protoreflect.MessageDescriptor
}

// scanOptions collects the capability of every method in files that carries
// the option, with the problems found reading them.
func scanOptions(files *protoregistry.Files) scanned {
	var s scanned
	if files == nil {
		return s
	}
	s.methods, s.streaming, s.noSideEffects = make(map[string]bool), make(map[string]bool), make(map[string]bool)
	s.inputs = make(map[string]protoreflect.MessageDescriptor)
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		services := fd.Services()
		for i := range services.Len() {
			methods := services.Get(i).Methods()
			for j := range methods.Len() {
				md := methods.Get(j)
				s.methods[procedureOf(md)] = true
				s.inputs[procedureOf(md)] = md.Input()
				if md.IsStreamingClient() || md.IsStreamingServer() {
					s.streaming[procedureOf(md)] = true
				}
				if opts, ok := md.Options().(*descriptorpb.MethodOptions); ok && opts.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
					s.noSideEffects[procedureOf(md)] = true
				}
				if c, ok, p := capabilityFromOptions(md); ok {
					s.entries = append(s.entries, registryEntry{procedureOf(md), c})
					s.problems = append(s.problems, p...)
				}
			}
		}
		return true
	})
	return s
}

// undeclaredOptions finds the methods of protoregistry.GlobalFiles that
// carry the capability option but are governed by nothing the engine was
// built with (when WithProtoFiles named other files): calling them must not
// run ungoverned.
func undeclaredOptions(files *protoregistry.Files, caps map[string]Capability) map[string]bool {
	if files == protoregistry.GlobalFiles {
		return nil
	}
	var out map[string]bool
	for _, e := range scanOptions(protoregistry.GlobalFiles).entries {
		if _, ok := caps[e.procedure]; !ok {
			if out == nil {
				out = make(map[string]bool)
			}
			out[e.procedure] = true
		}
	}
	return out
}
