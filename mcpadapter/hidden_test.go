package mcpadapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// hideWrites is a policy that hides the write tools from agent-7, and
// remembers what it was asked.
type hideWrites struct {
	mu    sync.Mutex
	asked []middleware.PolicyInput
}

func (*hideWrites) Name() string { return "agent-7-reads-only" }

func (p *hideWrites) Decide(_ context.Context, in middleware.PolicyInput) (middleware.PolicyDecision, error) {
	p.mu.Lock()
	p.asked = append(p.asked, in)
	p.mu.Unlock()
	if in.Actor.ID == agent.ID && in.Capability.SideEffect.WriteLike() {
		return middleware.Hide(), nil
	}
	return middleware.Allow(), nil
}

// connectAs serves the bridge in memory on a session whose context says
// who lists: the engine's actor function finds the user there, as it
// would find what an HTTP authentication middleware put in front of the
// MCP endpoint.
func connectAs(t *testing.T, s *mcp.Server, user string) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.WithValue(context.Background(), userKey{}, user), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

func toolNamesOf(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return sorted(names)
}

func TestAListingShowsOnlyWhatNoPolicyHidesFromTheCaller(t *testing.T) {
	p := &hideWrites{}
	f := newFixture(t, fixtureConfig{engineOpts: []middleware.Option{middleware.WithPolicy(p)}})
	s := f.bridge.NewServer(nil, nil)
	if got, want := toolNamesOf(t, connectAs(t, s, agent.ID)), []string{"read", "slow"}; !slices.Equal(got, want) {
		t.Errorf("agent-7 is listed %v, want %v", got, want)
	}
	if got, want := toolNamesOf(t, connectAs(t, s, "ops-1")), []string{"gated", "idempotent_write", "read", "slow", "write"}; !slices.Equal(got, want) {
		t.Errorf("ops-1 is listed %v, want %v", got, want)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range p.asked {
		doc, _ := in.Input()
		if !in.Listing || doc != nil || in.Surface != middleware.SurfaceMCP {
			t.Fatalf("at a listing a policy is asked with Listing, no input, on mcp: %+v", in)
		}
	}
}

func TestAHiddenToolIsAnUnknownTool(t *testing.T) {
	p := &hideWrites{}
	f := newFixture(t, fixtureConfig{engineOpts: []middleware.Option{middleware.WithPolicy(p)}, bridgeOpts: []mcpadapter.Option{bearer(agent.ID)}})
	cs := connectInMemory(t, f.bridge, nil)
	// What the SDK answers for a tool it does not have at all.
	bare := mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "v1"}, nil)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := bare.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	absent, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { absent.Close(); ss.Wait() }()
	for name, params := range map[string]mcp.CallToolParams{
		"a valid call":                   {Name: "write", Arguments: map[string]any{"id": "w1"}},
		"arguments that would not parse": {Name: "write", Arguments: map[string]any{"id": 42, "nonsense": true}},
		// An answering round's refusals (state not issued here) would
		// tell the tool apart: it is absent before any of them.
		"an answering round": {Name: "write", Arguments: map[string]any{"id": "w1"}, RequestState: "c3RhdGU"},
		// The engine refuses a malformed approval id only after hiding
		// (stage 2.0).
		"a malformed approval id": {Name: "write", Arguments: map[string]any{"id": "w1", "_approval_id": "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, hiddenErr := cs.CallTool(t.Context(), &params)
			_, absentErr := absent.CallTool(t.Context(), &params)
			h, hok := errors.AsType[*jsonrpc.Error](hiddenErr)
			a, aok := errors.AsType[*jsonrpc.Error](absentErr)
			if !hok || !aok || h.Code != a.Code || h.Message != a.Message {
				t.Fatalf("hidden tool: %v; a tool the server does not have: %v", hiddenErr, absentErr)
			}
		})
	}
	if n := len(f.svc.executions()); n != 0 {
		t.Fatalf("the hidden tool's handler ran %d times", n)
	}
}

func TestBridgedCallsComeInOnMCP(t *testing.T) {
	p := &hideWrites{}
	f := newFixture(t, fixtureConfig{engineOpts: []middleware.Option{middleware.WithPolicy(p)}, bridgeOpts: []mcpadapter.Option{bearer("ops-1")}})
	callTool(t, connectInMemory(t, f.bridge, nil), "read", map[string]any{"id": "r1"})
	// The same procedure over Connect, through the same mux.
	srv := httptest.NewServer(f.mux)
	defer srv.Close()
	client := connect.NewClient[testv1.Request, testv1.Response](srv.Client(), srv.URL+"/agentsafe.test.v1.TestService/Read")
	req := connect.NewRequest(&testv1.Request{Id: "r2"})
	req.Header().Set("Authorization", "Bearer ops-1")
	if _, err := client.CallUnary(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var surfaces []middleware.Surface
	for _, in := range p.asked {
		if !in.Listing {
			surfaces = append(surfaces, in.Surface)
		}
	}
	if !slices.Equal(surfaces, []middleware.Surface{middleware.SurfaceMCP, middleware.SurfaceRPC}) {
		t.Fatalf("policies saw the calls on %v, want the tool call on mcp and the Connect call on rpc", surfaces)
	}
}

func TestAToolAlwaysGatedSaysByWhom(t *testing.T) {
	cs := connectInMemory(t, newFixture(t, fixtureConfig{}).bridge, nil)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if want := map[string]any{"gated": "manager"}[tool.Name]; tool.Meta["agentsafe/approvalType"] != want {
			t.Errorf("%s: agentsafe/approvalType %v, want %v", tool.Name, tool.Meta["agentsafe/approvalType"], want)
		}
	}
}

// TestAHiddenToolIsUnknownEvenWhenItsCredentialsFail: the header function
// failing is a refusal only a tool that exists can give.
func TestAHiddenToolIsUnknownEvenWhenItsCredentialsFail(t *testing.T) {
	p := &hideWrites{}
	noCredentials := mcpadapter.WithHeaders(func(context.Context, *mcp.CallToolRequest) (http.Header, error) {
		return nil, errors.New("the token expired")
	})
	f := newFixture(t, fixtureConfig{engineOpts: []middleware.Option{middleware.WithPolicy(p)}, bridgeOpts: []mcpadapter.Option{noCredentials}})
	cs := connectAs(t, f.bridge.NewServer(nil, nil), agent.ID)
	_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write", Arguments: map[string]any{"id": "w1"}})
	if e, ok := errors.AsType[*jsonrpc.Error](err); !ok || e.Code != jsonrpc.CodeInvalidParams || e.Message != `unknown tool "write"` {
		t.Fatalf("a hidden tool whose credentials fail: %v, want the SDK's unknown tool", err)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"id": "r1"}})
	if err != nil || !res.IsError {
		t.Fatalf("a listed tool whose credentials fail is refused as unauthenticated: %+v, %v", res, err)
	}
}
