package twirpadapter

import (
	"context"
	"net/http"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
)

// Transport returns a RoundTripper for the http.Client of a Twirp client:
// it sends requests with next (http.DefaultTransport when nil) and, for
// calls made with a context from [RecordEnvelope], records the Agentsafe-*
// response headers. Twirp's generated clients do not expose response
// headers otherwise, and a successful call's envelope travels only there.
//
//	client := orderv1.NewOrderServiceProtobufClient(url, &http.Client{Transport: twirpadapter.Transport(nil)})
//	ctx, rec := twirpadapter.RecordEnvelope(ctx)
//	resp, err := client.GetOrder(ctx, req)
//	env, ok := rec.Envelope(err)
func Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return transport{next}
}

type transport struct{ next http.RoundTripper }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if rec, ok := req.Context().Value(recorderKey{}).(*Recorder); ok && err == nil {
		rec.record(resp.Header)
	}
	return resp, err
}

type recorderKey struct{}

// Recorder holds the envelope headers of one call; see [RecordEnvelope].
type Recorder struct {
	mu     sync.Mutex
	header http.Header
}

// RecordEnvelope returns a context for one call through a client whose
// http.Client uses [Transport], and the Recorder that call's response
// headers go to. Use a new one per call.
func RecordEnvelope(ctx context.Context) (context.Context, *Recorder) {
	rec := new(Recorder)
	return context.WithValue(ctx, recorderKey{}, rec), rec
}

func (r *Recorder) record(h http.Header) {
	env := make(http.Header, 3)
	for _, k := range []string{middleware.HeaderExecutionID, middleware.HeaderAttempts, middleware.HeaderApprovalID} {
		if v := h.Values(k); len(v) > 0 {
			env[k] = v
		}
	}
	r.mu.Lock()
	r.header = env
	r.mu.Unlock()
}

// Envelope returns the envelope of the recorded call, given the error the
// call returned: from the error's meta when it carries one (see
// [EnvelopeFromError]), otherwise from the recorded headers, which make a
// completed envelope. It reports false when neither has an envelope.
func (r *Recorder) Envelope(err error) (middleware.Envelope, bool) {
	if env, ok := EnvelopeFromError(err); ok {
		return env, true
	}
	if err != nil {
		return middleware.Envelope{}, false
	}
	r.mu.Lock()
	h := r.header
	r.mu.Unlock()
	return middleware.EnvelopeFromHeaders(h)
}
