package budgetstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/redistest"
)

// prefixes gives each store of a test binary its own key prefix, so stores
// on one server start empty.
var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("test%d:bgt", prefixes.Add(1)) }

func openRedis(t testing.TB, rdb redis.UniversalClient, opts ...budgetstore.RedisOption) *budgetstore.Redis {
	t.Helper()
	s, err := budgetstore.NewRedis(rdb, append([]budgetstore.RedisOption{budgetstore.WithKeyPrefix(newPrefix())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// redisConformance runs the contract on rdb with the scripts' clock
// pinned to a fake one that starts now: the window rules check edges to
// the microsecond, and real time passes between steps.
func redisConformance(t *testing.T, rdb redis.UniversalClient) {
	conformance.RunBudgetStore(t, func(t *testing.T) conformance.BudgetStoreUnderTest {
		c := &fakeClock{now: time.Now()}
		return conformance.BudgetStoreUnderTest{Store: openRedis(t, rdb, budgetstore.WithPinnedClock(c.Now)), Advance: c.Advance}
	})
}

func TestRedisConformance(t *testing.T) {
	redisConformance(t, redistest.Start(t).Client())
}

func TestRedisClusterConformance(t *testing.T) {
	redisConformance(t, redistest.StartCluster(t).Client())
}

func TestNewRedisRefusesWhatCannotWork(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	for name, tc := range map[string]struct {
		client redis.UniversalClient
		opts   []budgetstore.RedisOption
	}{
		"no client":             {nil, nil},
		"an empty prefix":       {rdb, []budgetstore.RedisOption{budgetstore.WithKeyPrefix("")}},
		"braces in the prefix":  {rdb, []budgetstore.RedisOption{budgetstore.WithKeyPrefix("a{b}")}},
		"a server that is down": {down, nil},
	} {
		if _, err := budgetstore.NewRedis(tc.client, tc.opts...); err == nil {
			t.Errorf("%s: NewRedis succeeded", name)
		}
	}
}
