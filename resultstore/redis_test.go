package resultstore_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
)

// offsetClock is a clock offset a test moves forward; the Redis store adds
// it to Redis TIME.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) Offset() time.Duration   { return time.Duration(c.d.Load()) }
func (c *offsetClock) Advance(d time.Duration) { c.d.Add(int64(d)) }

// prefixes gives each store of a test binary its own key prefix, so stores
// on one server start empty.
var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("test%d:idk", prefixes.Add(1)) }

func openRedis(t testing.TB, rdb redis.UniversalClient, opts ...resultstore.RedisOption) *resultstore.Redis {
	t.Helper()
	s, err := resultstore.NewRedis(rdb, append([]resultstore.RedisOption{resultstore.WithKeyPrefix(newPrefix())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func redisConformance(t *testing.T, rdb redis.UniversalClient) {
	conformance.RunResultStore(t, func(t *testing.T) conformance.ResultStoreUnderTest {
		c := &offsetClock{}
		return conformance.ResultStoreUnderTest{Store: openRedis(t, rdb, resultstore.WithClockOffset(c.Offset)), Advance: c.Advance}
	})
}

func TestRedisConformance(t *testing.T) {
	redisConformance(t, redistest.Start(t).Client())
}

func TestNewRedisRefusesWhatCannotWork(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	for name, tc := range map[string]struct {
		client redis.UniversalClient
		opts   []resultstore.RedisOption
	}{
		"no client":            {nil, nil},
		"an empty prefix":      {rdb, []resultstore.RedisOption{resultstore.WithKeyPrefix("")}},
		"braces in the prefix": {rdb, []resultstore.RedisOption{resultstore.WithKeyPrefix("a{b}")}},
		"Redis unreachable":    {down, nil},
	} {
		if _, err := resultstore.NewRedis(tc.client, tc.opts...); err == nil {
			t.Errorf("NewRedis with %s must fail", name)
		}
	}
}

// TestRedisKeysOfAnOwnerShareAHashTag: a record and its owner's index
// share one hash tag, the owner, so that a Cluster keeps each script on
// one node and the quota is counted in the claim's own step.
func TestRedisKeysOfAnOwnerShareAHashTag(t *testing.T) {
	s := openRedis(t, redistest.Start(t).Client(), resultstore.WithKeyPrefix("agentsafe:idk"))
	k := store.ResultKey{Owner: "own_00112233445566778899aabbccddeeff", Key: "idk_0123456789abcdef0123456789abcdef"}
	const tag = "{agentsafe:idk:own_00112233445566778899aabbccddeeff}"
	if got, want := resultstore.Keys(s, k), []string{tag + ":" + k.Key, tag + ":records", tag + ":bytes"}; !slices.Equal(got, want) {
		t.Errorf("the keys are %q, want %q", got, want)
	}
	if _, err := s.Claim(t.Context(), store.ClaimRequest{ResultKey: store.ResultKey{Owner: "own_{x}", Key: k.Key}, Digest: "sha256:00", ExecutionID: "exe_a", Lease: time.Minute}); err == nil {
		t.Error("an owner that is not the engine's form could hold braces: the claim must be refused")
	}
}

// TestRedisOwnerIndexNeverOutlivesItsRecords: under noeviction nothing
// may stay for good: an owner's index carries a TTL at least as long as
// its longest record's, and goes with its last record.
func TestRedisOwnerIndexNeverOutlivesItsRecords(t *testing.T) {
	ctx := t.Context()
	rdb := redistest.Start(t).Client()
	s := openRedis(t, rdb)
	owner := "own_00112233445566778899aabbccddeeff"
	claim := func(key string, writeLike bool) store.ResultKey {
		t.Helper()
		k := store.ResultKey{Owner: owner, Key: key}
		got, err := s.Claim(ctx, store.ClaimRequest{ResultKey: k, Digest: "sha256:00", ExecutionID: "exe_" + key, Lease: time.Minute,
			WriteLike: writeLike, Retention: time.Hour, Quota: store.ResultQuota{Records: 10, Bytes: 1 << 20}})
		if err != nil || got.Status != store.ClaimAcquired {
			t.Fatalf("Claim: %v, %v", got.Status, err)
		}
		return k
	}
	done := claim("idk_00000000000000000000000000000001", true)
	if err := s.Complete(ctx, done, "exe_"+done.Key, store.Result{ExecutionID: "exe_" + done.Key, Code: "OK", Envelope: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	keys := resultstore.Keys(s, done)
	record := rdb.PTTL(ctx, keys[0]).Val()
	for _, k := range keys[1:] {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < record {
			t.Errorf("%s has TTL %v, shorter than its record's %v (or none)", k, ttl, record)
		}
	}
	other := store.ResultKey{Owner: "own_ffeeddccbbaa99887766554433221100", Key: done.Key}
	k := store.ResultKey{Owner: other.Owner, Key: "idk_00000000000000000000000000000002"}
	if got, err := s.Claim(ctx, store.ClaimRequest{ResultKey: k, Digest: "sha256:00", ExecutionID: "exe_b", Lease: time.Minute, Retention: time.Hour}); err != nil || got.Status != store.ClaimAcquired {
		t.Fatalf("Claim: %v, %v", got.Status, err)
	}
	if err := s.Release(ctx, k, "exe_b"); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, resultstore.Keys(s, k)...).Val(); n != 0 {
		t.Errorf("an owner's last record released: %d of its keys remain", n)
	}
}
