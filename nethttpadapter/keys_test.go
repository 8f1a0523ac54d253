package nethttpadapter_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
	"github.com/agentsafe/agentsafe/resultstore"
)

// answer is what a client saw of one response.
type answer struct {
	status int
	header http.Header
	body   []byte
	env    middleware.Envelope
}

func post(t *testing.T, url, body, key string) answer {
	t.Helper()
	return postContext(t.Context(), t, url, body, key)
}

func postContext(ctx context.Context, t *testing.T, url, body, key string) answer {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(adapter.HeaderIdempotencyKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{}
		}
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	env, _ := nethttpadapter.EnvelopeFromResponse(resp)
	return answer{resp.StatusCode, resp.Header, b, env}
}

// endToEnd is a response's header without the envelope's, the
// per-response ones (Date, Content-Length) and hop-by-hop ones, which a
// replay never repeats.
func endToEnd(h http.Header) http.Header {
	out := h.Clone()
	adapter.DelHeaders(out)
	for _, k := range []string{"Date", "Content-Length", "Connection"} {
		delete(out, k)
	}
	return out
}

func wantRefusal(t *testing.T, a answer, status int, code middleware.Code) {
	t.Helper()
	if a.status != status || a.env.Error == nil || a.env.Error.Code != code {
		t.Errorf("got %d %s, want %d with %s", a.status, a.body, status, code)
	}
}

// TestKeysOverNetHTTP: a repeat with the caller's key is replayed (the
// same status, headers and body, the same execution id,
// Agentsafe-Replayed); a repeat while the first runs is 409
// IDEMPOTENCY_IN_FLIGHT, another input under the key 422
// IDEMPOTENCY_KEY_REUSED, a key in doubt 409 IDEMPOTENCY_IN_DOUBT, or the
// reconciled response when the route reconciles.
func TestKeysOverNetHTTP(t *testing.T) {
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		switch {
		case bytes.Contains(body, []byte("fail")):
			http.Error(w, "the gateway did not answer", http.StatusServiceUnavailable) // transient: a write in doubt
			return
		case bytes.Contains(body, []byte("block")):
			started <- struct{}{}
			<-r.Context().Done()
			return
		}
		x, _ := middleware.ExecutionFromContext(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Refund", "ref-1")
		w.Header().Add("X-Refund", "ref-2")
		w.Header().Set("Connection", "keep-alive") // hop-by-hop: never stored, never replayed
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"refund":"ref-1","execution":"`+x.ID+`"}`)
	})
	found := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"refund":"ref-7","found":"at the gateway"}`))}
	reg := middleware.NewRegistry().
		Register("refund", middleware.Capability{SideEffect: middleware.SideEffectWrite}).
		Register("reconciled", middleware.Capability{SideEffect: middleware.SideEffectExternal,
			Reconcile: func(context.Context, string) (middleware.Reconciled, error) {
				return middleware.Reconciled{Done: true, Response: found}, nil
			}})
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef")}))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/refund", nethttpadapter.Wrap(eng, "refund", h))
	mux.Handle("/reconciled", nethttpadapter.Wrap(eng, "reconciled", h))
	srv := httptestServer(t, mux)

	first := post(t, srv.URL+"/refund", `{"order":42}`, "order-42")
	again := post(t, srv.URL+"/refund", `{"order":42}`, `"order-42"`)
	if again.status != first.status || first.status != http.StatusCreated || !bytes.Equal(again.body, first.body) || !maps.EqualFunc(endToEnd(again.header), endToEnd(first.header), func(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }) {
		t.Errorf("a repeat replays status, headers and body:\n%d %v %s\n%d %v %s", first.status, endToEnd(first.header), first.body, again.status, endToEnd(again.header), again.body)
	}
	if runs.Load() != 1 || again.env.ExecutionID != first.env.ExecutionID || again.header.Get(adapter.HeaderReplayed) != "true" || first.header.Get(adapter.HeaderReplayed) != "" {
		t.Errorf("a replay runs nothing and carries the first execution's id, Replayed: %d runs, %+v", runs.Load(), again.env)
	}

	wantRefusal(t, post(t, srv.URL+"/refund", `{"order":43}`, "order-42"), http.StatusUnprocessableEntity, middleware.CodeIdempotencyKeyReused)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); postContext(ctx, t, srv.URL+"/refund", `{"block":1}`, "slow") }()
	<-started
	wantRefusal(t, post(t, srv.URL+"/refund", `{"block":1}`, "slow"), http.StatusConflict, middleware.CodeIdempotencyInFlight)
	cancel()
	<-done

	failed := post(t, srv.URL+"/refund", `{"fail":1}`, "doubt")
	if failed.status != http.StatusServiceUnavailable {
		t.Fatalf("the handler's own 500: %d %s", failed.status, failed.body)
	}
	wantRefusal(t, post(t, srv.URL+"/refund", `{"fail":1}`, "doubt"), http.StatusConflict, middleware.CodeIdempotencyInDoubt)

	post(t, srv.URL+"/reconciled", `{"fail":1}`, "reconcile")
	r := post(t, srv.URL+"/reconciled", `{"fail":1}`, "reconcile")
	if r.status != http.StatusOK || string(r.body) != `{"refund":"ref-7","found":"at the gateway"}` || r.header.Get("Content-Type") != "application/json" || !r.env.Replayed {
		t.Errorf("a key in doubt that Reconcile finds done replays the reconciled response: %d %v %s", r.status, r.header, r.body)
	}
}

