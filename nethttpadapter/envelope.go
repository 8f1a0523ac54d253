package nethttpadapter

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/agentsafe/agentsafe/middleware"
)

// writeEnvelope answers with the JSON envelope of an outcome the engine (or
// the adapter, for a body it refused) decided: the ids in headers, the
// envelope as the body.
func writeEnvelope(w http.ResponseWriter, env middleware.Envelope, status int) {
	body, err := json.Marshal(env)
	if err != nil { // an Envelope always marshals; keep the status regardless
		body = nil
	}
	h := w.Header()
	env.SetHeaders(h)
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
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
//   - The ids come from the Agentsafe-* headers on every governed response.
//   - When the status is 400 or more and the body is the JSON envelope the
//     adapter writes for outcomes the engine decides (timeout, cancel,
//     approval, panic, oversize body), status and error come from it. The
//     body stays readable: EnvelopeFromResponse puts back what it read.
//   - A response the handler wrote itself with a status of 500 or more is
//     reported as the engine's envelope has it: failed, EXECUTION_FAILED,
//     [middleware.ConcealedMessage]; Retryable is false, because whether
//     re-invoking is safe depends on the capability, which the response
//     does not say.
//   - Any other response with the headers is completed.
func EnvelopeFromResponse(resp *http.Response) (middleware.Envelope, bool) {
	if resp == nil {
		return middleware.Envelope{}, false
	}
	env, ok := middleware.EnvelopeFromHeaders(resp.Header)
	if resp.StatusCode >= 400 {
		if body, found := envelopeBody(resp, env.ExecutionID); found {
			return body, true
		}
	}
	if !ok {
		return middleware.Envelope{}, false
	}
	if resp.StatusCode >= 500 {
		env.Status = middleware.StatusFailed
		env.Error = &middleware.EnvelopeError{Code: middleware.CodeExecutionFailed, Message: middleware.ConcealedMessage}
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
