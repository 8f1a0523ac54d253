// Command nethttp is the order service of examples/refund as plain
// net/http JSON routes: the one line each route needs is
// nethttpadapter.Wrap. Routes have no .proto, so their capabilities come
// from a Go registry.
//
//	go run ./examples/nethttp
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	ordersv1 "github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1"
	"github.com/agentsafe/agentsafe/examples/internal/orders"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nethttp:", err)
		os.Exit(1)
	}
}

func run() error {
	reg := middleware.NewRegistry().
		Register("get-order", middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: 2 * time.Second,
			Retry: middleware.Retry{MaxRetries: 2, Backoff: 20 * time.Millisecond}}).
		Register("refund-order", middleware.Capability{SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: 2 * time.Second,
			Retry: middleware.Retry{MaxRetries: 1, Backoff: 20 * time.Millisecond}})
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil)) // routes only: no protobuf method options
	if err != nil {
		return err
	}
	svc := orders.New()
	mux := http.NewServeMux()
	mux.Handle("GET /orders/{id}", nethttpadapter.Wrap(eng, "get-order", getOrder(svc)))          // one line
	mux.Handle("POST /orders/{id}/refund", nethttpadapter.Wrap(eng, "refund-order", refund(svc))) // one line
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	server := &http.Server{Handler: mux}
	go server.Serve(lis)
	defer server.Close()
	base := "http://" + lis.Addr().String()

	svc.FlakyReads.Store(1)
	resp, err := http.Get(base + "/orders/42")
	if err != nil {
		return err
	}
	if env := show("GET /orders/42", resp); env.Error != nil || env.Attempts != 2 {
		return fmt.Errorf("GET /orders/42: want a success in 2 attempts, got %+v", env)
	}

	svc.Gateway.LoseReplies.Store(1)
	resp, err = http.Post(base+"/orders/44/refund", "application/json", strings.NewReader(`{"amountCents": 5000}`))
	if err != nil {
		return err
	}
	show("POST /orders/44/refund", resp)
	fmt.Printf("the gateway applied %d refund(s)\n", svc.Gateway.Refunds())
	if svc.Gateway.Refunds() != 1 {
		return errors.New("the retried refund must be applied once, under one idempotency key")
	}
	return nil
}

func show(what string, resp *http.Response) middleware.Envelope {
	env, _ := nethttpadapter.EnvelopeFromResponse(resp)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("%s: %d %s after %d attempt(s) in %s: %s\n", what, resp.StatusCode, env.Status, env.Attempts, env.ExecutionID, strings.TrimSpace(string(body)))
	return env
}

// getOrder and refund are ordinary handlers: they signal failure by status
// (503 is transient, so the read is retried) and answer JSON.
func getOrder(svc *orders.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, err := svc.GetOrder(r.Context(), &ordersv1.GetOrderRequest{OrderId: r.PathValue("id")})
		reply(w, o, err)
	})
}

func refund(svc *orders.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ AmountCents int64 }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "malformed JSON body: "+err.Error(), http.StatusBadRequest)
			return
		}
		res, err := svc.RefundOrder(r.Context(), &ordersv1.RefundOrderRequest{OrderId: r.PathValue("id"), AmountCents: in.AmountCents})
		reply(w, res, err)
	})
}

func reply(w http.ResponseWriter, v any, err error) {
	switch {
	case errors.Is(err, orders.ErrTransient):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case errors.Is(err, orders.ErrAlreadyRefunded):
		http.Error(w, err.Error(), http.StatusConflict)
	case errors.Is(err, orders.ErrNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, "internal error", http.StatusInternalServerError)
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
}
