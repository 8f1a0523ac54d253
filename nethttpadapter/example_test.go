package nethttpadapter_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// One wrapped handler: a read that fails once with 503 is retried in the
// same execution; the client sees one answer and the envelope's ids.
func Example() {
	reg := middleware.NewRegistry().Register("get-order", middleware.Capability{
		SideEffect: middleware.SideEffectRead,
		Retry:      middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}, // at most 3 runs
	})
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil)) // routes only: no protobuf descriptors
	if err != nil {
		panic(err)
	}

	var calls atomic.Int32
	getOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "database briefly unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, `{"order":42,"status":"shipped"}`)
	})
	mux := http.NewServeMux()
	mux.Handle("GET /orders/42", nethttpadapter.Wrap(eng, "get-order", getOrder))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := srv.Client().Get(srv.URL + "/orders/42")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	env, _ := nethttpadapter.EnvelopeFromResponse(resp)
	fmt.Print(resp.StatusCode, " ", string(body))
	fmt.Println(env.Status, "after", env.Attempts, "attempts")
	// Output:
	// 200 {"order":42,"status":"shipped"}
	// completed after 2 attempts
}

// One wrapped ServeMux, capabilities named by pattern. A payment that hangs
// past its timeout ends TIMEOUT with a JSON envelope, and is reported not
// safe to re-invoke: a new call would charge again under a new key.
func ExampleWrapMux() {
	reg := middleware.NewRegistry().Register("POST /payments", middleware.Capability{
		SideEffect: middleware.SideEffectExternal,
		Timeout:    20 * time.Millisecond,
	})
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil)) // routes only: no protobuf descriptors
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // the payment gateway does not answer in time
	})
	srv := httptest.NewServer(nethttpadapter.WrapMux(eng, mux))
	defer srv.Close()

	resp, err := srv.Client().Post(srv.URL+"/payments", "application/json", strings.NewReader(`{"amount":100}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	env, _ := nethttpadapter.EnvelopeFromResponse(resp)
	fmt.Println(resp.StatusCode, env.Status, env.Error.Code)
	fmt.Println("safe to re-invoke:", env.Error.Retryable)
	// Output:
	// 504 cancelled TIMEOUT
	// safe to re-invoke: false
}