// TestAHandlersOwnFailureIsReplayedAsWritten: a 501 the handler answered
// (its own answer, not retried) is stored and replayed as written.
func TestAHandlersOwnFailureIsReplayedAsWritten(t *testing.T) {
	var runs atomic.Int32
	eng := newEngine(t, middleware.Capability{SideEffect: middleware.SideEffectWrite}, middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef")}))
	srv := httptestServer(t, nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("X-Reason", "switched off")
		http.Error(w, "refunds are switched off", http.StatusNotImplemented)
	})))
	first := post(t, srv.URL, `{}`, "k")
	again := post(t, srv.URL, `{}`, "k")
	if again.status != http.StatusNotImplemented || !bytes.Equal(again.body, first.body) || again.header.Get("X-Reason") != "switched off" || !again.env.Replayed || runs.Load() != 1 {
		t.Errorf("the handler's own failure is replayed as written: %d %v %s, %d runs", again.status, again.header, again.body, runs.Load())
	}
}

// TestTheStoredSizeLimitIsTheBodys: a response is stored with its body up
// to 1 MiB of body, whatever its headers; over it, and for a reconciled
// response too, a repeat gets the envelope without a body, never a
// truncated one.
func TestTheStoredSizeLimitIsTheBodys(t *testing.T) {
	const limit = 1 << 20
	found := func() *http.Response {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}},
			Body: io.NopCloser(strings.NewReader(strings.Repeat("r", limit+1)))}
	}
	reg := middleware.NewRegistry().
		Register("refund", middleware.Capability{SideEffect: middleware.SideEffectWrite}).
		Register("reconciled", middleware.Capability{SideEffect: middleware.SideEffectExternal,
			Reconcile: func(context.Context, string) (middleware.Reconciled, error) {
				return middleware.Reconciled{Done: true, Response: found()}, nil
			}})
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef")}))
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("fail")) {
			http.Error(w, "the gateway did not answer", http.StatusServiceUnavailable)
			return
		}
		n := limit
		if bytes.Contains(body, []byte("over")) {
			n++
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Refund", strings.Repeat("h", 512))
		io.WriteString(w, strings.Repeat("b", n))
	})
	mux := http.NewServeMux()
	mux.Handle("/refund", nethttpadapter.Wrap(eng, "refund", h))
	mux.Handle("/reconciled", nethttpadapter.Wrap(eng, "reconciled", h))
	srv := httptestServer(t, mux)

	first := post(t, srv.URL+"/refund", `{"at":"limit"}`, "at-limit")
	again := post(t, srv.URL+"/refund", `{"at":"limit"}`, "at-limit")
	if !again.env.Replayed || len(again.body) != limit || !bytes.Equal(again.body, first.body) || again.header.Get("X-Refund") != first.header.Get("X-Refund") {
		t.Errorf("a body of exactly 1 MiB is stored and replayed, headers aside: %d bytes, %+v", len(again.body), again.env)
	}
	post(t, srv.URL+"/refund", `{"over":1}`, "over")
	if over := post(t, srv.URL+"/refund", `{"over":1}`, "over"); !over.env.Replayed || len(over.body) != 0 {
		t.Errorf("a body over 1 MiB is replayed without a body: %d bytes, %+v", len(over.body), over.env)
	}
	post(t, srv.URL+"/reconciled", `{"fail":1}`, "reconcile")
	if r := post(t, srv.URL+"/reconciled", `{"fail":1}`, "reconcile"); !r.env.Replayed || len(r.body) != 0 {
		t.Errorf("a reconciled response over 1 MiB is replayed without a body, never truncated: %d bytes, %+v", len(r.body), r.env)
	}
}

// TestAnEmptyKeyHeaderIsMalformed: an Idempotency-Key header that is
// there but empty is 400 INVALID_ARGUMENT naming it, never a call without
// a key; nothing runs.
func TestAnEmptyKeyHeaderIsMalformed(t *testing.T) {
	var runs atomic.Int32
	eng := newEngine(t, middleware.Capability{SideEffect: middleware.SideEffectWrite}, middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k1", Key: []byte("0123456789abcdef")}))
	srv := httptestServer(t, nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) })))
	for _, key := range []string{"", " "} {
		a := post(t, srv.URL, `{}`, key)
		wantRefusal(t, a, http.StatusBadRequest, middleware.CodeInvalidArgument)
		if a.env.Error != nil && !strings.Contains(a.env.Error.Message, "Idempotency-Key") {
			t.Errorf("%q: the refusal names the header: %q", key, a.env.Error.Message)
		}
	}
	if runs.Load() != 0 {
		t.Errorf("a malformed key runs nothing: %d runs", runs.Load())
	}
}
