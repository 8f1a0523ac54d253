package nethttpadapter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// In process: the client calls the wrapped mux through an in-memory
// transport, and the suite runs every rule on a fake clock.
func TestConformance(t *testing.T) {
	conformance.RunAdapter(t, conformanceHarness{inProcess: true})
}

// Over a real HTTP server, the same rules with real time, sockets and
// net/http's own client.
func TestConformanceOverSockets(t *testing.T) {
	conformance.RunAdapter(t, conformanceHarness{})
}

// conformanceHarness serves every fixture as a ServeMux route governed by
// its pattern, "POST /<fixture>".
type conformanceHarness struct{ inProcess bool }

func (h conformanceHarness) InProcess() bool { return h.inProcess }

func (conformanceHarness) Procedure(f conformance.Fixture) string { return "POST /" + string(f) }

func (h conformanceHarness) Start(t *testing.T, eng *middleware.Engine, handle conformance.Handler, stream conformance.StreamHandler) conformance.Client {
	mux := http.NewServeMux()
	for _, f := range conformance.Fixtures() {
		mux.HandleFunc("POST /"+string(f), func(w http.ResponseWriter, r *http.Request) {
			var in conformance.Request // each attempt decodes its own copy of the body
			_ = json.NewDecoder(r.Body).Decode(&in)
			resp, err := handle(r.Context(), f, in, w.Header().Set)
			if in.Mode == conformance.ModeMutate {
				in.ID = conformance.MutatedID // a careless handler changes its input
			}
			if err != nil {
				fail(w, r, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(resp)
		})
	}
	mux.HandleFunc("POST /"+string(conformance.FixtureStream), func(w http.ResponseWriter, r *http.Request) {
		var in conformance.Request
		_ = json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "text/event-stream")
		err := stream(r.Context(), in, w.Header().Set, func(resp conformance.Response) error {
			b, _ := json.Marshal(resp)
			fmt.Fprintf(w, "data: %s\n\n", b)
			return http.NewResponseController(w).Flush()
		})
		if err != nil {
			fail(w, r, err)
		}
	})
	wrapped := nethttpadapter.WrapMux(eng, mux)
	// A mux without the fixtures' routes: its own 404.
	none := http.NewServeMux()
	if h.inProcess {
		return conformanceClient{base: "http://conformance.test", client: &http.Client{Transport: inMemory{wrapped}},
			absent: &conformanceClient{base: "http://conformance.test", client: &http.Client{Transport: inMemory{none}}}}
	}
	srv, noneSrv := httptest.NewServer(wrapped), httptest.NewServer(none)
	t.Cleanup(srv.Close)
	t.Cleanup(noneSrv.Close)
	return conformanceClient{base: srv.URL, client: srv.Client(), absent: &conformanceClient{base: noneSrv.URL, client: noneSrv.Client()}}
}

// CallUnhandled makes the call on a mux that routes it nowhere.
func (c conformanceClient) CallUnhandled(ctx context.Context, f conformance.Fixture, req conformance.Request) conformance.Result {
	return c.absent.Call(ctx, f, req, "")
}

// fail is how a net/http handler fails. net/http's own error, a status, is
// how it answers a *conformance.Status: the status, the message as the
// body, the detail in a header. A handler that gave up when its context
// ended says nothing; one that failed transiently answers 503, never the
// error's text. net/http has no way to return any other error: what a
// handler cannot answer it panics with, which the engine conceals.
func fail(w http.ResponseWriter, r *http.Request, err error) {
	st, own := errors.AsType[*conformance.Status](err)
	switch {
	case own:
		if st.Detail != "" {
			w.Header().Set("X-Conformance-Detail", st.Detail)
		}
		http.Error(w, st.Message, st.HTTPStatus())
	case r.Context().Err() != nil:
	case middleware.DefaultClassifier(err):
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
	default:
		panic(err)
	}
}

// inMemory serves requests with a handler in process, through no socket.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(req *http.Request) (*http.Response, error) {
	sr := req.Clone(req.Context())
	sr.RequestURI = req.URL.RequestURI()
	if sr.Body == nil {
		sr.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, sr)
	return rec.Result(), nil
}

type conformanceClient struct {
	base   string
	client *http.Client
	absent *conformanceClient
}

func (c conformanceClient) do(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID, key string) (*http.Response, error) {
	body, _ := json.Marshal(req)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+string(f), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	if approvalID != "" {
		r.Header.Set(adapter.HeaderApprovalID, approvalID)
	}
	if key != "" {
		r.Header.Set(adapter.HeaderIdempotencyKey, key)
	}
	return c.client.Do(r)
}

