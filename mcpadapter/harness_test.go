package mcpadapter_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/connectadapter"
	fx "github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestConformance(t *testing.T) {
	conformance.RunAdapter(t, harness{})
}

// harness serves the conformance fixtures as agentsafe.test.v1.TestService
// through Connect, governed by the suite's engine, bridged to MCP on the
// in-memory transport; the client calls tools with the SDK's client and
// reads everything from the tool results, as an MCP client would.
type harness struct{}

// InProcess: the bridge calls the service in process and the client talks
// to the bridge on the in-memory transport, so the suite runs in a
// testing/synctest bubble.
func (harness) InProcess() bool { return true }

func (harness) Procedure(f conformance.Fixture) string { return fx.Procedure(f) }

func (harness) Start(t *testing.T, eng *middleware.Engine, handle conformance.Handler, _ conformance.StreamHandler) conformance.Client {
	mux := http.NewServeMux()
	interceptor := connectadapter.NewInterceptor(eng)
	mux.Handle(interceptor.Guard(testv1connect.NewTestServiceHandler(&fixtureService{handle: handle}, connect.WithInterceptors(interceptor))))
	b, err := mcpadapter.New(eng, mux, []string{testv1connect.TestServiceName},
		mcpadapter.WithResponseHeaders("X-Conformance-Attempt", "X-Conformance-Late"))
	if err != nil {
		t.Fatal(err)
	}
	cs := connectInMemory(t, b, nil)
	// Tools are found by the procedure their _meta names, as a client
	// that knows the service would; a tool the listing leaves out (a
	// policy hides it, or its capability is not exposed on MCP) is called
	// by the name the bridge would give it, as a client that guesses would.
	tools := map[string]string{}
	for f, name := range toolNames {
		tools[fx.Procedure(f)] = name
	}
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := tool.Meta["agentsafe/procedure"].(string); ok && tools[p] != tool.Name {
			t.Fatalf("tool %s of %s: the bridge named it unlike before", tool.Name, p)
		}
	}
	return mcpClient{cs: cs, tools: tools, t: t, bridge: b}
}

// toolNames are the tools the bridge makes of the fixtures.
var toolNames = map[conformance.Fixture]string{
	conformance.FixtureRead: "read", conformance.FixtureWrite: "write", conformance.FixtureIdempotentWrite: "idempotent_write",
	conformance.FixtureSlow: "slow", conformance.FixtureGated: "gated",
}

// CallUnhandled makes the call on an MCP server that has every tool of
// the bridge but f's: the SDK's own answer for a tool it does not have.
func (c mcpClient) CallUnhandled(ctx context.Context, f conformance.Fixture, req conformance.Request) conformance.Result {
	s := c.bridge.NewServer(nil, nil)
	s.RemoveTools(toolNames[f])
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "conformance", Version: "v1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() {
		cs.Close()
		ss.Wait()
	}()
	return mcpClient{cs: cs, tools: c.tools}.Call(ctx, f, req, "")
}

