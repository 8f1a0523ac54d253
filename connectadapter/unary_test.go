package connectadapter_test

import (
	"context"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
)

// Interceptors listed before the guard run once per execution, those after
// it once per attempt.
func TestInterceptorOrder(t *testing.T) {
	var outer, inner atomic.Int32
	count := func(n *atomic.Int32) connect.Interceptor {
		return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				n.Add(1)
				return next(ctx, req)
			}
		})
	}
	srv := newServer(t, serverConfig{before: []connect.Interceptor{count(&outer)}, after: []connect.Interceptor{count(&inner)}})
	if _, err := srv.client(t, protocols[0]).Read(t.Context(), request(&testv1.Request{FailTimes: 2, FailCode: "unavailable"})); err != nil {
		t.Fatal(err)
	}
	if outer.Load() != 1 || inner.Load() != 3 {
		t.Errorf("outer interceptor ran %d times, inner %d; want 1 and 3", outer.Load(), inner.Load())
	}
}