// CallRaw makes the call with a JSON body, as bytes; absent, on a mux
// without the fixtures' routes. net/http carries no deadline, and the
// adapter does not decode the body: an undecodable one is the handler's
// to refuse, and for a hidden route no handler runs.
func (c conformanceClient) CallRaw(ctx context.Context, f conformance.Fixture, req conformance.Request, shape conformance.Shape, absent bool) (conformance.RawResponse, bool) {
	if absent {
		c = *c.absent
	}
	body, _ := json.Marshal(req)
	h := http.Header{"Content-Type": {"application/json"}}
	switch shape {
	case conformance.ShapeMalformedApprovalID:
		h.Set(adapter.HeaderApprovalID, "x")
	case conformance.ShapeMalformedKey:
		h.Set(adapter.HeaderIdempotencyKey, `"unterminated`)
	case conformance.ShapeUndecodable:
		body = []byte(`{"ID":`)
	case conformance.ShapeUnbindable:
		h.Set(adapter.HeaderIdempotencyKey, "k1")
		body = []byte(`{"ID":"` + req.ID + `","ID":"` + req.ID + `"}`)
	case conformance.ShapeExpired:
		return conformance.RawResponse{}, false
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+string(f), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	r.Header = h
	return fixture.Do(c.client, r), true
}

func (c conformanceClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	return c.CallKeyed(ctx, f, req, approvalID, "")
}

func (c conformanceClient) CallKeyed(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID, key string) conformance.Result {
	resp, err := c.do(ctx, f, req, approvalID, key)
	if err != nil {
		return conformance.Result{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	res := result(resp, b, err)
	if res.Err == nil && resp.StatusCode == http.StatusOK {
		res.Response = new(conformance.Response)
		if len(b) > 0 { // a replay without a body is an empty 200
			res.Err = json.Unmarshal(b, res.Response)
		}
	}
	return res
}

func (c conformanceClient) Stream(ctx context.Context, req conformance.Request) ([]conformance.Response, conformance.Result) {
	resp, err := c.do(ctx, conformance.FixtureStream, req, "", "")
	if err != nil {
		return nil, conformance.Result{Err: err}
	}
	defer resp.Body.Close()
	var msgs []conformance.Response
	var raw bytes.Buffer
	lines := bufio.NewScanner(io.TeeReader(resp.Body, &raw))
	for lines.Scan() {
		if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok && resp.StatusCode == http.StatusOK {
			var m conformance.Response
			if err := json.Unmarshal([]byte(data), &m); err == nil {
				msgs = append(msgs, m)
			}
		}
	}
	res := result(resp, raw.Bytes(), lines.Err())
	if res.Err == nil && resp.StatusCode == http.StatusOK {
		res.Response = &conformance.Response{}
	}
	return msgs, res
}

// result reads what the client saw: the envelope through the adapter's own
// helper, headers and trailers, the body, and on failure net/http's error:
// the status, and the body as the message unless it is agentsafe's JSON
// envelope.
func result(resp *http.Response, body []byte, readErr error) conformance.Result {
	resp.Body = io.NopCloser(bytes.NewReader(body))
	env, _ := nethttpadapter.EnvelopeFromResponse(resp)
	h := resp.Header.Clone()
	for k, v := range resp.Trailer {
		h[k] = append(h[k], v...)
	}
	res := conformance.Result{Envelope: env, Header: h, Body: body, Err: readErr}
	if res.Err != nil || resp.StatusCode == http.StatusOK {
		return res
	}
	res.Err = fmt.Errorf("HTTP %d", resp.StatusCode)
	var own middleware.Envelope
	res.EngineDetail = json.Unmarshal(body, &own) == nil && own.Error != nil && own.ExecutionID == env.ExecutionID
	res.Status = &conformance.Status{Code: conformance.StatusFromHTTP(resp.StatusCode), Message: strings.TrimSuffix(string(body), "\n"), Detail: resp.Header.Get("X-Conformance-Detail")}
	if res.Status.Detail == "" && res.Status.Code == conformance.StatusInternal && resp.StatusCode != http.StatusInternalServerError {
		res.Status.Detail = resp.Status + " " + resp.Header.Get("Content-Type") // a status the suite's codes do not name
	}
	if res.EngineDetail {
		res.Status.Message = own.Error.Message
	}
	return res
}

// Surface: net/http routes come in on http.
func (conformanceHarness) Surface() middleware.Surface { return middleware.SurfaceHTTP }
