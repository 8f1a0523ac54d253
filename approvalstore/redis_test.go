package approvalstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// offsetClock is a clock offset a test moves forward; the Redis store adds
// it to Redis TIME.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) Offset() time.Duration   { return time.Duration(c.d.Load()) }
func (c *offsetClock) Advance(d time.Duration) { c.d.Add(int64(d)) }

// prefixes gives each store of a test binary its own key prefix, so stores
// on one server start empty.
var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("test%d:apr", prefixes.Add(1)) }

func openRedis(t testing.TB, rdb redis.UniversalClient, opts ...approvalstore.RedisOption) *approvalstore.Redis {
	t.Helper()
	s, err := approvalstore.NewRedis(rdb, append([]approvalstore.RedisOption{approvalstore.WithKeyPrefix(newPrefix())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRedisConformance(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	conformance.RunStore(t, func(t *testing.T) conformance.StoreUnderTest {
		c := &offsetClock{}
		return conformance.StoreUnderTest{Store: openRedis(t, rdb, approvalstore.WithClockOffset(c.Offset)), Advance: c.Advance, MaxPending: 20}
	})
}

// TestRedisCluster runs the Redis tests that matter on a 3-master
// Cluster, on one cluster: starting one takes a few seconds.
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	t.Run("conformance", func(t *testing.T) {
		rdb := cl.Client()
		conformance.RunStore(t, func(t *testing.T) conformance.StoreUnderTest {
			c := &offsetClock{}
			return conformance.StoreUnderTest{Store: openRedis(t, rdb, approvalstore.WithClockOffset(c.Offset)), Advance: c.Advance, MaxPending: 20}
		})
	})
	t.Run("engine single use", func(t *testing.T) {
		raceEngines(t, 2, 200, func() redis.UniversalClient { return cl.Client() })
	})
}

// request is a store-level approval request of the agent.
func request(digest string) store.ApprovalRequest {
	return store.ApprovalRequest{
		ID: store.NewApprovalID(), Audience: "orders", Procedure: refund, Type: "manager", Requester: agent,
		RequestedBy: "exe_requester", Digest: digest, View: "refund 120.00 EUR", Reasons: []string{"always"},
		SideEffect: "external", Risk: "high", ExpiresIn: 15 * time.Minute,
	}
}

// decision is a vote in the agent's audience.
func decision(approve bool, approver middleware.Actor) store.Decision {
	return store.Decision{Approve: approve, Approver: approver, Audience: "orders"}
}

// completed is the outcome of an execution that succeeded.
var completed = store.Outcome{Status: store.ApprovalCompleted, Code: "OK"}

func consumeReq(execution, digest string) store.ConsumeRequest {
	return store.ConsumeRequest{Audience: "orders", Procedure: refund, Type: "manager", Actor: agent, Digest: digest, ExecutionID: execution, Lease: time.Minute}
}

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// approve creates and approves a record of digest in s.
func approve(t testing.TB, ctx context.Context, s store.ApprovalStore, digest string) store.ApprovalRecord {
	t.Helper()
	rec, err := s.Create(ctx, request(digest))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, _, err := s.Decide(ctx, rec.ID, decision(true, manager)); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return rec
}

// sentinels are the store SPI's decision errors; every other error is a
// store failure.
var sentinels = []error{store.ErrApprovalNotFound, store.ErrApprovalPending, store.ErrApprovalRejected, store.ErrApprovalExpired,
	store.ErrApprovalConsumed, store.ErrApprovalInputMismatch, store.ErrApprovalResumeMismatch, store.ErrNotPending,
	store.ErrSelfApproval, store.ErrApproverNotAllowed, store.ErrTooManyPending}

// wantUnavailable fails unless err is a store failure: not one of the
// sentinels, so that the engine fails closed with APPROVAL_UNAVAILABLE.
func wantUnavailable(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil || slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) }) {
		t.Errorf("%s: got %v, want a store error that is no sentinel (APPROVAL_UNAVAILABLE)", what, err)
	}
}

