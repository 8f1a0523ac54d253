package resultstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/redistest"
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

// TestRedisKeysAreTheirOwnHashTag: every record is one key whose braces
// span all of it, so a Cluster keeps each script on one node.
func TestRedisKeysAreTheirOwnHashTag(t *testing.T) {
	s := openRedis(t, redistest.Start(t).Client(), resultstore.WithKeyPrefix("agentsafe:idk"))
	const key = "idk_0123456789abcdef0123456789abcdef"
	if got := resultstore.RecordKey(s, key); got != "{agentsafe:idk:"+key+"}" {
		t.Errorf("the record key is %q", got)
	}
}
