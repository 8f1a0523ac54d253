package resultstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/resultstore"
)

type actorKey struct{}

// TestOneCallerCannotFillARedisApprovalsShare: on a noeviction Redis
// shared by results and approvals, one caller's keyed calls with large
// responses stop at its result quota (IDEMPOTENCY_QUOTA_EXCEEDED), and
// another caller's approval request still gets through. Without a quota
// that fits the Redis (the control), the same caller fills it and the
// approval request fails APPROVAL_UNAVAILABLE: the failure the quota
// prevents.
func TestOneCallerCannotFillARedisApprovalsShare(t *testing.T) {
	const gated = "/orders.v1.Orders/Approve"
	for _, tc := range []struct {
		name         string
		quota        middleware.Option
		wantFull     bool
		callerStopAt middleware.Code
	}{
		{"a quota that fits the Redis", middleware.WithResultQuota(10_000, 1<<20), false, middleware.CodeIdempotencyQuotaExceeded},
		{"control: a quota larger than the Redis", middleware.WithResultQuota(10_000, 1<<40), true, middleware.CodeIdempotencyUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			srv := redistest.Start(t)
			if srv.Kind() != redistest.RedisServer {
				t.Skip("maxmemory needs a real redis-server")
			}
			rdb := srv.Client()
			var base int64
			for line := range strings.Lines(rdb.Info(ctx, "memory").Val()) {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
					_, _ = fmt.Sscan(v, &base)
				}
			}
			if base == 0 {
				t.Fatal("no used_memory in INFO memory")
			}
			if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(base+4<<20)).Err(); err != nil {
				t.Fatal(err)
			}
			results, err := resultstore.NewRedis(rdb)
			if err != nil {
				t.Fatal(err)
			}
			approvals, err := approvalstore.NewRedis(rdb)
			if err != nil {
				t.Fatal(err)
			}
			reg := middleware.NewRegistry().
				Register(refund, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: 5 * time.Second}).
				Register(gated, middleware.Capability{SideEffect: middleware.SideEffectWrite, Timeout: 5 * time.Second, Approval: middleware.Approval{Required: true, Type: "manager"}})
			eng, err := middleware.New(reg, middleware.WithResultStore(results), middleware.WithResultKey(sealKey), middleware.WithApprovalStore(approvals),
				middleware.WithProtoFiles(nil), middleware.WithLogger(slog.New(slog.DiscardHandler)), tc.quota,
				middleware.WithActor(func(ctx context.Context) (middleware.Actor, error) {
					return ctx.Value(actorKey{}).(middleware.Actor), nil
				}))
			if err != nil {
				t.Fatal(err)
			}
			response := strings.Repeat("x", 16<<10)
			var stopped middleware.Code
			for i := range 1000 {
				in, key := operation(7, i)
				_, _, err := execute(context.WithValue(ctx, actorKey{}, agent), eng, in, key, func(context.Context) (any, error) { return response, nil })
				if err != nil {
					stopped = middleware.CodeOf(err)
					break
				}
			}
			if stopped != tc.callerStopAt {
				t.Fatalf("the one caller's keyed calls stopped with %s, want %s", stopped, tc.callerStopAt)
			}
			other := middleware.Actor{ID: "agent-9", Tenant: "acme", Kind: "agent"}
			_, env, err := adapter.Execute(context.WithValue(ctx, actorKey{}, other), adapter.Resolve(eng, gated),
				adapter.Call[any]{Input: adapter.JSONInput([]byte(`{"order":1}`)), Surface: adapter.SurfaceRPC, Codec: stringCodec{}},
				func(context.Context) (any, error) { return "approved", nil })
			want := middleware.CodeApprovalRequired
			if tc.wantFull {
				want = middleware.CodeApprovalUnavailable
			}
			if got := middleware.CodeOf(err); got != want {
				t.Errorf("another caller's approval request: %s (%+v), want %s", got, env.Error, want)
			}
		})
	}
}
