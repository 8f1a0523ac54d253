package twirpadapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/twitchtv/twirp"
)

// An attempt abandoned at its deadline keeps running: it mutates its
// request and sets response headers while the next attempt runs, and again
// after the response was sent. None of it reaches the next attempt or the
// client.
func TestAbandonedAttemptNeverReachesClient(t *testing.T) {
	t.Parallel()
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			t.Parallel()
			var (
				release       = make(chan struct{})
				lateSet       = make(chan struct{})
				afterResponse = make(chan struct{})
				lateDone      = make(chan struct{})
				seenID        = make(chan string, 1)
			)
			svc := &service{hook: func(ctx context.Context, in *testv1.Request, x middleware.Execution) (*testv1.Response, error) {
				if x.Attempt == 1 { // ignores its context: abandoned at 50ms
					in.Id = "mutated by attempt 1"
					_ = twirp.SetHTTPResponseHeader(ctx, "X-Late", "1")
					<-release
					_ = twirp.SetHTTPResponseHeader(ctx, "X-Late-Again", "1")
					_ = twirp.AddHTTPResponseHeader(ctx, "X-Final", "from attempt 1")
					close(lateSet)
					<-afterResponse
					_ = twirp.SetHTTPResponseHeader(ctx, "X-After-Response", "1") // would race with the server if it were the real header
					close(lateDone)
					return &testv1.Response{Note: "late"}, nil
				}
				seenID <- in.Id
				close(release)
				<-lateSet
				_ = twirp.SetHTTPResponseHeader(ctx, "X-Final", "2")
				return nil, nil // the service's default answer
			}}
			reg := middleware.NewRegistry().Register(procRead, middleware.Capability{
				SideEffect: middleware.SideEffectRead, Timeout: 50 * time.Millisecond, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond},
			})
			h := newHarness(t, reg, svc)
			ctx, header := withHeaders(t.Context())
			resp, err := h.client(enc.newClient).Read(ctx, &testv1.Request{Id: "original"})
			close(afterResponse)
			if err != nil || resp.Attempt != 2 || resp.Id != "original" || resp.Note != "" {
				t.Fatalf("response %v, %v; want attempt 2's answer for the original request", resp, err)
			}
			if id := recv(t, seenID, "attempt 2"); id != "original" {
				t.Errorf("attempt 2 saw request id %q: attempts must not share the request", id)
			}
			for _, k := range []string{"X-Late", "X-Late-Again", "X-After-Response"} {
				if v := header.Get(k); v != "" {
					t.Errorf("the abandoned attempt's header %s: %s reached the client", k, v)
				}
			}
			if got := header.Values("X-Final"); len(got) != 1 || got[0] != "2" || header.Get(middleware.HeaderAttempts) != "2" {
				t.Errorf("X-Final %q, %s %q; want only attempt 2's header", got, middleware.HeaderAttempts, header.Get(middleware.HeaderAttempts))
			}
			recv(t, lateDone, "the abandoned attempt")
			if e := recv(t, h.abandoned, "capability.abandoned_result"); e.Attempt != 1 || !e.Succeeded {
				t.Errorf("abandoned_result %+v, want attempt 1, succeeded", e)
			}
			h.final()
		})
	}
}
