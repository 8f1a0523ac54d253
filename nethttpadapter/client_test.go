package nethttpadapter_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// downBody is a handler's own error body shaped like an envelope of
// another execution: the client helper must not take it for this one's.
const downBody = `{"status":"cancelled","executionId":"exe_someone_else","error":{"code":"TIMEOUT","message":"backend down","retryable":true}}`

func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	seen := make(chan middleware.Execution, 1)
	reg := middleware.NewRegistry().
		Register("ok", read(middleware.Capability{})).
		Register("slow", read(middleware.Capability{Timeout: 20 * time.Millisecond})).
		Register("down", middleware.Capability{SideEffect: middleware.SideEffectWrite})
	h := newHarness(t, reg, func(eng *middleware.Engine) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/ok", nethttpadapter.Wrap(eng, "ok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			x, _ := middleware.ExecutionFromContext(r.Context())
			seen <- x
			_, _ = io.WriteString(w, "fine")
		})))
		mux.Handle("/slow", nethttpadapter.Wrap(eng, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		})))
		mux.Handle("/down", nethttpadapter.Wrap(eng, "down", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, downBody)
		})))
		mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "plain") })
		return mux
	})

	t.Run("completed: ids from the headers", func(t *testing.T) {
		resp, body := h.post("/ok", "", "")
		x := recv(t, seen, "the handler")
		env := envelope(t, resp)
		if body != "fine" || env.Status != middleware.StatusCompleted || env.ExecutionID != x.ID || env.Attempts != 1 || env.Error != nil {
			t.Errorf("envelope %+v for execution %s, want completed after 1 attempt", env, x.ID)
		}
		h.final()
	})

	t.Run("engine-decided: the JSON envelope", func(t *testing.T) {
		resp, _ := h.post("/slow", "", "")
		final := h.final()
		env := envelope(t, resp)
		want := middleware.Envelope{ExecutionID: final.ExecutionID, Procedure: "slow", Status: middleware.StatusCancelled, Attempts: 1}
		if env.ExecutionID != want.ExecutionID || env.Procedure != want.Procedure || env.Status != want.Status || env.Attempts != want.Attempts ||
			env.Error == nil || env.Error.Code != middleware.CodeTimeout || !env.Error.Retryable || !strings.Contains(env.Error.Message, "timed out") {
			t.Errorf("envelope %+v (error %+v), want %+v with a retryable TIMEOUT", env, env.Error, want)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
	})

	t.Run("the handler's own 5xx: passed through, body still readable", func(t *testing.T) {
		resp, err := h.client.Post(h.srv.URL+"/down", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		env := envelope(t, resp)
		body, _ := io.ReadAll(resp.Body)
		if string(body) != downBody {
			t.Errorf("body after EnvelopeFromResponse %q, want the handler's, whole", body)
		}
		if env.Status != middleware.StatusFailed || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.ExecutionID == "" {
			t.Errorf("envelope %+v (error %+v), want failed EXECUTION_FAILED, not retryable", env, env.Error)
		}
		h.final()
	})

	t.Run("ungoverned: no envelope", func(t *testing.T) {
		resp, _ := h.post("/plain", "", "")
		if env, ok := nethttpadapter.EnvelopeFromResponse(resp); ok {
			t.Errorf("an ungoverned response has envelope %+v", env)
		}
	})
}

// keyRecorder is a downstream service that records the Idempotency-Key of
// every request.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.keys = append(k.keys, r.Header.Get(adapter.HeaderIdempotencyKey))
	k.mu.Unlock()
}

func (k *keyRecorder) got() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}

