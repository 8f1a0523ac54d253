package connectadapter_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Method options are read from the service's descriptors; a registry entry
// replaces the option of its procedure as a whole, and can govern a method
// that has none.
func TestMethodOptionsAndRegistryOverride(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		t.Run("options", func(t *testing.T) {
			srv := newServer(t, serverConfig{})
			c, ok := adapter.Resolve(srv.guard.Engine(), procRead).Capability()
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
			if got, want := srv.httpMajor(), []int{map[bool]int{false: 1, true: 2}[p.h2c]}; !slices.Equal(got, want) {
				t.Errorf("server saw HTTP major versions %v, want %v", got, want)
			}
		})
		t.Run("registry wins", func(t *testing.T) {
			reg := middleware.NewRegistry().
				Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Description: "no retries here"}).
				Register(procUngoverned, middleware.Capability{SideEffect: middleware.SideEffectNone})
			srv := newServer(t, serverConfig{reg: reg})
			if c, _ := adapter.Resolve(srv.guard.Engine(), procRead).Capability(); c.Description != "no retries here" || c.Retry.MaxRetries != 0 {
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
			if res.Header().Get(adapter.HeaderExecutionID) == "" {
				t.Errorf("Ungoverned, registered in Go, has headers %v; want it governed", res.Header())
			}
		})
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