// CallRaw makes the call as one JSON-RPC tools/call on a fresh session
// of the bridge's server (absent: one without f's tool) over the in-memory
// transport, after the initialize handshake, and returns the response
// message as it came off the transport. An MCP call carries no deadline.
func (c mcpClient) CallRaw(ctx context.Context, f conformance.Fixture, req conformance.Request, shape conformance.Shape, absent bool) (conformance.RawResponse, bool) {
	args := `{"id":` + strconvQuote(req.ID) + `,"mode":"ok"`
	switch shape {
	case conformance.ShapeMalformedApprovalID:
		args += `,"_approval_id":"x"`
	case conformance.ShapeMalformedKey:
		args += `,"_idempotency_key":""`
	case conformance.ShapeUnbindable:
		args += `,"_idempotency_key":"k1","id":` + strconvQuote(req.ID)
	case conformance.ShapeExpired:
		return conformance.RawResponse{}, false
	}
	args += "}"
	if shape == conformance.ShapeUndecodable {
		args = `"not an object"`
	}
	s := c.bridge.NewServer(nil, nil)
	if absent {
		s.RemoveTools(toolNames[f])
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	defer ss.Wait()
	conn, err := ct.Connect(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	exchange := func(id int64, method, params string) []byte {
		msg := &jsonrpc.Request{Method: method, Params: json.RawMessage(params)}
		if id != 0 {
			msg.ID, _ = jsonrpc.MakeID(float64(id))
		}
		if err := conn.Write(ctx, msg); err != nil {
			c.t.Fatal(err)
		}
		if id == 0 {
			return nil
		}
		resp, err := conn.Read(ctx)
		if err != nil {
			c.t.Fatal(err)
		}
		b, err := jsonrpc.EncodeMessage(resp)
		if err != nil {
			c.t.Fatal(err)
		}
		return b
	}
	exchange(1, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"conformance","version":"v1"}}`)
	exchange(0, "notifications/initialized", `{}`)
	body := exchange(2, "tools/call", `{"name":`+strconvQuote(toolNames[f])+`,"arguments":`+args+`}`)
	return conformance.RawResponse{Body: body}, true
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

type fixtureService struct {
	testv1connect.UnimplementedTestServiceHandler
	handle conformance.Handler
}

func (s *fixtureService) serve(ctx context.Context, f conformance.Fixture, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	setHeader := func(k, v string) {
		if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
			ci.ResponseHeader().Set(k, v)
		}
	}
	resp, err := s.handle(ctx, f, fx.Request(req.Msg), setHeader)
	if req.Msg.GetMode() == string(conformance.ModeMutate) {
		req.Msg.Id = conformance.MutatedID // a careless handler changes its input
	}
	if st, ok := errors.AsType[*conformance.Status](err); ok {
		return nil, connectError(st)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(fx.ProtoResponse(resp)), nil
}

// connectError is the suite's status as a Connect handler returns it.
func connectError(st *conformance.Status) *connect.Error {
	ce := connect.NewError(connect.Code(st.Code), errors.New(st.Message))
	if st.Detail != "" {
		d, err := connect.NewErrorDetail(wrapperspb.String(st.Detail))
		if err != nil {
			panic(err)
		}
		ce.AddDetail(d)
	}
	return ce
}

func (s *fixtureService) Read(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureRead, r)
}
func (s *fixtureService) Write(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureWrite, r)
}
func (s *fixtureService) IdempotentWrite(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureIdempotentWrite, r)
}
func (s *fixtureService) Slow(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureSlow, r)
}
func (s *fixtureService) Gated(ctx context.Context, r *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return s.serve(ctx, conformance.FixtureGated, r)
}

type mcpClient struct {
	cs     *mcp.ClientSession
	tools  map[string]string // by procedure
	t      *testing.T
	bridge *mcpadapter.Bridge
}

// KeyArgument: the bridge takes the caller's key from the _idempotency_key
// argument, a plain value, not in a header's spelling.
func (mcpClient) KeyArgument() bool { return true }

func (c mcpClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	return c.CallKeyed(ctx, f, req, approvalID, "")
}

func (c mcpClient) CallKeyed(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID, key string) conformance.Result {
	args := map[string]any{"id": req.ID, "mode": string(req.Mode), "failTimes": req.FailTimes}
	if approvalID != "" {
		args["_approval_id"] = approvalID
	}
	if key != "" {
		args["_idempotency_key"] = key
	}
	name, ok := c.tools[fx.Procedure(f)]
	if !ok {
		return conformance.Result{Err: errors.New("no tool for " + fx.Procedure(f))}
	}
	r, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		res := conformance.Result{Err: err}
		if we, ok := errors.AsType[*jsonrpc.Error](err); ok { // a protocol error: the JSON-RPC code and message
			res.Status = &conformance.Status{Code: 2, Message: we.Message, Detail: fmt.Sprintf("JSON-RPC %d", we.Code)}
		}
		return res
	}
	env, _ := mcpadapter.ReadEnvelope(r)
	out := conformance.Result{Envelope: env, Header: mcpadapter.ReadHeader(r)}
	var body []string
	for _, content := range r.Content {
		if tc, ok := content.(*mcp.TextContent); ok {
			body = append(body, tc.Text)
		}
	}
	out.Body = []byte(strings.Join(body, "\n"))
	if r.IsError {
		out.Err = errors.New(string(out.Body))
		out.Status, out.EngineDetail = toolStatus(body[0])
		return out
	}
	raw, err := json.Marshal(r.StructuredContent)
	if err != nil {
		out.Err = err
		return out
	}
	var resp testv1.Response
	if err := protojson.Unmarshal(raw, &resp); err != nil {
		out.Err = err
		return out
	}
	out.Response = new(fx.Response(&resp))
	return out
}

// toolStatus decodes the text of a failed tool call: the envelope's JSON
// form for an outcome the engine decided (agentsafe's own detail; its code
// is the one the wire table writes), or a framework's own error as Connect
// writes it, its conformance detail in a google.protobuf.StringValue.
func toolStatus(text string) (*conformance.Status, bool) {
	var env middleware.Envelope
	if json.Unmarshal([]byte(text), &env) == nil && env.Error != nil {
		return &conformance.Status{Code: adapter.CodeRPC(env.Error.Code), Message: env.Error.Message}, true
	}
	var wire struct {
		Code    connect.Code
		Message string
		Details []struct{ Type, Value string }
	}
	if err := json.Unmarshal([]byte(text), &wire); err != nil {
		return nil, false
	}
	st := &conformance.Status{Code: uint32(wire.Code), Message: wire.Message}
	for _, d := range wire.Details {
		b, _ := base64.RawStdEncoding.DecodeString(d.Value)
		var v wrapperspb.StringValue
		if d.Type == "google.protobuf.StringValue" && proto.Unmarshal(b, &v) == nil {
			st.Detail = v.GetValue()
		}
	}
	return st, false
}

// Surface: The bridge's calls come in on mcp, whatever adapter serves them.
func (harness) Surface() middleware.Surface { return middleware.SurfaceMCP }
