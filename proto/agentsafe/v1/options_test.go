package agentsafev1_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
)

// capabilityOf reads the capability option of a TestService method back from
// the descriptor registered in protoregistry.GlobalFiles, the way the engine
// finds it.
func capabilityOf(t *testing.T, method string) (*agentsafev1.Capability, bool) {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName("agentsafe.test.v1.TestService." + method))
	if err != nil {
		t.Fatalf("find %s: %v", method, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		t.Fatalf("%s is a %T, not a method", method, d)
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || !proto.HasExtension(opts, agentsafev1.E_Capability) {
		return nil, false
	}
	return proto.GetExtension(opts, agentsafev1.E_Capability).(*agentsafev1.Capability), true
}

func TestCapabilityOption(t *testing.T) {
	_ = testv1.File_testv1_test_proto // link and register the test service

	read, ok := capabilityOf(t, "Read")
	if !ok {
		t.Fatal("Read: no capability option")
	}
	if got := read.GetSideEffect(); got != agentsafev1.SideEffect_SIDE_EFFECT_READ {
		t.Errorf("Read side_effect = %v, want SIDE_EFFECT_READ", got)
	}
	if got := read.GetTimeout().AsDuration(); got != time.Second {
		t.Errorf("Read timeout = %v, want 1s", got)
	}
	if got := read.GetRetry().GetMaxRetries(); got != 2 {
		t.Errorf("Read retry.max_retries = %d, want 2", got)
	}
	if got := read.GetRetry().GetBackoff().AsDuration(); got != time.Millisecond {
		t.Errorf("Read retry.backoff = %v, want 1ms", got)
	}
	if got := read.GetRisk(); got != agentsafev1.Risk_RISK_UNSPECIFIED {
		t.Errorf("Read risk = %v, want unset", got)
	}

	iw, ok := capabilityOf(t, "IdempotentWrite")
	if !ok {
		t.Fatal("IdempotentWrite: no capability option")
	}
	if iw.GetSideEffect() != agentsafev1.SideEffect_SIDE_EFFECT_WRITE || !iw.GetIdempotent() || iw.GetRetry().GetMaxRetries() != 1 {
		t.Errorf("IdempotentWrite = %v, want an idempotent write with 1 re-attempt", iw)
	}

	slow, ok := capabilityOf(t, "Slow")
	if !ok {
		t.Fatal("Slow: no capability option")
	}
	if got := slow.GetTimeout().AsDuration(); got != 50*time.Millisecond {
		t.Errorf("Slow timeout = %v, want 50ms", got)
	}
	if slow.GetRetry() != nil {
		t.Errorf("Slow retry = %v, want unset", slow.GetRetry())
	}

	gated, ok := capabilityOf(t, "Gated")
	if !ok {
		t.Fatal("Gated: no capability option")
	}
	if !gated.GetApproval().GetRequired() || gated.GetApproval().GetType() != "manager" {
		t.Errorf("Gated approval = %v, want required, type manager", gated.GetApproval())
	}

	if c, ok := capabilityOf(t, "Ungoverned"); ok {
		t.Errorf("Ungoverned carries a capability: %v", c)
	}

	if _, ok := capabilityOf(t, "Stream"); !ok {
		t.Error("Stream: no capability option")
	}
	stream := testv1.File_testv1_test_proto.Services().ByName("TestService").Methods().ByName("Stream")
	if !stream.IsStreamingServer() || stream.IsStreamingClient() {
		t.Error("Stream is not server-streaming")
	}
}

func TestExtensionRegistered(t *testing.T) {
	xt, err := protoregistry.GlobalTypes.FindExtensionByNumber("google.protobuf.MethodOptions", 51791)
	if err != nil {
		t.Fatalf("extension 51791 of MethodOptions: %v", err)
	}
	if got, want := xt.TypeDescriptor().FullName(), protoreflect.FullName("agentsafe.v1.capability"); got != want {
		t.Errorf("extension 51791 is %s, want %s", got, want)
	}
	if got, want := (&agentsafev1.ErrorDetail{}).ProtoReflect().Descriptor().FullName(), protoreflect.FullName("agentsafe.v1.ErrorDetail"); got != want {
		t.Errorf("ErrorDetail full name = %s, want %s", got, want)
	}
}
