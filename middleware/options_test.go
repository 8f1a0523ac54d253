package middleware_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	_ "github.com/agentsafe/agentsafe/internal/testproto/testv1" // registers the test service's options
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"github.com/agentsafe/agentsafe/resultstore"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMethodOptionsAreReadAtStartUp(t *testing.T) {
	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory())) // the test service has a gated method
	if err != nil {
		t.Fatal(err)
	}
	c, ok := adapter.Resolve(eng, "/agentsafe.test.v1.TestService/Read").Capability()
	if !ok || c.SideEffect != middleware.SideEffectRead || c.Retry.MaxRetries != 2 || c.Retry.Backoff != time.Millisecond || c.Timeout != time.Second {
		t.Errorf("Read from options = %+v, %v", c, ok)
	}
	c, _ = adapter.Resolve(eng, "/agentsafe.test.v1.TestService/Gated").Capability()
	if !c.Approval.Required || c.Approval.Type != "manager" || c.Risk != middleware.RiskHigh || c.Approval.ExpiresIn != 15*time.Minute {
		t.Errorf("Gated from options = %+v", c)
	}
	if c, _ := adapter.Resolve(eng, "/agentsafe.test.v1.TestService/Stream").Capability(); !c.Streaming {
		t.Error("a server-streaming method is not marked Streaming")
	}
	if adapter.Resolve(eng, "/agentsafe.test.v1.TestService/Ungoverned").Governed() {
		t.Error("a method without the option is governed")
	}
}

func TestRegistryReplacesTheOptionAsAWhole(t *testing.T) {
	eng, err := middleware.New(middleware.NewRegistry().Register("/agentsafe.test.v1.TestService/Read",
		middleware.Capability{SideEffect: middleware.SideEffectNone, Description: "overridden"}), middleware.WithApprovalStore(approvalstore.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := adapter.Resolve(eng, "/agentsafe.test.v1.TestService/Read").Capability()
	if c.SideEffect != middleware.SideEffectNone || c.Retry.MaxRetries != 0 || c.Description != "overridden" {
		t.Errorf("override = %+v; the registry entry must replace the option whole", c)
	}
	// A registry entry cannot make a streaming method gated: the descriptor knows.
	_, err = middleware.New(middleware.NewRegistry().Register("/agentsafe.test.v1.TestService/Stream",
		middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true}}))
	if err == nil || !strings.Contains(err.Error(), "streaming procedure cannot require approval") {
		t.Errorf("gated stream via registry: %v", err)
	}
}

