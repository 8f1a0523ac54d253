package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Method options are read from the service's descriptors; a registry entry
// replaces the option of its procedure as a whole, and can govern a method
// that has none.
func TestMethodOptionsAndRegistryOverride(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		t.Run("options", func(t *testing.T) {
			srv := newServer(t, serverConfig{})
			c, ok := srv.guard.Engine().Lookup(procRead)
			if !ok || c.Description != "Reads a test record." || c.Retry.MaxRetries != 2 || c.Timeout != time.Second {
				t.Fatalf("Read's capability %+v (ok=%t), want the method option's", c, ok)
			}
			res, err := srv.client(t, p).Read(t.Context(), request(&testv1.Request{FailTimes: 1, FailCode: "unavailable"}))
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if res.Msg.GetAttempt() != 2 {
				t.Fatalf("Read answered by attempt %d, want 2 as the option allows a retry", res.Msg.GetAttempt())
			}
		})
		t.Run("registry wins", func(t *testing.T) {
			reg := middleware.NewRegistry().
				Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Description: "no retries here"}).
				Register(procUngoverned, middleware.Capability{SideEffect: middleware.SideEffectNone})
			srv := newServer(t, serverConfig{reg: reg})
			if c, _ := srv.guard.Engine().Lookup(procRead); c.Description != "no retries here" || c.Retry.MaxRetries != 0 {
				t.Fatalf("Read's capability %+v, want the registry's, replacing the option as a whole", c)
			}
			client := srv.client(t, p)
			_, err := client.Read(t.Context(), request(&testv1.Request{FailTimes: 1, FailCode: "unavailable"}))
			wantConnectCode(t, err, connect.CodeUnavailable)
			if runs := srv.svc.runs.Load(); runs != 1 {
				t.Errorf("Read ran %d times, want 1: the registry entry has no retry", runs)
			}
			res, err := client.Ungoverned(t.Context(), request(&testv1.Request{}))
			if err != nil {
				t.Fatalf("Ungoverned: %v", err)
			}
			if res.Header().Get(middleware.HeaderExecutionID) == "" {
				t.Errorf("Ungoverned, registered in Go, has headers %v; want it governed", res.Header())
			}
		})
	})
}

// paymentsFile is a descriptor set with one method, /pay.v1.Payments/Charge,
// carrying c as its capability option.
func paymentsFile(t *testing.T, c *agentsafev1.Capability) *protoregistry.Files {
	t.Helper()
	opts := &descriptorpb.MethodOptions{}
	proto.SetExtension(opts, agentsafev1.E_Capability, c)
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:        proto.String("pay/v1/pay.proto"),
		Package:     proto.String("pay.v1"),
		Syntax:      proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("ChargeRequest")}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Payments"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name: proto.String("Charge"), InputType: proto.String(".pay.v1.ChargeRequest"), OutputType: proto.String(".pay.v1.ChargeRequest"), Options: opts,
			}},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(fd); err != nil {
		t.Fatal(err)
	}
	return files
}

// Invalid metadata makes building the interceptor fail with every problem,
// each naming procedure and field.
func TestInvalidOptionsFailAtBuild(t *testing.T) {
	cases := []struct {
		name string
		c    *agentsafev1.Capability
		want []string
	}{
		{"retry on a non-idempotent write", &agentsafev1.Capability{
			SideEffect: agentsafev1.SideEffect_SIDE_EFFECT_EXTERNAL,
			Retry:      &agentsafev1.Retry{MaxRetries: 2},
		}, []string{"/pay.v1.Payments/Charge (option): Retry.MaxRetries", "may only be retried when declared Idempotent"}},
		{"unknown enum values", &agentsafev1.Capability{
			SideEffect: agentsafev1.SideEffect(99),
			Risk:       agentsafev1.Risk(42),
		}, []string{"/pay.v1.Payments/Charge (option): SideEffect", "got SideEffect(99)", "/pay.v1.Payments/Charge (option): Risk"}},
		{"unspecified side effect", &agentsafev1.Capability{}, []string{"SideEffect: must be one of"}},
		{"negative timeout", &agentsafev1.Capability{
			SideEffect: agentsafev1.SideEffect_SIDE_EFFECT_READ,
			Timeout:    durationpb.New(-time.Second),
		}, []string{"Timeout: must not be negative"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			guard, err := connectadapter.New(nil, middleware.WithProtoFiles(paymentsFile(t, tc.c)))
			if err == nil || guard != nil {
				t.Fatalf("New = %v, %v; want an error", guard, err)
			}
			if _, ok := errors.AsType[*middleware.ValidationError](err); !ok {
				t.Errorf("error %T, want a *middleware.ValidationError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		if _, err := connectadapter.New(nil, middleware.WithProtoFiles(paymentsFile(t, &agentsafev1.Capability{
			SideEffect: agentsafev1.SideEffect_SIDE_EFFECT_EXTERNAL, Idempotent: true, Retry: &agentsafev1.Retry{MaxRetries: 2},
		}))); err != nil {
			t.Fatalf("an idempotent external capability with retries is valid: %v", err)
		}
	})
	t.Run("approval on a stream registered in Go", func(t *testing.T) {
		// The registry entry replaces the option whole, so only the method
		// descriptor says that Stream streams.
		_, err := connectadapter.New(middleware.NewRegistry().Register(procStream, middleware.Capability{
			SideEffect: middleware.SideEffectRead, Approval: middleware.Approval{Required: true},
		}))
		if err == nil || !strings.Contains(err.Error(), procStream+" (registry): Approval.Required") {
			t.Fatalf("New: %v, want approval on a stream refused", err)
		}
	})
	t.Run("registry", func(t *testing.T) {
		_, err := connectadapter.New(middleware.NewRegistry().Register(procWrite, middleware.Capability{SideEffect: middleware.SideEffectWrite, Retry: middleware.Retry{MaxRetries: 1}}))
		if err == nil || !strings.Contains(err.Error(), procWrite+" (registry): Retry.MaxRetries") {
			t.Fatalf("New: %v, want the registry entry refused", err)
		}
	})
}

