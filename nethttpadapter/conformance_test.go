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
	if h.inProcess {
		return conformanceClient{base: "http://conformance.test", client: &http.Client{Transport: inMemory{wrapped}}}
	}
	srv := httptest.NewServer(wrapped)
	t.Cleanup(srv.Close)
	return conformanceClient{base: srv.URL, client: srv.Client()}
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
}

func (c conformanceClient) do(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) (*http.Response, error) {
	body, _ := json.Marshal(req)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+string(f), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	if approvalID != "" {
		r.Header.Set(adapter.HeaderApprovalID, approvalID)
	}
	return c.client.Do(r)
}

func (c conformanceClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	resp, err := c.do(ctx, f, req, approvalID)
	if err != nil {
		return conformance.Result{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	res := result(resp, b, err)
	if res.Err == nil && resp.StatusCode == http.StatusOK {
		res.Response = new(conformance.Response)
		res.Err = json.Unmarshal(b, res.Response)
	}
	return res
}

func (c conformanceClient) Stream(ctx context.Context, req conformance.Request) ([]conformance.Response, conformance.Result) {
	resp, err := c.do(ctx, conformance.FixtureStream, req, "")
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
	if res.EngineDetail {
		res.Status.Message = own.Error.Message
	}
	return res
}