func TestNewRedisRefusesWhatCannotWork(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	slow := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = slow.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	for name, tc := range map[string]struct {
		client redis.UniversalClient
		opts   []approvalstore.RedisOption
	}{
		"no client":                      {nil, nil},
		"an empty prefix":                {rdb, []approvalstore.RedisOption{approvalstore.WithKeyPrefix("")}},
		"braces in the prefix":           {rdb, []approvalstore.RedisOption{approvalstore.WithKeyPrefix("a{b}")}},
		"WAIT on a Ring":                 {ring, []approvalstore.RedisOption{approvalstore.WithWait(1, 10*time.Millisecond)}},
		"WAIT without a replica":         {rdb, []approvalstore.RedisOption{approvalstore.WithWait(1, 10*time.Millisecond)}},
		"WAIT longer than a read may be": {slow, []approvalstore.RedisOption{approvalstore.WithWait(1, time.Second)}},
		"Redis unreachable":              {down, nil},
	} {
		if _, err := approvalstore.NewRedis(tc.client, tc.opts...); err == nil {
			t.Errorf("NewRedis with %s must fail", name)
		}
	}
	if _, err := approvalstore.NewRedis(ring); err != nil {
		t.Errorf("a Ring without WAIT: %v", err)
	}
}

// TestNewRedisWaitNeedsTheReplicas: with fewer replicas than WithWait
// asks for, every consumption would fall short; NewRedis says so, naming
// the master, instead of a store that refuses every approval.
func TestNewRedisWaitNeedsTheReplicas(t *testing.T) {
	srv := redistest.Start(t)
	if srv.Kind() != redistest.RedisServer {
		t.Skip("miniredis reports no replication")
	}
	_, err := approvalstore.NewRedis(srv.Client(), approvalstore.WithWait(1, 10*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), srv.Addr()) || !strings.Contains(err.Error(), "0 connected replicas") {
		t.Errorf("NewRedis with WithWait(1) on a master without replicas must fail naming it (%s): %v", srv.Addr(), err)
	}
	off := openRedis(t, srv.Client(), approvalstore.WithWait(0, 10*time.Millisecond))
	rec := approve(t, t.Context(), off, digestA)
	if _, err := off.Consume(t.Context(), rec.ID, consumeReq("exe_a", digestA)); err != nil {
		t.Errorf("WithWait(0, …) waits for nobody: %v", err)
	}
}

// TestRedisRecordIsOneHash checks the layout single use rests on: status
// and consumer in one hash under one hash tag, TTLs after the last moment
// the record matters, and a record that vanishes (eviction) failing closed.
func TestRedisRecordIsOneHash(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := openRedis(t, rdb, approvalstore.WithRetention(time.Hour))
	rec := approve(t, ctx, s, digestA)
	key := approvalstore.RecordKey(s, rec.ID)
	if !strings.HasPrefix(key, "{") || !strings.HasSuffix(key, "}") || !strings.Contains(key, rec.ID) {
		t.Errorf("the record key %q must be a hash tag holding the id", key)
	}
	ttl := rdb.PTTL(ctx, key).Val()
	if want := 15*time.Minute + time.Hour; ttl > want || ttl < want-time.Minute {
		t.Errorf("a new record's TTL is %v, want about expiry + retention = %v", ttl, want)
	}
	req := consumeReq("exe_a", digestA)
	req.Lease = 2 * time.Hour
	if _, err := s.Consume(ctx, rec.ID, req); err != nil {
		t.Fatal(err)
	}
	h := rdb.HGetAll(ctx, key).Val()
	if h["status"] != "consumed" || h["consumed_by"] != "exe_a" || h["approver_id"] != manager.ID || h["digest"] != digestA {
		t.Errorf("status, consumer, approver and digest must live in the record's one hash: %v", h)
	}
	ttl = rdb.PTTL(ctx, key).Val()
	if want := 2*time.Hour + time.Hour; ttl > want || ttl < want-time.Minute {
		t.Errorf("a consumed record's TTL is %v, want about lease + retention = %v", ttl, want)
	}

	other := approve(t, ctx, s, "sha256:"+strings.Repeat("b", 64))
	rdb.Del(ctx, approvalstore.RecordKey(s, other.ID)) // as eviction would
	if _, err := s.Consume(ctx, other.ID, consumeReq("exe_b", "sha256:"+strings.Repeat("b", 64))); !errors.Is(err, store.ErrApprovalNotFound) {
		t.Errorf("a record that vanished must fail closed with APPROVAL_NOT_FOUND, got %v", err)
	}

	if err := s.RecordOutcome(ctx, rec.ID, "exe_a", completed); err != nil {
		t.Fatal(err)
	}
	for f := range rdb.HGetAll(ctx, key).Val() {
		if !slices.Contains(approvalstore.RecordFields, f) {
			t.Errorf("field %s is written but never read back", f)
		}
	}

	rdb.HSet(ctx, key, "status", "bogus")
	_, err := s.Get(ctx, rec.ID)
	wantUnavailable(t, "a record that cannot be read", err)
}

