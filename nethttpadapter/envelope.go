package nethttpadapter

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// writeOutcome answers with an outcome the engine decided (or the adapter,
// for a request it refused): the envelope's headers, and the JSON envelope
// as the body, except for CANCELLED: its caller has left, and the status
// alone says so ([adapter.CarriesDetail]).
func writeOutcome(w http.ResponseWriter, env middleware.Envelope, err error, status int) {
	h := w.Header()
	adapter.SetHeaders(h, env)
	var body []byte
	if adapter.CarriesDetail(err) {
		body, _ = json.Marshal(env) // an Envelope always marshals
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// maxEnvelopeBytes bounds what EnvelopeFromResponse reads of a body to find
// an envelope; envelopes are far smaller.
const maxEnvelopeBytes = 64 << 10

// EnvelopeFromResponse reads the envelope of a governed call from its
// response. It reports false for a response that carries none (an
// ungoverned route, or a server without agentsafe).
//
//   - The ids, and on failure the code and whether re-invoking is safe,
//     come from the Agentsafe-* headers on every governed response.
//   - When the body is the JSON envelope the adapter writes for outcomes
//     the engine decides (timeout, approval, panic, oversize body, ...),
//     the message and the rest come from it. The body stays readable:
//     EnvelopeFromResponse puts back what it read.
//   - A failing response the handler wrote itself carries no envelope
//     body: its message is [adapter.ConcealedMessage], as in the engine's
//     envelope. A CANCELLED one has an empty message (the caller had left).
func EnvelopeFromResponse(resp *http.Response) (middleware.Envelope, bool) {
	if resp == nil {
		return middleware.Envelope{}, false
	}
	env, ok := adapter.ReadHeaders(resp.Header)
	if !ok || env.Error == nil {
		return env, ok
	}
	if body, found := envelopeBody(resp, env.ExecutionID); found {
		return body, true
	}
	if env.Error.Code == middleware.CodeExecutionFailed {
		env.Error.Message = adapter.ConcealedMessage
	}
	return env, true
}

// envelopeBody decodes resp's body as the JSON envelope of executionID and
// restores the body for the caller.
func envelopeBody(resp *http.Response, executionID string) (middleware.Envelope, bool) {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/json" || resp.Body == nil {
		return middleware.Envelope{}, false
	}
	prefix, err := io.ReadAll(io.LimitReader(resp.Body, maxEnvelopeBytes+1))
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(prefix), resp.Body), resp.Body}
	if err != nil || len(prefix) > maxEnvelopeBytes {
		return middleware.Envelope{}, false
	}
	var env middleware.Envelope
	if json.Unmarshal(prefix, &env) != nil || env.Error == nil || env.ExecutionID != executionID {
		return middleware.Envelope{}, false
	}
	return env, true
}

type readCloser struct {
	io.Reader
	io.Closer
}