func TestInvalidMethodOptionsFailTheBuildWithEveryProblem(t *testing.T) {
	method := func(name string, c *agentsafev1.Capability, streaming bool, level descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		opts := &descriptorpb.MethodOptions{}
		if level != descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN {
			opts.IdempotencyLevel = level.Enum()
		}
		proto.SetExtension(opts, agentsafev1.E_Capability, c)
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".bad.v1.M"), OutputType: proto.String(".bad.v1.M"),
			Options: opts, ServerStreaming: proto.Bool(streaming)}
	}
	write := agentsafev1.SideEffect_SIDE_EFFECT_WRITE
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("bad/v1/bad.proto"), Package: proto.String("bad.v1"), Syntax: proto.String("proto3"),
		Dependency:  []string{"agentsafe/v1/options.proto", "google/protobuf/descriptor.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M")}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Bad"), Method: []*descriptorpb.MethodDescriptorProto{
			method("RetriedWrite", &agentsafev1.Capability{SideEffect: write, Retry: &agentsafev1.Retry{MaxRetries: 2}}, false, 0),
			method("UnknownEnum", &agentsafev1.Capability{SideEffect: agentsafev1.SideEffect(77)}, false, 0),
			method("Unspecified", &agentsafev1.Capability{}, false, 0),
			method("NoSideEffectsWrite", &agentsafev1.Capability{SideEffect: write}, false, descriptorpb.MethodOptions_NO_SIDE_EFFECTS),
			method("GatedStream", &agentsafev1.Capability{SideEffect: write, Approval: &agentsafev1.Approval{Required: true}}, true, 0),
			method("NegativeTimeout", &agentsafev1.Capability{SideEffect: agentsafev1.SideEffect_SIDE_EFFECT_READ, Timeout: durationpb.New(-time.Second)}, false, 0),
			method("Fine", &agentsafev1.Capability{SideEffect: agentsafev1.SideEffect_SIDE_EFFECT_READ}, false, descriptorpb.MethodOptions_NO_SIDE_EFFECTS),
			{Name: proto.String("PlainStream"), InputType: proto.String(".bad.v1.M"), OutputType: proto.String(".bad.v1.M"), ServerStreaming: proto.Bool(true)},
		}}},
	}
	file, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(file); err != nil {
		t.Fatal(err)
	}
	// A streaming method without the option, gated from the registry: the
	// descriptor says it streams, so the registry entry is refused too. And
	// a registry entry cannot make a NO_SIDE_EFFECTS method write-like.
	_, err = middleware.New(middleware.NewRegistry().
		Register("/bad.v1.Bad/PlainStream", middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true}}).
		Register("/bad.v1.Bad/Fine", middleware.Capability{SideEffect: middleware.SideEffectWrite}),
		middleware.WithProtoFiles(files))
	var verr *middleware.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("New accepted invalid options: %v", err)
	}
	for _, want := range []string{
		"/bad.v1.Bad/RetriedWrite (option): Retry.MaxRetries: side effect write is write-like",
		"/bad.v1.Bad/UnknownEnum (option): SideEffect: must be one of",
		"SideEffect(77)",
		"/bad.v1.Bad/Unspecified (option): SideEffect",
		"/bad.v1.Bad/NoSideEffectsWrite (option): idempotency_level: NO_SIDE_EFFECTS contradicts side effect write",
		"/bad.v1.Bad/GatedStream (option): Approval.Required",
		"/bad.v1.Bad/NegativeTimeout (option): Timeout: must not be negative",
		"/bad.v1.Bad/PlainStream (registry): Approval.Required",
		"/bad.v1.Bad/Fine (registry): SideEffect: write is write-like, but the method declares idempotency_level = NO_SIDE_EFFECTS",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if len(verr.Problems) != 8 || strings.Contains(err.Error(), "Fine (option)") {
		t.Errorf("want exactly the 8 problems, got %d:\n%v", len(verr.Problems), err)
	}
}

func TestOptionsTheEngineWasNotBuiltWithFailClosed(t *testing.T) {
	// Built from other files, the engine still knows that the linked test
	// service declares capabilities, and refuses to run them ungoverned.
	eng, err := middleware.New(nil, middleware.WithProtoFiles(new(protoregistry.Files)))
	if err != nil {
		t.Fatal(err)
	}
	const proc = "/agentsafe.test.v1.TestService/Write"
	if !adapter.Resolve(eng, proc).Governed() {
		t.Fatalf("%s declares a capability: the engine must not pass it through", proc)
	}
	ran := false
	_, env, err := execute(eng, t.Context(), call{Procedure: proc}, func(context.Context) (any, error) { ran = true; return nil, nil })
	if ran || middleware.CodeOf(err) != middleware.CodeCapabilityNotFound || !strings.Contains(env.Error.Message, "WithProtoFiles") {
		t.Errorf("ran=%t err=%v", ran, err)
	}
	if adapter.Resolve(eng, "/agentsafe.test.v1.TestService/Ungoverned").Governed() {
		t.Error("a method without the option must still pass through")
	}
}

