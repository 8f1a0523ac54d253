package nethttpadapter_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// The header a governed response sends is the handler's header as it was
// when the status was written, as net/http sends it: a Set, Add or Del
// after WriteHeader changes nothing on the wire (trailers aside), by
// default and Inline.
func TestHeaderChangesAfterWriteHeaderAreNotSent(t *testing.T) {
	t.Parallel()
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("X-Kept", "before")
		h["X-Many"] = make([]string, 1, 4) // room to grow in place
		h["X-Many"][0] = "one"
		h.Set("X-Dropped", "before")
		w.WriteHeader(http.StatusCreated)
		h.Set("X-Kept", "after")
		h.Add("X-Many", "two")
		h.Del("X-Dropped")
		h.Set("X-Late", "after")
		_, _ = w.Write([]byte("ok"))
	})
	for _, inline := range []bool{false, true} {
		eng, err := middleware.New(middleware.NewRegistry().Register("create", middleware.Capability{
			SideEffect: middleware.SideEffectWrite, Inline: inline}), middleware.WithProtoFiles(nil))
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		nethttpadapter.Wrap(eng, "create", handler).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/create", nil))
		res := w.Result()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("inline=%v: status %d, want 201", inline, res.StatusCode)
		}
		for k, want := range map[string][]string{"X-Kept": {"before"}, "X-Many": {"one"}, "X-Dropped": {"before"}, "X-Late": nil} {
			if got := res.Header.Values(k); len(got) != len(want) || len(want) > 0 && got[0] != want[0] {
				t.Errorf("inline=%v: %s = %q, want %q: a header changed after WriteHeader must not reach the client", inline, k, got, want)
			}
		}
	}
}
