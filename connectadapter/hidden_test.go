package connectadapter_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// TestAHiddenStreamLooksAbsent: a hidden stream gets, in every protocol,
// what the Connect client reports for a server without the procedure, and
// its handler never runs.
func TestAHiddenStreamLooksAbsent(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		s := newServer(t, serverConfig{opts: []middleware.Option{middleware.WithPolicy(fixture.HideAll{})}})
		absent := testv1connect.NewTestServiceClient(httpClient(t, p.h2c), serve(t, http404()), p.opts...)
		receive := func(c testv1connect.TestServiceClient) (*connect.Error, map[string][]string) {
			st, err := c.Stream(t.Context(), connect.NewRequest(&testv1.Request{Id: "s1", Count: 2}))
			if err == nil {
				for st.Receive() {
				}
				err = st.Err()
			}
			ce, _ := errors.AsType[*connect.Error](err)
			if ce == nil {
				t.Fatalf("the stream ended with %v", err)
			}
			return ce, st.ResponseTrailer()
		}
		hidden, trailer := receive(s.client(t, p))
		want, _ := receive(absent)
		if hidden.Code() != want.Code() || hidden.Message() != want.Message() {
			t.Errorf("hidden stream: %v; a server without it: %v", hidden, want)
		}
		for k := range trailer {
			if strings.HasPrefix(k, "Agentsafe-") {
				t.Errorf("trailer %s reached the client", k)
			}
		}
		if n := len(s.svc.executions()); n != 0 {
			t.Errorf("the hidden stream's handler ran %d times", n)
		}
	})
}

// http404 is a server with no procedure at all: the mux's 404.
func http404() *http.ServeMux { return http.NewServeMux() }

// TestAGuardedHiddenProcedureIsConnectsNotFound: with the guard, a hidden
// procedure answers every request — over plain HTTP, with a method or a
// content type Connect refuses, an undecodable body, a malformed
// agentsafe header or an expired deadline — exactly as a server without
// it does: http.NotFound's 404, byte for byte (Date aside). Without it,
// Connect answered 501 with its JSON (or its 405, 415, 400) where a
// procedure that does not exist gets the plain 404.
func TestAGuardedHiddenProcedureIsConnectsNotFound(t *testing.T) {
	s := newServer(t, serverConfig{opts: []middleware.Option{middleware.WithPolicy(fixture.HideAll{})}})
	absent := serve(t, http404())
	hc := httpClient(t, false)
	for _, tc := range []struct {
		name, method, contentType, body string
		header                          map[string]string
	}{
		{"a plain GET", http.MethodGet, "", "", nil},
		{"a PUT Connect refuses with 405", http.MethodPut, "application/json", "{}", nil},
		{"a content type Connect refuses with 415", http.MethodPost, "text/plain", "refund", nil},
		{"a JSON body that does not decode", http.MethodPost, "application/json", `{"id":`, nil},
		{"a valid body", http.MethodPost, "application/json", `{"id":"r1"}`, nil},
		{"a malformed approval id and an expired deadline", http.MethodPost, "application/json", `{"id":"r1"}`,
			map[string]string{"Agentsafe-Approval-Id": "x", "Connect-Timeout-Ms": "1", "Idempotency-Key": `"unterminated`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			do := func(base string) conformance.RawResponse {
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				r, err := http.NewRequestWithContext(t.Context(), tc.method, base+testv1connect.TestServiceReadProcedure, body)
				if err != nil {
					t.Fatal(err)
				}
				if tc.contentType != "" {
					r.Header.Set("Content-Type", tc.contentType)
				}
				for k, v := range tc.header {
					r.Header.Set(k, v)
				}
				return fixture.Do(hc, r)
			}
			got, want := do(s.url), do(absent)
			got.Header.Del("Date")
			want.Header.Del("Date")
			if got.Status != want.Status || !reflect.DeepEqual(got.Header, want.Header) || !bytes.Equal(got.Body, want.Body) {
				t.Fatalf("hidden: %s\nabsent: %s", got, want)
			}
		})
	}
	if n := len(s.svc.executions()); n != 0 {
		t.Errorf("the hidden procedure's handler ran %d times", n)
	}
	eachProtocol(t, func(t *testing.T, p protocol) {
		call := func(c testv1connect.TestServiceClient) *connect.Error {
			_, err := c.Read(t.Context(), connect.NewRequest(&testv1.Request{Id: "r2"}))
			ce, _ := errors.AsType[*connect.Error](err)
			if ce == nil {
				t.Fatalf("the call ended with %v", err)
			}
			return ce
		}
		got := call(s.client(t, p))
		want := call(testv1connect.NewTestServiceClient(httpClient(t, p.h2c), absent, p.opts...))
		got.Meta().Del("Date")
		want.Meta().Del("Date")
		if got.Code() != want.Code() || got.Message() != want.Message() || !reflect.DeepEqual(got.Meta(), want.Meta()) || len(got.Details()) != 0 {
			t.Fatalf("hidden: %v, meta %v; absent: %v, meta %v", got, got.Meta(), want, want.Meta())
		}
	})
}

type principalKey struct{}

// TestHidingByWhatAnInterceptorAddsIsDecidedAfterDecoding: the guard sees
// the request's context only; a policy that needs the actor an
// authentication interceptor adds later hides at the interceptor, once
// the body decoded, with Connect's Unimplemented and no agentsafe header.
func TestHidingByWhatAnInterceptorAddsIsDecidedAfterDecoding(t *testing.T) {
	authenticate := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			return next(context.WithValue(ctx, principalKey{}, middleware.Actor{ID: "agent-7", Kind: "agent"}), req)
		}
	})
	actor := middleware.WithActor(func(ctx context.Context) (middleware.Actor, error) {
		a, ok := ctx.Value(principalKey{}).(middleware.Actor)
		if !ok {
			return middleware.Actor{}, errors.New("not authenticated")
		}
		return a, nil
	})
	s := newServer(t, serverConfig{before: []connect.Interceptor{authenticate}, opts: []middleware.Option{actor, middleware.WithPolicy(fixture.HideFromAgents{})}})
	_, err := s.client(t, protocols[0]).Read(t.Context(), connect.NewRequest(&testv1.Request{Id: "r1"}))
	ce, _ := errors.AsType[*connect.Error](err)
	if ce == nil || ce.Code() != connect.CodeUnimplemented {
		t.Fatalf("err %v: the interceptor hides what the guard could not tell", err)
	}
	for k := range ce.Meta() {
		if strings.HasPrefix(k, "Agentsafe-") {
			t.Errorf("header %s reached the client", k)
		}
	}
	if n := len(s.svc.executions()); n != 0 {
		t.Errorf("the handler ran %d times", n)
	}
}