// An enum number in a method option that is not one of the declared values
// is invalid, however large: it never wraps around into a valid side
// effect, risk or surface. Every duration of the option is checked for
// its sign, and the counts too.
func TestOutOfRangeOptionValuesNeverBecomeValidOnes(t *testing.T) {
	method := func(name string, c *agentsafev1.Capability) *descriptorpb.MethodDescriptorProto {
		opts := &descriptorpb.MethodOptions{}
		proto.SetExtension(opts, agentsafev1.E_Capability, c)
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(".range.v1.M"), OutputType: proto.String(".range.v1.M"), Options: opts}
	}
	read := agentsafev1.SideEffect_SIDE_EFFECT_READ
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("range/v1/range.proto"), Package: proto.String("range.v1"), Syntax: proto.String("proto3"),
		Dependency:  []string{"agentsafe/v1/options.proto", "google/protobuf/descriptor.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M")}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Range"), Method: []*descriptorpb.MethodDescriptorProto{
			method("SideEffect259", &agentsafev1.Capability{SideEffect: agentsafev1.SideEffect(259)}), // 259 mod 256 = write
			method("RiskNegative", &agentsafev1.Capability{SideEffect: read, Risk: agentsafev1.Risk(-255)}),
			method("Risk258", &agentsafev1.Capability{SideEffect: read, Risk: agentsafev1.Risk(258)}), // 258-1 mod 256 = medium
			method("Surface257", &agentsafev1.Capability{SideEffect: read, Exposure: []agentsafev1.Surface{agentsafev1.Surface(257)}}),
			method("NegativeBackoff", &agentsafev1.Capability{SideEffect: read, Retry: &agentsafev1.Retry{Backoff: durationpb.New(-time.Millisecond)}}),
			method("NegativeRetries", &agentsafev1.Capability{SideEffect: read, Retry: &agentsafev1.Retry{MaxRetries: -1}}),
			method("NegativeExpiry", &agentsafev1.Capability{SideEffect: read, Approval: &agentsafev1.Approval{ExpiresIn: durationpb.New(-time.Minute)}}),
			method("NegativeQuorum", &agentsafev1.Capability{SideEffect: read, Approval: &agentsafev1.Approval{Quorum: -2}}),
			method("NegativeDedup", &agentsafev1.Capability{SideEffect: read, Dedup: durationpb.New(-time.Second)}),
			method("MalformedTimeout", &agentsafev1.Capability{SideEffect: read, Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}),
			method("BudgetPer260", &agentsafev1.Capability{SideEffect: read, Budgets: []*agentsafev1.Budget{{Name: "b", Limit: 1, Window: durationpb.New(time.Hour), Per: agentsafev1.BudgetPer(260)}}}),
			method("BudgetOver7", &agentsafev1.Capability{SideEffect: read, Budgets: []*agentsafev1.Budget{{Name: "b", Limit: 1, Window: durationpb.New(time.Hour), Per: agentsafev1.BudgetPer_BUDGET_PER_ACTOR, Over: agentsafev1.BudgetOver(7)}}}),
		}}},
	}
	file, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(file); err != nil {
		t.Fatal(err)
	}
	_, err = middleware.New(nil, middleware.WithProtoFiles(files), middleware.WithLogger(discard))
	var verr *middleware.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("New accepted out-of-range options: %v", err)
	}
	for _, want := range []string{
		"/range.v1.Range/SideEffect259 (option): SideEffect: ",
		"/range.v1.Range/RiskNegative (option): Risk: ",
		"/range.v1.Range/Risk258 (option): Risk: ",
		"/range.v1.Range/Surface257 (option): Exposure: ",
		"/range.v1.Range/NegativeBackoff (option): Retry.Backoff: must not be negative",
		"/range.v1.Range/NegativeRetries (option): Retry.MaxRetries: must not be negative",
		"/range.v1.Range/NegativeExpiry (option): Approval.ExpiresIn: must not be negative",
		"/range.v1.Range/NegativeQuorum (option): Approval.Quorum: must not be negative",
		"/range.v1.Range/NegativeDedup (option): Dedup: must not be negative",
		"/range.v1.Range/MalformedTimeout (option): Timeout: ",
		`/range.v1.Range/BudgetPer260 (option): Budgets[b].Per: must be one of actor, person, tenant, audience (got "BudgetPer(260)")`,
		`/range.v1.Range/BudgetOver7 (option): Budgets[b].Over: must be deny or require_approval (got "BudgetOver(7)")`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if !strings.Contains(err.Error(), "SideEffect: unknown enum value 259") {
		t.Errorf("no problem names the number written, 259:\n%v", err)
	}
}

