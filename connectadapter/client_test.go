package connectadapter_test

import (
	"context"
	"net/url"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// The execution's idempotency key reaches a downstream Connect server as
// Idempotency-Key, unchanged across runtime retries, with one stable sub-key
// per label, on unary and streaming calls; a re-invocation sends a new key.
func TestIdempotencyKeyReachesDownstream(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		down := newServer(t, serverConfig{bare: true})
		u, _ := url.Parse(down.url)
		downstream := testv1connect.NewTestServiceClient(httpClient(t, p.h2c), down.url,
			append(slices.Clone(p.opts), connect.WithInterceptors(connectadapter.NewClientInterceptor(u.Hostname())))...)
		elsewhere := testv1connect.NewTestServiceClient(httpClient(t, p.h2c), down.url,
			append(slices.Clone(p.opts), connect.WithInterceptors(connectadapter.NewClientInterceptor("payments.example.com")))...)

		up := newServer(t, serverConfig{handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
			x, _ := middleware.ExecutionFromContext(ctx)
			if _, err := downstream.Write(ctx, request(&testv1.Request{})); err != nil {
				return nil, err
			}
			if _, err := downstream.Write(middleware.WithKeyLabel(ctx, "charge"), request(&testv1.Request{})); err != nil {
				return nil, err
			}
			stream, err := downstream.Stream(ctx, request(&testv1.Request{Count: 1}))
			if err != nil {
				return nil, err
			}
			for stream.Receive() {
			}
			if err := stream.Close(); err != nil {
				return nil, err
			}
			if _, err := elsewhere.Ungoverned(ctx, request(&testv1.Request{})); err != nil {
				return nil, err
			}
			own := request(&testv1.Request{})
			own.Header().Set(adapter.HeaderIdempotencyKey, "app-chosen-key")
			if _, err := downstream.Ungoverned(ctx, own); err != nil {
				return nil, err
			}
			if x.Attempt == 1 {
				return nil, failure("unavailable")
			}
			return answer(ctx, req), nil
		}})
		c := up.client(t, p)

		res, err := c.IdempotentWrite(t.Context(), request(&testv1.Request{}))
		if err != nil {
			t.Fatalf("IdempotentWrite: %v", err)
		}
		if res.Msg.GetAttempt() != 2 {
			t.Fatalf("IdempotentWrite answered by attempt %d, want 2", res.Msg.GetAttempt())
		}
		key := res.Msg.GetIdempotencyKey()
		sub := middleware.Execution{IdempotencyKey: key}.SubKey("charge")
		if sub == key {
			t.Fatal("the labelled sub-key equals the key")
		}
		want := []received{
			{procWrite, key}, {procWrite, sub}, {procStream, key}, {procUngoverned, ""}, {procUngoverned, "app-chosen-key"}, // attempt 1
			{procWrite, key}, {procWrite, sub}, {procStream, key}, {procUngoverned, ""}, {procUngoverned, "app-chosen-key"}, // attempt 2: the same keys
		}
		if got := down.received(); !equalReceived(got, want) {
			t.Fatalf("downstream saw\n %q\nwant\n %q", got, want)
		}

		// A re-invocation is a new execution with a new key.
		res2, err := c.IdempotentWrite(t.Context(), request(&testv1.Request{}))
		if err != nil {
			t.Fatal(err)
		}
		if k2 := res2.Msg.GetIdempotencyKey(); k2 == key || down.received()[10].key != k2 {
			t.Errorf("re-invocation sent key %q (execution key %q), want a new key", down.received()[10].key, k2)
		}

		// Outside a governed execution nothing is added.
		if _, err := downstream.Write(t.Context(), request(&testv1.Request{})); err != nil {
			t.Fatal(err)
		}
		if got := down.received(); got[len(got)-1].key != "" {
			t.Errorf("a call outside any execution carried Idempotency-Key %q", got[len(got)-1].key)
		}
	})
}

func equalReceived(got, want []received) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// The server interceptor does nothing on a client, and the client
// interceptor nothing on a handler.
func TestInterceptorSides(t *testing.T) {
	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	guard := connectadapter.NewInterceptor(eng)
	var incomingKey string
	down := newServer(t, serverConfig{
		after: []connect.Interceptor{connectadapter.NewClientInterceptor("127.0.0.1")},
		handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
			incomingKey = req.Header().Get(adapter.HeaderIdempotencyKey)
			return behave(ctx, req)
		},
	})
	c := testv1connect.NewTestServiceClient(httpClient(t, false), down.url, connect.WithInterceptors(guard))
	res, err := c.Read(t.Context(), request(&testv1.Request{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Header().Get(adapter.HeaderExecutionID); got != res.Msg.GetExecutionId() {
		t.Errorf("client sees execution %q, the server ran %q: the server interceptor acted on the client", got, res.Msg.GetExecutionId())
	}
	if incomingKey != "" {
		t.Errorf("the client interceptor set Idempotency-Key %q on an incoming request", incomingKey)
	}
	down.sink.final(t)
}
