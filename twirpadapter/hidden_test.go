package twirpadapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/twirpadapter"
	"github.com/twitchtv/twirp"
)

type callerKind struct{}

// TestAHiddenMethodIsTwirpsBadRouteBeforeItsBodyIsRead: the guard is the
// last RequestReceived hook, so it sees what an authentication hook of
// yours put in the context, and answers before Twirp reads the body: an
// undecodable body on a hidden method is Twirp's bad_route, byte for byte,
// not malformed; and your Error and ResponseSent hooks see it as they see
// a path Twirp has no handler for.
func TestAHiddenMethodIsTwirpsBadRouteBeforeItsBodyIsRead(t *testing.T) {
	var errors, sent atomic.Int32
	var code atomic.Value
	hooks := &twirp.ServerHooks{
		RequestReceived: func(ctx context.Context) (context.Context, error) {
			return context.WithValue(ctx, callerKind{}, "agent"), nil // the caller authenticated
		},
		Error: func(ctx context.Context, err twirp.Error) context.Context {
			errors.Add(1)
			code.Store(err.Code())
			return ctx
		},
		ResponseSent: func(context.Context) { sent.Add(1) },
	}
	actor := middleware.WithActor(func(ctx context.Context) (middleware.Actor, error) {
		kind, _ := ctx.Value(callerKind{}).(string)
		return middleware.Actor{ID: "caller", Kind: kind}, nil
	})
	eng := agentsafetest.NewEngine(t, nil, actor, middleware.WithPolicy(fixture.HideFromAgents{}))
	srv := twirpadapter.Wrap(eng.Engine, func(opts ...any) testv1.TwirpServer {
		return testv1.NewTestServiceServer(&service{}, opts...)
	}, twirpadapter.WithServerOptions(twirp.WithServerHooks(hooks)))
	absent := testv1.NewElsewhereServer(nil, twirp.WithServerHooks(hooks))
	do := func(h http.Handler) conformance.RawResponse {
		r, _ := fixture.RawRequest(t.Context(), fixture.WireTwirp, "http://in-process/twirp"+testv1.TestService_Read_FullMethodName, conformance.Request{ID: "r1"}, conformance.ShapeUndecodable)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return conformance.RawResponse{Status: w.Code, Header: w.Header(), Body: w.Body.Bytes()}
	}
	got := do(srv)
	errorsHidden, sentHidden := errors.Load(), sent.Load()
	want := do(absent)
	if got.Status != want.Status || !reflect.DeepEqual(got.Header, want.Header) || string(got.Body) != string(want.Body) {
		t.Fatalf("hidden: %s\nabsent: %s", got, want)
	}
	if errorsHidden != 1 || sentHidden != 1 || errors.Load() != 2 || sent.Load() != 2 || code.Load() != twirp.BadRoute {
		t.Fatalf("Error hook %d/%d, ResponseSent %d/%d, last code %v: your hooks see a hidden call as a path Twirp has no handler for",
			errorsHidden, errors.Load(), sentHidden, sent.Load(), code.Load())
	}
}

// TestWrapPanicsWhenItsHooksAreReplaced: an option after Wrap's that sets
// the server's hooks would drop the guard without anyone noticing.
func TestWrapPanicsWhenItsHooksAreReplaced(t *testing.T) {
	eng := agentsafetest.NewEngine(t, nil)
	defer func() {
		if recover() == nil {
			t.Fatal("Wrap accepted a constructor that replaced its hooks")
		}
	}()
	twirpadapter.Wrap(eng.Engine, func(opts ...any) testv1.TwirpServer {
		return testv1.NewTestServiceServer(&service{}, append(opts, twirp.WithServerHooks(&twirp.ServerHooks{}))...)
	})
}
