package nethttpadapter_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// Request bodies are recycled, but never while an attempt may still read
// one: a handler abandoned at its deadline that reads its body after other
// requests of the same size were served reads its own bytes.
func TestAnAbandonedAttemptKeepsItsBody(t *testing.T) {
	agentsafetest.Test(t, func(t *testing.T) {
		eng := newEngine(t, read(middleware.Capability{Timeout: 100 * time.Millisecond}))
		release := make(chan struct{})
		var late []byte
		h := nethttpadapter.Wrap(eng, "r", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Late") != "" {
				<-release // ignores its context
				late, _ = io.ReadAll(r.Body)
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		serve := func(body []byte, header string) int {
			req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			if header != "" {
				req.Header.Set("X-Late", header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec.Code
		}
		own := bytes.Repeat([]byte("a"), 4000)
		if code := serve(own, "yes"); code != http.StatusGatewayTimeout {
			t.Fatalf("status %d, want 504: the handler ignores its context", code)
		}
		for range 50 { // bodies of the same size class, which a recycled buffer would hold
			serve(bytes.Repeat([]byte("b"), 4000), "")
		}
		close(release)
		synctest.Wait()
		if !bytes.Equal(late, own) {
			t.Fatalf("the abandoned attempt read %d bytes of another request's body, want its own %d", bytes.Count(late, []byte("b")), len(own))
		}
	})
}