// A method whose linked descriptor declares a capability the engine was not
// built with fails closed instead of running ungoverned: the engine refuses
// it with CAPABILITY_NOT_FOUND, NotFound on the wire. Methods without the
// option still pass through.
func TestUndeclaredOptionsFailClosed(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		srv := newServer(t, serverConfig{opts: []middleware.Option{middleware.WithProtoFiles(new(protoregistry.Files))}})
		c := srv.client(t, p)
		_, err := c.Read(t.Context(), request(&testv1.Request{}))
		ce := wantConnectCode(t, err, connect.CodeNotFound)
		if !strings.Contains(ce.Message(), procRead) || !strings.Contains(ce.Message(), "WithProtoFiles") {
			t.Errorf("message %q should name the procedure and the fix", ce.Message())
		}
		if srv.svc.runs.Load() != 0 {
			t.Error("the handler ran ungoverned")
		}
		stream, err := c.Stream(t.Context(), request(&testv1.Request{Count: 1}))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
			_ = stream.Close()
		}
		wantConnectCode(t, err, connect.CodeNotFound)
		if _, err := c.Ungoverned(t.Context(), request(&testv1.Request{})); err != nil {
			t.Errorf("Ungoverned: %v, want it to pass through", err)
		}
	})
}

// A method whose descriptor declares a capability but is not in
// protoregistry.GlobalFiles, so that the engine cannot know it, is refused by
// the adapter itself from Spec.Schema: Internal, naming the procedure and
// the fix, with no envelope (no execution was opened), and nothing runs.
func TestUndeclaredOptionOutsideGlobalFilesFailsClosedWithInternal(t *testing.T) {
	files := paymentsFile(t, &agentsafev1.Capability{SideEffect: agentsafev1.SideEffect_SIDE_EFFECT_EXTERNAL})
	d, err := files.FindDescriptorByName("pay.v1.Payments.Charge")
	if err != nil {
		t.Fatal(err)
	}
	const procedure = "/pay.v1.Payments/Charge"
	guard, err := connectadapter.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure,
		func(context.Context, *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
			runs.Add(1)
			return connect.NewResponse(&testv1.Response{}), nil
		},
		connect.WithSchema(d), connect.WithInterceptors(guard)))
	client := connect.NewClient[testv1.Request, testv1.Response](httpClient(t, false), serve(t, mux)+procedure)
	_, err = client.CallUnary(t.Context(), request(&testv1.Request{}))
	ce := wantConnectCode(t, err, connect.CodeInternal)
	if !strings.Contains(ce.Message(), procedure) || !strings.Contains(ce.Message(), "WithProtoFiles") {
		t.Errorf("message %q should name the procedure and the fix", ce.Message())
	}
	if env, ok := connectadapter.ReadEnvelope(nil, err); ok {
		t.Errorf("envelope %+v on a call no execution was opened for", env)
	}
	if runs.Load() != 0 {
		t.Error("the handler ran ungoverned")
	}
}

// In strict mode an ungoverned procedure fails CAPABILITY_NOT_FOUND, as
// NotFound with the detail, and nothing runs.
func TestStrict(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		srv := newServer(t, serverConfig{opts: []middleware.Option{middleware.WithStrict()}})
		_, err := srv.client(t, p).Ungoverned(t.Context(), request(&testv1.Request{}))
		wantConnectCode(t, err, connect.CodeNotFound)
		env, ok := connectadapter.ReadEnvelope(nil, err)
		if !ok || env.Error.Code != middleware.CodeCapabilityNotFound || env.Procedure != procUngoverned || env.Attempts != 0 {
			t.Errorf("envelope %+v, want CAPABILITY_NOT_FOUND for %s", env, procUngoverned)
		}
		if srv.svc.runs.Load() != 0 {
			t.Error("the handler ran")
		}
	})
}

func TestNewInterceptorNilEngine(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "non-nil") {
			t.Errorf("recovered %v, want a panic naming the missing engine", r)
		}
	}()
	connectadapter.NewInterceptor(nil)
}
