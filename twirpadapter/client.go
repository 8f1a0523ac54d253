package twirpadapter

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/twitchtv/twirp"
)

// Transport returns a RoundTripper for the http.Client of a Twirp client:
// it sends requests with next (http.DefaultTransport when nil) and, for
// calls made with a context from [RecordEnvelope], records the response
// headers. Twirp's generated clients do not expose them otherwise, and the
// envelope of every governed call travels there (on error also its code
// and retryable flag); only errors agentsafe decided repeat it in their
// meta.
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
		rec.mu.Lock()
		rec.header = resp.Header
		rec.mu.Unlock()
	}
	return resp, err
}

type recorderKey struct{}

// Recorder holds the response headers of one call; see [RecordEnvelope].
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

// Envelope returns the envelope of the recorded call, given the error the
// call returned: from the recorded Agentsafe-* headers, which every
// governed response carries (the message of a failure is the error's),
// else from the error's meta (see [EnvelopeFromError]). It reports false
// when neither has an envelope.
func (r *Recorder) Envelope(err error) (middleware.Envelope, bool) {
	r.mu.Lock()
	h := r.header
	r.mu.Unlock()
	env, ok := adapter.ReadHeaders(h)
	if !ok {
		return EnvelopeFromError(err)
	}
	if twerr, isTwirp := errors.AsType[twirp.Error](err); isTwirp && env.Error != nil {
		env.Error.Message = twerr.Msg()
	}
	return env, true
}