func TestIdempotencyKeyTransport(t *testing.T) {
	t.Parallel()
	listed, unlisted := &keyRecorder{}, &keyRecorder{}
	listedSrv, unlistedSrv := httptestServer(t, listed), httptestServer(t, unlisted)
	host := func(s string) string { u, _ := url.Parse(s); return u.Host }
	client := &http.Client{Transport: nethttpadapter.IdempotencyKeyTransport(listedSrv.Client().Transport, host(listedSrv.URL))}
	call := func(ctx context.Context, target, preset string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, nil)
		if preset != "" {
			req.Header.Set(adapter.HeaderIdempotencyKey, preset)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("downstream call: %v", err)
			return
		}
		resp.Body.Close()
		if preset == "" && req.Header.Get(adapter.HeaderIdempotencyKey) != "" {
			t.Error("the transport modified the caller's request")
		}
	}

	executions := make(chan middleware.Execution, 4)
	cap := middleware.Capability{SideEffect: middleware.SideEffectExternal, Idempotent: true, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}}
	h := newHarness(t, middleware.NewRegistry().Register("pay", cap), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "pay", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			x, _ := middleware.ExecutionFromContext(r.Context())
			executions <- x
			call(r.Context(), listedSrv.URL, "")
			if x.Attempt == 1 {
				w.WriteHeader(http.StatusServiceUnavailable) // retried: same key downstream
				return
			}
			call(middleware.WithKeyLabel(r.Context(), "receipt"), listedSrv.URL, "")
			call(r.Context(), listedSrv.URL, "idk_chosen_by_the_handler")
			call(r.Context(), unlistedSrv.URL, "")
		}))
	})
	if resp, _ := h.post("/", "", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	x := recv(t, executions, "attempt 1")
	recv(t, executions, "attempt 2")
	call(t.Context(), listedSrv.URL, "") // outside any execution

	want := []string{x.IdempotencyKey, x.IdempotencyKey, x.SubKey("receipt"), "idk_chosen_by_the_handler", ""}
	if got := listed.got(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("keys at the listed host:\n got %q\nwant %q", got, want)
	}
	if x.SubKey("receipt") == x.IdempotencyKey || x.IdempotencyKey == "" {
		t.Errorf("sub-key %q must differ from key %q", x.SubKey("receipt"), x.IdempotencyKey)
	}
	if got := unlisted.got(); len(got) != 1 || got[0] != "" {
		t.Errorf("keys at an unlisted host %q, want one call without a key", got)
	}
	h.final()
}

// The key the transport sets never follows a redirect off the list: Go's
// http.Client builds each redirected request from the caller's headers and
// sends it through the transport again, which decides per round trip. A
// redirect to an unlisted host carries no key, one to a listed host does.
func TestIdempotencyKeyTransportDoesNotFollowARedirectToAnUnlistedHost(t *testing.T) {
	t.Parallel()
	listed, unlisted := &keyRecorder{}, &keyRecorder{}
	listedSrv, unlistedSrv := httptestServer(t, listed), httptestServer(t, unlisted)
	redirect := func(rec *keyRecorder, to string) *httptest.Server {
		return httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec.ServeHTTP(w, r)
			http.Redirect(w, r, to+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		}))
	}
	toUnlisted, toListed := &keyRecorder{}, &keyRecorder{}
	toUnlistedSrv, toListedSrv := redirect(toUnlisted, unlistedSrv.URL), redirect(toListed, listedSrv.URL)
	host := func(s string) string { u, _ := url.Parse(s); return u.Host }
	client := &http.Client{Transport: nethttpadapter.IdempotencyKeyTransport(nil, host(toUnlistedSrv.URL), host(toListedSrv.URL), host(listedSrv.URL))}

	eng := newEngine(t, read(middleware.Capability{}))
	var key string
	relay := nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x, _ := middleware.ExecutionFromContext(r.Context())
		key = x.IdempotencyKey
		for _, target := range []string{toUnlistedSrv.URL, toListedSrv.URL} {
			req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, target+"/charge", strings.NewReader(`{"amount":42}`))
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("downstream call: %v", err)
				return
			}
			resp.Body.Close()
		}
	}))
	rec := httptest.NewRecorder()
	relay.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	for _, c := range []struct {
		where string
		rec   *keyRecorder
		want  string
	}{
		{"the listed host that redirects off the list", toUnlisted, key},
		{"the unlisted host it redirects to", unlisted, ""},
		{"the listed host that redirects to another listed host", toListed, key},
		{"that listed host", listed, key},
	} {
		if got := c.rec.got(); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s got keys %q, want [%q]", c.where, got, c.want)
		}
	}
}
