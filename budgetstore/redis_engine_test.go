package budgetstore_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/internal/budgetrace"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// The exactness race: 8 engines × 64 callers, amounts of 1 to 5 against a
// limit of 100.
const (
	raceEngines = 8
	raceCallers = 64
	raceLimit   = 100
)

// race runs the exactness race with one store per engine on its own
// client from client, all under one prefix.
func race(t *testing.T, client func() redis.UniversalClient, calls int) (budgetrace.Race, budgetrace.Result) {
	t.Helper()
	prefix := newPrefix()
	r := budgetrace.Race{Callers: raceCallers, Calls: calls, Limit: raceLimit}
	for range raceEngines {
		r.Stores = append(r.Stores, openRedis(t, client(), budgetstore.WithKeyPrefix(prefix)))
	}
	return r, budgetrace.Run(t, r)
}

// TestRedisBudgetIsExactAcrossEngines: 8 engines × 64 callers on one
// Redis reserve random amounts against a limit of 100: what ran never
// passes it, it ends filled to within the largest amount, and Redis holds
// exactly the reservations of what ran; and on a 3-master Cluster.
func TestRedisBudgetIsExactAcrossEngines(t *testing.T) {
	srv := redistest.Start(t)
	r, res := race(t, func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: raceCallers})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, 2)
	budgetrace.Check(t, r, res, false)
}

func TestRedisClusterBudgetIsExactAcrossEngines(t *testing.T) {
	cl := redistest.StartCluster(t)
	r, res := race(t, func() redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: raceCallers})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, 2)
	budgetrace.Check(t, r, res, false)
}

// TestRedisBudgetIsExactWhenRepliesAreLost: the same race with go-redis
// retries off, through a proxy that loses every 20th reply (the command
// ran; the client cannot tell): the engine asks again for the same
// execution, so no reservation is taken twice, and an execution that
// gives up releases what a lost reply may have reserved.
func TestRedisBudgetIsExactWhenRepliesAreLost(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartFaultProxy(t, srv.Addr(), 0)
	prefix := newPrefix()
	r := budgetrace.Race{Callers: raceCallers, Calls: 2, Limit: raceLimit}
	for range raceEngines {
		c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, PoolSize: raceCallers})
		t.Cleanup(func() { _ = c.Close() })
		r.Stores = append(r.Stores, openRedis(t, c, budgetstore.WithKeyPrefix(prefix)))
	}
	proxy.Lose(20) // once the stores have loaded their scripts
	res := budgetrace.Run(t, r)
	t.Logf("%d replies lost; outcomes %v", proxy.Dropped(), res.Codes)
	if proxy.Dropped() == 0 {
		t.Fatal("the proxy lost no reply: the test proved nothing")
	}
	budgetrace.Check(t, r, res, false)
}

// TestRedisBudgetWindowRollsByRedisTime: two engines whose own clocks are
// an hour ahead and an hour behind share a budget on Redis; the window is
// judged by Redis TIME alone (moved forward by the scripts' offset).
func TestRedisBudgetWindowRollsByRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	offset := &offsetClock{}
	prefix := newPrefix()
	var stores [2]store.BudgetStore
	for i := range stores {
		stores[i] = openRedis(t, srv.Client(), budgetstore.WithKeyPrefix(prefix), budgetstore.WithClockOffset(offset.Offset))
	}
	budgetrace.StoreClock(t, stores, offset.Advance)
}

// offsetClock is a clock offset a test moves forward; the Redis store adds
// it to Redis TIME.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) Offset() time.Duration   { return time.Duration(c.d.Load()) }
func (c *offsetClock) Advance(d time.Duration) { c.d.Add(int64(d)) }