// Every field of the agentsafe.v1.Capability option reaches the Go
// Capability the engine enforces, so the two sources never drift apart: a
// field added to the message without being read fails here.
func TestEveryOptionFieldReachesTheCapability(t *testing.T) {
	for msg, n := range map[protoreflect.MessageDescriptor]int{
		(&agentsafev1.Capability{}).ProtoReflect().Descriptor(): 12,
		(&agentsafev1.Retry{}).ProtoReflect().Descriptor():      2,
		(&agentsafev1.Approval{}).ProtoReflect().Descriptor():   4,
		(&agentsafev1.Budget{}).ProtoReflect().Descriptor():     6,
	} {
		if got := msg.Fields().Len(); got != n {
			t.Errorf("%s has %d fields, this test reads %d: map the new one in capabilityFromOptions and here", msg.FullName(), got, n)
		}
	}
	opt := &agentsafev1.Capability{
		SideEffect:  agentsafev1.SideEffect_SIDE_EFFECT_EXTERNAL,
		Risk:        agentsafev1.Risk_RISK_CRITICAL,
		Description: "charges a card",
		Idempotent:  true,
		Timeout:     durationpb.New(7 * time.Second),
		Retry:       &agentsafev1.Retry{MaxRetries: 3, Backoff: durationpb.New(40 * time.Millisecond)},
		Approval:    &agentsafev1.Approval{Required: true, Type: "finance", ExpiresIn: durationpb.New(time.Hour), Quorum: 2},
		ToolName:    "charge_card",
		Exposure:    []agentsafev1.Surface{agentsafev1.Surface_SURFACE_RPC, agentsafev1.Surface_SURFACE_MCP},
		Dedup:       durationpb.New(5 * time.Minute),
		Inline:      true,
		Budgets: []*agentsafev1.Budget{
			{Name: "refunds", Limit: 2000, Window: durationpb.New(24 * time.Hour), Per: agentsafev1.BudgetPer_BUDGET_PER_PERSON,
				Amount: "amount", Over: agentsafev1.BudgetOver_BUDGET_OVER_REQUIRE_APPROVAL},
			{Name: "calls", Limit: 20, Window: durationpb.New(time.Minute), Per: agentsafev1.BudgetPer_BUDGET_PER_TENANT,
				Over: agentsafev1.BudgetOver_BUDGET_OVER_DENY},
			{Name: "tenant-calls", Limit: 5000, Window: durationpb.New(time.Hour), Per: agentsafev1.BudgetPer_BUDGET_PER_AUDIENCE},
			{Name: "actor-calls", Limit: 5, Window: durationpb.New(time.Second), Per: agentsafev1.BudgetPer_BUDGET_PER_ACTOR},
		},
	}
	opts := &descriptorpb.MethodOptions{}
	proto.SetExtension(opts, agentsafev1.E_Capability, opt)
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("parity/v1/parity.proto"), Package: proto.String("parity.v1"), Syntax: proto.String("proto3"),
		Dependency: []string{"agentsafe/v1/options.proto", "google/protobuf/descriptor.proto"},
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("M"), Field: []*descriptorpb.FieldDescriptorProto{
			{Name: proto.String("amount"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String("amount")},
		}}},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Parity"), Method: []*descriptorpb.MethodDescriptorProto{
			{Name: proto.String("Charge"), InputType: proto.String(".parity.v1.M"), OutputType: proto.String(".parity.v1.M"), Options: opts},
		}}},
	}
	file, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(file); err != nil {
		t.Fatal(err)
	}
	eng, err := middleware.New(nil, middleware.WithProtoFiles(files), middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithResultStore(resultstore.NewMemory()), middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: make([]byte, 32)}),
		middleware.WithBudgetStore(budgetstore.NewMemory()), middleware.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := adapter.Resolve(eng, "/parity.v1.Parity/Charge").Capability()
	want := middleware.Capability{
		SideEffect: middleware.SideEffectExternal, Risk: middleware.RiskCritical, Description: "charges a card", Idempotent: true,
		Timeout: 7 * time.Second, Retry: middleware.Retry{MaxRetries: 3, Backoff: 40 * time.Millisecond},
		Approval: middleware.Approval{Required: true, Type: "finance", ExpiresIn: time.Hour, Quorum: 2},
		ToolName: "charge_card", Exposure: []middleware.Surface{middleware.SurfaceRPC, middleware.SurfaceMCP}, Dedup: 5 * time.Minute,
		Inline: true,
		Budgets: []middleware.Budget{
			{Name: "refunds", Limit: 2000, Window: 24 * time.Hour, Per: "person", Amount: "amount", Over: "require_approval"},
			{Name: "calls", Limit: 20, Window: time.Minute, Per: "tenant", Over: "deny"},
			{Name: "tenant-calls", Limit: 5000, Window: time.Hour, Per: "audience"},
			{Name: "actor-calls", Limit: 5, Window: time.Second, Per: "actor"},
		},
	}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("the option became\n%+v\nwant\n%+v", got, want)
	}
}
