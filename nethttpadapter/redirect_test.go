package nethttpadapter_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// A path the mux would redirect (an unclean path, a subtree pattern's
// missing trailing slash) reaches a governed pattern only after the redirect.
// WrapMux refuses it before the approval gate, INVALID_ARGUMENT naming the
// canonical path, through the engine so it has an execution id and a trail;
// nothing runs and the approval is not consumed: it still resumes at the
// canonical path, once.
func TestWrapMuxRefusesAPathTheMuxWouldRedirectBeforeTheApprovalGate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ redirected, canonical string }{
		{"//refund", "/refund"},
		{"/x/../refund", "/refund"},
		{"/refunds", "/refunds/"},
	} {
		t.Run(tc.redirected, func(t *testing.T) {
			t.Parallel()
			gated := middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true}}
			reg := middleware.NewRegistry().Register("POST /refund", gated).Register("POST /refunds/", gated)
			events := make(chan middleware.Event, 256)
			var runs atomic.Int32
			h := newHarness(t, reg, func(eng *middleware.Engine) http.Handler {
				mux := http.NewServeMux()
				count := func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }
				mux.HandleFunc("POST /refund", count)
				mux.HandleFunc("POST /refunds/", count)
				return nethttpadapter.WrapMux(eng, mux)
			},
				middleware.WithApprovalStore(approvalstore.NewMemory()),
				middleware.WithActor(func(context.Context) (middleware.Actor, error) {
					return middleware.Actor{ID: "agent-7", Tenant: "acme"}, nil
				}),
				middleware.WithEventSink(middleware.EventSinkFunc(func(_ context.Context, e middleware.Event) { events <- e })),
			)
			// The raw answer, not the one after the client followed a redirect.
			client := *h.client
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			call := func(path, approvalID string) (*http.Response, middleware.Envelope) {
				t.Helper()
				req, err := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(`{"amount":42}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				if approvalID != "" {
					req.Header.Set(adapter.HeaderApprovalID, approvalID)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("POST %s: %v", path, err)
				}
				defer resp.Body.Close()
				env, _ := nethttpadapter.EnvelopeFromResponse(resp)
				return resp, env
			}
			// trail reads the events of the execution that just ended.
			trail := func() []middleware.Event {
				t.Helper()
				var out []middleware.Event
				for {
					e := recv(t, events, "an event")
					out = append(out, e)
					if e.Type.Final() {
						return out
					}
				}
			}

			resp, env := call(tc.canonical, "")
			if resp.StatusCode != http.StatusPreconditionRequired || !store.ValidApprovalID(env.ApprovalID) {
				t.Fatalf("first call: %d %+v, want 428 with an approval id", resp.StatusCode, env)
			}
			trail()
			approvalID := env.ApprovalID
			if _, err := h.eng.Decide(t.Context(), approvalID, store.Decision{Approve: true, Approver: middleware.Actor{ID: "manager-bob", Tenant: "acme"}}); err != nil {
				t.Fatal(err)
			}
			if e := recv(t, events, "the approval"); e.Type != middleware.EventApproved {
				t.Fatalf("event %s after Decide, want %s", e.Type, middleware.EventApproved)
			}

			resp, env = call(tc.redirected, approvalID)
			if resp.StatusCode != http.StatusBadRequest || env.Error == nil || env.Error.Code != middleware.CodeInvalidArgument || env.ExecutionID == "" {
				t.Fatalf("resume at %s: %d Location %q, envelope %+v; a path the mux would redirect must be refused 400 INVALID_ARGUMENT with an execution id",
					tc.redirected, resp.StatusCode, resp.Header.Get("Location"), env)
			}
			if want := `"` + tc.canonical + `"`; !strings.Contains(env.Error.Message, want) {
				t.Errorf("message %q should name the canonical path %s", env.Error.Message, want)
			}
			for _, e := range trail() {
				if e.Type == middleware.EventApprovalConsumed || e.Type == middleware.EventStarted || e.ExecutionID != env.ExecutionID {
					t.Errorf("refused at %s, the trail has %s of %s: nothing may run or be consumed", tc.redirected, e.Type, e.ExecutionID)
				}
			}
			if n := runs.Load(); n != 0 {
				t.Errorf("the handler ran %d times for a path the mux would redirect", n)
			}

			resp, env = call(tc.canonical, approvalID)
			if resp.StatusCode != http.StatusOK || env.ApprovalID != approvalID {
				t.Fatalf("resume at %s after the refusal: %d %+v, want the approval to resume there", tc.canonical, resp.StatusCode, env)
			}
			consumed := 0
			for _, e := range trail() {
				if e.Type == middleware.EventApprovalConsumed {
					consumed++
				}
			}
			if n := runs.Load(); n != 1 || consumed != 1 {
				t.Errorf("the resumed approval ran the handler %d times, consumed %d times; want once each", n, consumed)
			}
		})
	}
}

// Only the mux's own redirects are refused: a governed route whose handler
// answers with a redirect is served as written, and a path the mux would
// redirect to an ungoverned pattern, or route nowhere, is the mux's own
// answer, without an envelope.
func TestWrapMuxRedirectRuleAppliesOnlyToTheMuxsRedirectsToGovernedPatterns(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	reg := middleware.NewRegistry().Register("GET /old", read(middleware.Capability{}))
	h := newHarness(t, reg, func(eng *middleware.Engine) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("GET /old", http.RedirectHandler("/new", http.StatusMovedPermanently))
		mux.HandleFunc("GET /docs/", func(http.ResponseWriter, *http.Request) { runs.Add(1) })
		return nethttpadapter.WrapMux(eng, mux)
	})
	client := *h.client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := client.Get(h.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	if resp := get("/old"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/new" || resp.Header.Get(adapter.HeaderExecutionID) == "" {
		t.Errorf("a governed handler's own redirect: %d %v, want its 301 to /new with the envelope's ids", resp.StatusCode, resp.Header)
	}
	h.final()
	if resp := get("/docs"); resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/docs/" || resp.Header.Get(adapter.HeaderExecutionID) != "" {
		t.Errorf("a redirect to an ungoverned pattern: %d %v, want the mux's own 307 to /docs/", resp.StatusCode, resp.Header)
	}
	if resp := get("/nowhere"); resp.StatusCode != http.StatusNotFound || resp.Header.Get(adapter.HeaderExecutionID) != "" {
		t.Errorf("an unrouted path: %d %v, want the mux's own 404", resp.StatusCode, resp.Header)
	}
	if runs.Load() != 0 {
		t.Error("an ungoverned handler ran for a redirect")
	}
}
