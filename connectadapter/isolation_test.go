package connectadapter_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
)

// Each attempt has its own request message and its own response header and
// trailer sink; only the reported attempt's reach the wire. The request
// header map is shared, for reading.
func TestAttemptIsolation(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		var mu sync.Mutex
		var idsSeen, clientHeaders []string
		srv := newServer(t, serverConfig{handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
			x, _ := middleware.ExecutionFromContext(ctx)
			info, ok := connect.CallInfoForHandlerContext(ctx)
			if !ok {
				return nil, errors.New("no CallInfo in the handler's context")
			}
			n := strconv.Itoa(x.Attempt)
			mu.Lock()
			idsSeen = append(idsSeen, req.Msg.GetId())
			clientHeaders = append(clientHeaders, req.Header().Get("X-Client")+"/"+info.RequestHeader().Get("X-Client"))
			mu.Unlock()
			info.ResponseHeader().Add("X-Attempt", n) // Add: a shared map would collect every attempt's
			info.ResponseTrailer().Add("X-Attempt-Trailer", n)
			req.Msg.Id = "mutated by attempt " + n // must not leak into the next attempt
			if int32(x.Attempt) <= req.Msg.GetFailTimes() {
				return nil, failure(req.Msg.GetFailCode())
			}
			res := answer(ctx, req)
			res.Header().Set("X-Response-Attempt", n)
			return res, nil
		}})
		c := srv.client(t, p)

		t.Run("success", func(t *testing.T) {
			req := request(&testv1.Request{Id: "original", FailTimes: 2, FailCode: "unavailable"})
			req.Header().Set("X-Client", "c")
			res, err := c.Read(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Header().Values("X-Attempt"); !slices.Equal(got, []string{"3"}) {
				t.Errorf("X-Attempt %q, want only the finalized attempt's [3]", got)
			}
			if got := res.Trailer().Values("X-Attempt-Trailer"); !slices.Equal(got, []string{"3"}) {
				t.Errorf("X-Attempt-Trailer %q, want only the finalized attempt's [3]", got)
			}
			if got := res.Header().Values("X-Response-Attempt"); !slices.Equal(got, []string{"3"}) {
				t.Errorf("X-Response-Attempt %q, want [3]", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(idsSeen, []string{"original", "original", "original"}) {
				t.Errorf("attempts saw ids %q, want the original input every time", idsSeen)
			}
			if !slices.Equal(clientHeaders, []string{"c/c", "c/c", "c/c"}) {
				t.Errorf("attempts read request header X-Client as %q, want c through both views", clientHeaders)
			}
			srv.sink.final(t)
		})

		t.Run("error reports the last attempt's headers", func(t *testing.T) {
			_, err := c.Read(t.Context(), request(&testv1.Request{FailTimes: 5, FailCode: "unavailable"}))
			ce := wantConnectCode(t, err, connect.CodeUnavailable)
			if got := ce.Meta().Values("X-Attempt"); !slices.Equal(got, []string{"3"}) {
				t.Errorf("X-Attempt %q, want only the reported attempt's [3]", got)
			}
			srv.sink.final(t)
		})
	})
}

// An attempt abandoned at its deadline that writes its headers late writes
// only into its own sink: nothing of it reaches the wire, and (under -race)
// it never races with Connect writing the response of the next attempt.
func TestAbandonedAttemptNeverReachesTheWire(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		reg := middleware.NewRegistry().
			Register(procRead, middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: 50 * time.Millisecond, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}}).
			Register(procSlow, middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: 50 * time.Millisecond})
		release, hang := make(chan struct{}), make(chan struct{})
		var once sync.Once
		done := make(chan struct{}, 2)
		srv := newServer(t, serverConfig{reg: reg, handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
			x, _ := middleware.ExecutionFromContext(ctx)
			info, _ := connect.CallInfoForHandlerContext(ctx)
			if x.Attempt == 2 {
				info.ResponseHeader().Set("X-Attempt", "2")
				once.Do(func() { close(release) }) // the late attempt writes while this response goes out
				return answer(ctx, req), nil
			}
			defer func() { done <- struct{}{} }()
			if req.Msg.GetMode() == "hang" {
				<-hang // ignores its context, until the test has its answer
			} else {
				<-release // ignores its context: abandoned at 50ms
			}
			for i := range 200 {
				info.ResponseHeader().Set("X-Attempt", "late")
				info.ResponseHeader().Add("X-Late", strconv.Itoa(i))
				info.ResponseTrailer().Set("X-Late", "late")
			}
			return answer(ctx, req), nil
		}})
		c := srv.client(t, p)

		t.Run("retried after the abandoned attempt", func(t *testing.T) {
			res, err := c.Read(t.Context(), request(&testv1.Request{}))
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Header().Values("X-Attempt"); !slices.Equal(got, []string{"2"}) || res.Header().Get("X-Late") != "" || res.Trailer().Get("X-Late") != "" {
				t.Errorf("headers %v, trailers %v: want only attempt 2's", res.Header(), res.Trailer())
			}
			waitDone(t, done)
			if e := srv.sink.lateEvent(t); !e.Succeeded || e.Attempt != 1 {
				t.Errorf("abandoned_result %+v, want attempt 1 reported as succeeded late", e)
			}
		})

		t.Run("timeout", func(t *testing.T) {
			_, err := c.Slow(t.Context(), request(&testv1.Request{Mode: "hang"}))
			close(hang)
			ce := wantConnectCode(t, err, connect.CodeDeadlineExceeded)
			if ce.Meta().Get("X-Attempt") != "" || ce.Meta().Get("X-Late") != "" {
				t.Errorf("metadata %v: an abandoned attempt's headers reached the wire", ce.Meta())
			}
			waitDone(t, done)
			if e := srv.sink.lateEvent(t); !e.Succeeded {
				t.Errorf("abandoned_result %+v, want the late success reported", e)
			}
		})
	})
}

func waitDone(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(waitBound):
		t.Fatal("the abandoned attempt never returned")
	}
}
