package nethttpadapter_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// BenchmarkWrap compares a bare handler with the same handler wrapped, in
// process (no network), echoing request bodies of 1 KiB and 64 KiB. Compare
// the pairs as ratios within one run.
func BenchmarkWrap(b *testing.B) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.Copy(w, r.Body)
	})
	eng, err := middleware.New(middleware.NewRegistry().Register("echo", middleware.Capability{SideEffect: middleware.SideEffectRead}), middleware.WithProtoFiles(nil))
	if err != nil {
		b.Fatal(err)
	}
	wrapped := nethttpadapter.Wrap(eng, "echo", echo)
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}} {
		body := bytes.Repeat([]byte("a"), size.n)
		for _, h := range []struct {
			name string
			h    http.Handler
		}{{"bare", echo}, {"wrap", wrapped}} {
			b.Run(size.name+"/"+h.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size.n))
				for b.Loop() {
					req := httptest.NewRequest(http.MethodPost, "/echo", bytes.NewReader(body))
					rec := httptest.NewRecorder()
					h.h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK || rec.Body.Len() != size.n {
						b.Fatalf("status %d, %d bytes", rec.Code, rec.Body.Len())
					}
				}
			})
		}
	}
}
