package mcpadapter_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/resultstore"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// keyDoc is how the specification has the schema describe the argument.
const keyDoc = "Optional. When repeating a call of this tool that got no reply or failed, send the same value; use a new value only for a new operation."

// keyed is a fixture whose engine stores results; reg may override the
// test service's capabilities.
func keyed(t *testing.T, reg *middleware.Registry, bridgeOpts ...mcpadapter.Option) *fixture {
	return newFixture(t, fixtureConfig{reg: reg, bridgeOpts: append([]mcpadapter.Option{bearer(agent.ID)}, bridgeOpts...), engineOpts: []middleware.Option{
		middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef0123456789abcdef")}),
	}})
}

func responseOf(t *testing.T, r *mcp.CallToolResult) *testv1.Response {
	t.Helper()
	raw, err := json.Marshal(structured(t, r))
	if err != nil {
		t.Fatal(err)
	}
	resp := new(testv1.Response)
	if err := protojson.Unmarshal(raw, resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestKeyArgumentIsInEverySchema(t *testing.T) {
	f := keyed(t, nil)
	cs := connectInMemory(t, f.bridge, nil)
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		raw, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Properties map[string]struct {
				Type        json.RawMessage `json:"type"`
				Description string          `json:"description"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatal(err)
		}
		if p := schema.Properties["_idempotency_key"]; string(p.Type) != `"string"` || p.Description != keyDoc {
			t.Errorf("%s: the _idempotency_key argument must be described as the specification says: %+v", tool.Name, p)
		}
	}
}

// TestKeysOverMCP: the _idempotency_key argument is the caller's key; a
// repeat is replayed (the same structured content, envelope and execution
// id), a repeat while the first runs is IDEMPOTENCY_IN_FLIGHT, another
// input under the key IDEMPOTENCY_KEY_REUSED.
func TestKeysOverMCP(t *testing.T) {
	f := keyed(t, nil)
	cs := connectInMemory(t, f.bridge, nil)
	args := map[string]any{"id": "w-1", "_idempotency_key": "order 42, refund"}
	first := callTool(t, cs, "write", args)
	again := callTool(t, cs, "write", args)
	env1, _ := mcpadapter.ReadEnvelope(first)
	env2, _ := mcpadapter.ReadEnvelope(again)
	if first.IsError || again.IsError || !proto.Equal(responseOf(t, first), responseOf(t, again)) {
		t.Fatalf("a repeat replays the stored response: %v / %v", text(first), text(again))
	}
	if env2.ExecutionID != env1.ExecutionID || !env2.Replayed || env1.Replayed || mcpadapter.ReadHeader(again).Get(adapter.HeaderReplayed) != "true" {
		t.Errorf("a replay carries the first execution's envelope, Replayed: %+v then %+v", env1, env2)
	}
	if n := len(f.svc.executions()); n != 1 {
		t.Errorf("the service ran %d times for one key", n)
	}

	other := callTool(t, cs, "write", map[string]any{"id": "w-2", "_idempotency_key": "order 42, refund"})
	if env := envelopeText(t, other); !other.IsError || env.Error == nil || env.Error.Code != middleware.CodeIdempotencyKeyReused {
		t.Errorf("another input under the key: %v", text(other))
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"id": "w-3", "mode": "block", "_idempotency_key": "slow"}})
	}()
	f.waitStarted(t, "w-3")
	busy := callTool(t, cs, "write", map[string]any{"id": "w-3", "mode": "block", "_idempotency_key": "slow"})
	if env := envelopeText(t, busy); !busy.IsError || env.Error == nil || env.Error.Code != middleware.CodeIdempotencyInFlight || !env.Error.Retryable {
		t.Errorf("a repeat while the first runs: %v", text(busy))
	}
	cancel()
	<-done
}

// TestReconcileOverMCP: a key in doubt is reconciled by the capability's
// hook, whose response a repeat gets as its structured content.
func TestReconcileOverMCP(t *testing.T) {
	found := &testv1.Response{Id: "w-1", Note: "refund ref-7, found at the gateway"}
	reg := middleware.NewRegistry().Register(testv1connect.TestServiceWriteProcedure, middleware.Capability{
		SideEffect: middleware.SideEffectExternal,
		Exposure:   everySurface,
		Reconcile: func(context.Context, string) (middleware.Reconciled, error) {
			return middleware.Reconciled{Done: true, Response: found}, nil
		},
	})
	f := keyed(t, reg)
	cs := connectInMemory(t, f.bridge, nil)
	args := map[string]any{"id": "w-1", "mode": "fail", "_idempotency_key": "k"}
	first := callTool(t, cs, "write", args)
	env1, _ := mcpadapter.ReadEnvelope(first)
	if !first.IsError || env1.Error.Code != middleware.CodeExecutionFailed {
		t.Fatalf("the first call fails, in doubt: %v", text(first))
	}
	r := callTool(t, cs, "write", args)
	env, _ := mcpadapter.ReadEnvelope(r)
	if r.IsError || !proto.Equal(responseOf(t, r), found) || !env.Replayed || env.ExecutionID != env1.ExecutionID {
		t.Errorf("the reconciled response is replayed as the execution in doubt's: %v %+v", text(r), env)
	}
}

// TestTheKeyComesFromTheArgumentOnly: a forwarded Idempotency-Key header
// is dropped, and the argument is not part of the input digest.
func TestTheKeyComesFromTheArgumentOnly(t *testing.T) {
	forwarding := mcpadapter.WithHeaders(func(context.Context, *mcp.CallToolRequest) (http.Header, error) {
		return http.Header{"Authorization": {"Bearer " + agent.ID}, adapter.HeaderIdempotencyKey: {"forwarded"}}, nil
	})
	f := keyed(t, nil, forwarding)
	cs := connectInMemory(t, f.bridge, nil)
	a := callTool(t, cs, "write", map[string]any{"id": "w-1"})
	b := callTool(t, cs, "write", map[string]any{"id": "w-1"})
	envA, _ := mcpadapter.ReadEnvelope(a)
	envB, _ := mcpadapter.ReadEnvelope(b)
	if envB.Replayed || envA.ExecutionID == envB.ExecutionID || len(f.svc.executions()) != 2 {
		t.Errorf("a forwarded Idempotency-Key header must not be the caller's key: %+v then %+v", envA, envB)
	}
	c := callTool(t, cs, "write", map[string]any{"id": "w-1", "_idempotency_key": "k"})
	envC, _ := mcpadapter.ReadEnvelope(c)
	if digest(t, f, envA.ExecutionID) != digest(t, f, envC.ExecutionID) {
		t.Error("the _idempotency_key argument must be left out of the input digest")
	}
}

func digest(t *testing.T, f *fixture, executionID string) string {
	t.Helper()
	f.final(t, executionID)
	for _, e := range f.rec.Execution(executionID) {
		if e.Type == middleware.EventRequested {
			return e.InputDigest
		}
	}
	t.Fatalf("no capability.requested for %s", executionID)
	return ""
}

func TestInvalidKeyArguments(t *testing.T) {
	f := keyed(t, nil)
	cs := connectInMemory(t, f.bridge, nil)
	for name, key := range map[string]any{
		"not a string":   7,
		"empty":          "",
		"not ASCII":      "caf\u00e9",
		"a control byte": "a\nb",
		"too long":       strings.Repeat("k", 256),
	} {
		r := callTool(t, cs, "write", map[string]any{"id": "w-1", "_idempotency_key": key})
		env := envelopeText(t, r)
		if !r.IsError || env.Error == nil || env.Error.Code != middleware.CodeInvalidArgument || !strings.Contains(env.Error.Message, "_idempotency_key") {
			t.Errorf("%s: a key the header could not carry is refused naming the argument: %v", name, text(r))
		}
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Errorf("the service ran %d times for invalid keys", n)
	}
}

func TestNewRefusesAFieldNamedLikeTheKeyArgument(t *testing.T) {
	fdp := new(descriptorpb.FileDescriptorProto)
	if err := prototext.Unmarshal([]byte(`
name: "clash/v1/clash.proto" package: "clash.v1" syntax: "proto3"
message_type { name: "Req" field { name: "idempotency_key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "_idempotency_key" } }
service { name: "Clash" method { name: "Do" input_type: ".clash.v1.Req" output_type: ".clash.v1.Req" } }`), fdp); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(fd); err != nil {
		t.Fatal(err)
	}
	eng, err := middleware.New(middleware.NewRegistry().Register("/clash.v1.Clash/Do", readCapability()), middleware.WithProtoFiles(files))
	if err != nil {
		t.Fatal(err)
	}
	_, err = mcpadapter.New(eng, http.NotFoundHandler(), []string{"clash.v1.Clash"}, mcpadapter.WithProtoFiles(files))
	if err == nil || !strings.Contains(err.Error(), "_idempotency_key") || !strings.Contains(err.Error(), "/clash.v1.Clash/Do") {
		t.Errorf("a request field named _idempotency_key must fail New, naming it and the procedure: %v", err)
	}
}

// TestARepeatedKeyArgumentIsRefused: arguments naming _idempotency_key
// twice carry two keys, as two Idempotency-Key headers do: the call is
// refused, naming the argument, rather than run under the last one.
func TestARepeatedKeyArgumentIsRefused(t *testing.T) {
	f := keyed(t, nil)
	cs := connectInMemory(t, f.bridge, nil)
	for name, raw := range map[string]string{
		"two values": `{"id":"w-1","_idempotency_key":"a","_idempotency_key":"b"}`,
		"one value":  `{"id":"w-1","_idempotency_key":"a","_idempotency_key":"a"}`,
	} {
		r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write", Arguments: json.RawMessage(raw)})
		if err != nil {
			t.Fatal(err)
		}
		env := envelopeText(t, r)
		if !r.IsError || env.Error == nil || env.Error.Code != middleware.CodeInvalidArgument || !strings.Contains(env.Error.Message, "_idempotency_key") {
			t.Errorf("%s: a repeated key argument is refused naming it: %v", name, text(r))
		}
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Errorf("the service ran %d times for repeated keys", n)
	}
}

// TestApprovalsResumeRefusesARepeatedKeyArgument: approvals_resume reads
// _idempotency_key as every tool does: named twice, or not a string,
// it is refused, never resumed under the last one.
func TestApprovalsResumeRefusesARepeatedKeyArgument(t *testing.T) {
	f := keyed(t, nil)
	cs := connectInMemory(t, f.bridge, nil)
	for name, raw := range map[string]string{
		"two values":   `{"approval_id":"apr_00000000000000000000000000000000","_idempotency_key":"a","_idempotency_key":"b"}`,
		"not a string": `{"approval_id":"apr_00000000000000000000000000000000","_idempotency_key":7}`,
	} {
		r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "approvals_resume", Arguments: json.RawMessage(raw)})
		if err != nil {
			t.Fatal(err)
		}
		env := envelopeText(t, r)
		if !r.IsError || env.Error == nil || env.Error.Code != middleware.CodeInvalidArgument || !strings.Contains(env.Error.Message, "_idempotency_key") {
			t.Errorf("%s: refused naming the argument: %v", name, text(r))
		}
	}
}
