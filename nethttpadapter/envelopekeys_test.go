package nethttpadapter_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// The envelope's headers are the engine's alone, as trailers too: a handler
// that declares or sets Agentsafe-Execution-Id, -Attempts, -Approval-Id,
// -Code or -Retryable as a trailer (forwarding a downstream response's,
// say) must not put another execution's values on the wire after the body.
// Its other trailers pass.
func TestHandlerTrailersCannotCarryTheEnvelopesKeys(t *testing.T) {
	t.Parallel()
	seen := make(chan middleware.Execution, 1)
	h := newHarness(t, middleware.NewRegistry().Register("w", read(middleware.Capability{})), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "w", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			x, _ := middleware.ExecutionFromContext(r.Context())
			seen <- x
			w.Header().Set("Trailer", "Agentsafe-Execution-Id, X-Checksum, Agentsafe-Code")
			_, _ = io.WriteString(w, "body")
			w.Header().Set(adapter.HeaderExecutionID, "exe_forged")
			w.Header().Set("X-Checksum", "abc")
			w.Header().Set(http.TrailerPrefix+adapter.HeaderAttempts, "9")
			w.Header().Set(http.TrailerPrefix+"agentsafe-approval-id", "apr_00000000000000000000000000000000")
			w.Header().Set(adapter.HeaderCode, "TIMEOUT")
			w.Header().Set(http.TrailerPrefix+adapter.HeaderRetryable, "true")
		}))
	})
	resp, body := h.post("/", "", "")
	x := recv(t, seen, "the handler")
	if resp.StatusCode != http.StatusOK || body != "body" {
		t.Fatalf("response %d %q", resp.StatusCode, body)
	}
	for k, v := range resp.Trailer {
		switch http.CanonicalHeaderKey(k) {
		case adapter.HeaderExecutionID, adapter.HeaderAttempts, adapter.HeaderApprovalID, adapter.HeaderCode, adapter.HeaderRetryable:
			t.Errorf("trailer %s: %q reached the wire; the envelope of %s is in the headers, and its keys are the engine's alone", k, v, x.ID)
		}
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Errorf("the handler's own trailer X-Checksum: %q, want abc", got)
	}
	if env := envelope(t, resp); env.ExecutionID != x.ID || env.Attempts != 1 {
		t.Errorf("envelope %+v, want execution %s after 1 attempt", env, x.ID)
	}
	h.final()
}

// A handler that writes an envelope header under a key in another case,
// by assigning to the header map (w.Header()["agentsafe-code"]), must not
// turn a success into that code on the wire: clients canonicalize what
// they receive.
func TestHandlerHeadersInAnyCaseCannotCarryTheEnvelopesKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, middleware.NewRegistry().Register("w", read(middleware.Capability{})), func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "w", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["agentsafe-code"] = []string{"TIMEOUT"}
			w.Header()["agentsafe-retryable"] = []string{"true"}
			w.Header()["agentsafe-execution-id"] = []string{"exe_forged"}
			_, _ = io.WriteString(w, "body")
		}))
	})
	resp, _ := h.post("/", "", "")
	env := envelope(t, resp)
	if resp.StatusCode != http.StatusOK || env.Error != nil || env.ExecutionID == "exe_forged" || len(resp.Header.Values(adapter.HeaderExecutionID)) != 1 ||
		resp.Header.Get(adapter.HeaderCode) != "" {
		t.Errorf("%d, headers %v read as %+v; want a completed envelope, the engine's alone", resp.StatusCode, resp.Header, env)
	}
	h.final()
}
