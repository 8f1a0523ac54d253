package nethttpadapter

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentsafe/agentsafe/internal/replay"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// callerKey is the caller's Idempotency-Key header, every value of it:
// more than one, or an empty one, is malformed, which the engine reports.
func callerKey(r *http.Request) string {
	return adapter.CallerKey(r.Header[adapter.HeaderIdempotencyKey]) // a canonical name: see call
}

// replayCodec stores a finalized attempt's response, for a repeat with
// the caller's key: its status, the headers it sent less hop-by-hop ones,
// Date and the envelope's, and its body (trailers are not stored). A
// replay is written as a fresh response is, with the stored execution's
// envelope.
type replayCodec struct{}

func (replayCodec) Marshal(a *attemptWriter) ([]byte, error) {
	if a == nil {
		return nil, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	h := make(http.Header, len(a.header))
	add := func(k string, v []string) {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			h[k] = v
		}
	}
	status := a.status
	if status == 0 { // the handler wrote nothing: an implicit 200
		for k, v := range a.header {
			add(k, v)
		}
		status = http.StatusOK
	}
	for _, f := range a.sent.fields {
		add(f.key, f.values)
	}
	adapter.DelHeaders(h)
	return replay.EncodeHTTP(status, h, a.body.b), nil
}

// Unmarshal rebuilds a sealed attempt writer; nil is an empty 200.
func (replayCodec) Unmarshal(b []byte) (*attemptWriter, error) {
	a := &attemptWriter{header: http.Header{}, status: http.StatusOK, sealed: true}
	if b == nil {
		return a, nil
	}
	status, h, body, err := replay.DecodeHTTP(b)
	if err != nil {
		return nil, err
	}
	a.header, a.status = h, status
	a.sent.take(h)
	if len(body) > 0 {
		a.body = buffer{b: body} // not pooled: release leaves it to the collector
	}
	return a, nil
}

// MarshalError stores a handler's failing status; its response is the
// attempt's, stored by Marshal.
func (replayCodec) MarshalError(err error) ([]byte, error) {
	se, ok := errors.AsType[*StatusError](err)
	if !ok {
		return nil, errors.New("nethttpadapter: not a StatusError")
	}
	return strconv.AppendInt(nil, int64(se.Status), 10), nil
}

func (replayCodec) UnmarshalError(b []byte) (error, error) {
	status, err := strconv.Atoi(string(b))
	if err != nil {
		return nil, err
	}
	return &StatusError{Status: status}, nil
}