// TestRedisPendingIndexIsNotTrusted: the index only serves deduplication
// and the cap; Create checks every entry it acts on against the records.
func TestRedisPendingIndexIsNotTrusted(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := openRedis(t, rdb, approvalstore.WithMaxPendingPerActor(2))
	index := approvalstore.PendingKey(s, "orders", agent)

	first, err := s.Create(ctx, request(digestA))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Decide(ctx, first.ID, decision(true, manager)); err != nil {
		t.Fatal(err)
	}
	again, err := s.Create(ctx, request(digestA))
	if err != nil || again.ID == first.ID || again.Status != store.ApprovalPending {
		t.Errorf("once the record is decided, the same call must get a new pending record: %+v, %v", again, err)
	}

	// An index full of decided records does not hold the requester back.
	for i := range 4 {
		rec := approve(t, ctx, s, fmt.Sprintf("sha256:%064d", i))
		if _, err := s.Get(ctx, rec.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.HLen(ctx, index).Val(); n > 2 {
		t.Errorf("the index must drop entries proved stale: %d entries", n)
	}
	if _, err := s.Create(ctx, request("sha256:"+strings.Repeat("c", 64))); err != nil {
		t.Errorf("one truly pending record and four decided ones must leave room for a second: %v", err)
	}
	if _, err := s.Create(ctx, request("sha256:"+strings.Repeat("d", 64))); !errors.Is(err, store.ErrTooManyPending) {
		t.Errorf("two truly pending records (the cap) must refuse a third: %v", err)
	}
	list, err := s.List(ctx, store.ApprovalFilter{Audience: "orders", Tenant: agent.Tenant, Status: store.ApprovalPending})
	if err != nil || len(list) != 2 {
		t.Errorf("a refused Create must leave no record behind: %d pending, %v", len(list), err)
	}

	// A lost index (deleted, or evicted under another policy than
	// noeviction) forgets pending records for deduplication and the cap
	// until they expire: a duplicate at worst, never a wrong decision.
	rdb.Del(ctx, index)
	dup, err := s.Create(ctx, request(digestA))
	if err != nil || dup.Status != store.ApprovalPending || dup.ID == again.ID {
		t.Errorf("Create without its index: %+v, %v", dup, err)
	}
	if _, err := s.Consume(ctx, again.ID, consumeReq("exe_a", digestA)); !errors.Is(err, store.ErrApprovalPending) {
		t.Errorf("the record the index forgot keeps its own state: %v", err)
	}
}

// TestRedisNoScript: Redis forgets its scripts (restart, failover, SCRIPT
// FLUSH); every operation sends them again.
func TestRedisNoScript(t *testing.T) {
	ctx := t.Context()
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := openRedis(t, rdb)
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	rec, err := s.Create(ctx, request(digestA))
	if err != nil {
		t.Fatalf("Create after SCRIPT FLUSH: %v", err)
	}
	flush()
	if _, _, err := s.Decide(ctx, rec.ID, decision(true, manager)); err != nil {
		t.Fatalf("Decide after SCRIPT FLUSH: %v", err)
	}
	flush()
	if _, err := s.Consume(ctx, rec.ID, consumeReq("exe_a", digestA)); err != nil {
		t.Fatalf("Consume after SCRIPT FLUSH: %v", err)
	}
	flush()
	if err := s.Release(ctx, rec.ID, "exe_a"); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
	if _, err := s.Consume(ctx, rec.ID, consumeReq("exe_a", digestA)); err != nil {
		t.Fatalf("Consume after Release: %v", err)
	}
	flush()
	if err := s.RecordOutcome(ctx, rec.ID, "exe_a", completed); err != nil {
		t.Fatalf("RecordOutcome after SCRIPT FLUSH: %v", err)
	}
	flush()
	if got, err := s.Get(ctx, rec.ID); err != nil || got.Status != store.ApprovalCompleted {
		t.Fatalf("Get after SCRIPT FLUSH: %+v, %v", got, err)
	}
	// The pipelined consume of WithWait handles NOSCRIPT itself: see
	// TestRedisWaitWithReplica.
}
