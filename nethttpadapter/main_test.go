package nethttpadapter_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

// guard bounds every wait on the system under test, so a broken rule fails
// the test instead of hanging it. Nothing waits this long when rules hold.
const guard = 10 * time.Second

// harness is a real HTTP server around governed routes, an engine with an
// event recorder, and a channel of final events.
type harness struct {
	t      *testing.T
	eng    *middleware.Engine
	rec    *agentsafetest.Recorder
	finals chan middleware.Event
	srv    *httptest.Server
	client *http.Client
}

// newHarness builds an engine from reg and serves what mount returns.
func newHarness(t *testing.T, reg *middleware.Registry, mount func(eng *middleware.Engine) http.Handler, opts ...middleware.Option) *harness {
	t.Helper()
	h := &harness{t: t, rec: &agentsafetest.Recorder{}, finals: make(chan middleware.Event, 64)}
	finals := middleware.EventSinkFunc(func(_ context.Context, e middleware.Event) {
		if e.Type.Final() {
			h.finals <- e
		}
	})
	// Routes only, unless a test hands the engine a store for the test
	// service's method options (see metadata_test.go).
	opts = append([]middleware.Option{middleware.WithEventSink(h.rec), middleware.WithEventSink(finals), middleware.WithProtoFiles(nil)}, opts...)
	eng, err := middleware.New(reg, opts...)
	if err != nil {
		t.Fatalf("middleware.New: %v", err)
	}
	h.eng = eng
	h.srv = httptest.NewServer(mount(eng))
	t.Cleanup(h.srv.Close)
	h.client = h.srv.Client()
	return h
}

// do sends a request and returns the response with its body read (and
// readable again, for EnvelopeFromResponse).
func (h *harness) do(req *http.Request) (*http.Response, string) {
	h.t.Helper()
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("reading the body: %v", err)
	}
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp, string(b)
}

func (h *harness) post(path, contentType, body string) (*http.Response, string) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return h.do(req)
}

// final waits for the next final event.
func (h *harness) final() middleware.Event {
	h.t.Helper()
	select {
	case e := <-h.finals:
		return e
	case <-time.After(guard):
		h.t.Fatal("no final event")
		return middleware.Event{}
	}
}

// envelope reads the envelope of resp or fails.
func envelope(t *testing.T, resp *http.Response) middleware.Envelope {
	t.Helper()
	env, ok := nethttpadapter.EnvelopeFromResponse(resp)
	if !ok {
		t.Fatalf("response %d %v carries no envelope", resp.StatusCode, resp.Header)
	}
	return env
}

// recv waits for a value from ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// scripted answers attempt n with statuses[n-1], and "ok n" once the script
// runs out.
func scripted(runs *atomic.Int32, statuses ...int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		x, _ := middleware.ExecutionFromContext(r.Context())
		if x.Attempt <= len(statuses) {
			w.WriteHeader(statuses[x.Attempt-1])
			fmt.Fprintf(w, "attempt %d failed", x.Attempt)
			return
		}
		fmt.Fprintf(w, "ok %d", x.Attempt)
	})
}

// newEngine builds a routes-only engine governing "r" with c.
func newEngine(t *testing.T, c middleware.Capability, opts ...middleware.Option) *middleware.Engine {
	t.Helper()
	eng, err := middleware.New(middleware.NewRegistry().Register("r", c), append([]middleware.Option{middleware.WithProtoFiles(nil)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func read(c middleware.Capability) middleware.Capability {
	c.SideEffect = middleware.SideEffectRead
	return c
}

func httptestServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
