package budgetstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/internal/redisnode"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// Redis keeps budgets in Redis, so that a budget holds across every
// server instance sharing the deployment: a single node, a
// Sentinel-managed primary (redis.NewFailoverClient) or a Cluster.
//
// A budget key is one sorted set at {prefix:bgt_…} (the whole key its own
// hash tag): each reservation a member "<execution id>|<amount>" ("!"
// appended for an overdraft) scored by its time in unix microseconds
// (Redis TIME), and a member "#" scored by minus their sum. Each method is
// one script over that one key, on one node of a Cluster, in one round
// trip: Reserve trims what aged out of the window, reads the sum and its
// own member, checks and adds in one step: TIME, ZMSCORE, ZRANGEBYSCORE,
// ZADD and PTTL on the path of a reservation that fits, and a PEXPIRE
// about once a window.
type Redis struct {
	rdb redis.UniversalClient
	cfg config
}

var _ store.BudgetStore = (*Redis)(nil)

// The store's scripts: the prelude (shared helpers) and one per method;
// Reserve's, the one every call runs, does without the prelude.
var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/reserve.lua
	reserveLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/read.lua
	readLua string

	reserveScript = redis.NewScript(reserveLua) // on every call: without the prelude
	releaseScript = redis.NewScript(preludeLua + releaseLua)
	readScript    = redis.NewScript(preludeLua + readLua)

	scripts = []*redis.Script{reserveScript, releaseScript, readScript}
)

// loadTimeout bounds NewRedis's SCRIPT LOAD.
const loadTimeout = 5 * time.Second

// maxExact is the largest amount or limit the Redis store accepts: Lua
// computes with doubles, exact up to 2^53.
const maxExact = 1<<53 - 1

// NewRedis returns a store on client: a *redis.Client (one node, or a
// Sentinel-managed primary from redis.NewFailoverClient), a
// *redis.ClusterClient or a *redis.Ring. It loads the store's scripts
// (SCRIPT LOAD, on every master of a Cluster) and fails if Redis cannot be
// reached; afterwards a script missing from Redis's cache (a restart,
// SCRIPT FLUSH, a failover) is sent again by itself (go-redis's Script.Run
// answers NOSCRIPT with EVAL). The store never closes client.
func NewRedis(client redis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	if client == nil {
		return nil, errors.New("budgetstore: NewRedis needs a Redis client")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyRedis(&cfg)
		}
	}
	if cfg.prefix == "" || strings.ContainsAny(cfg.prefix, "{}") {
		return nil, fmt.Errorf("budgetstore: key prefix %q must be non-empty and free of braces (they would change the keys' hash tags)", cfg.prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	if err := redisnode.LoadScripts(ctx, client, scripts); err != nil {
		return nil, fmt.Errorf("budgetstore: load the Redis scripts: %w", err)
	}
	return &Redis{rdb: client, cfg: cfg}, nil
}

// keys are the Redis keys of a budget key: its sorted set, all of it the
// hash tag.
func (s *Redis) keys(key string) []string {
	return []string{"{" + s.cfg.prefix + ":" + key + "}"}
}

// run runs a script on one budget key, with the clock offset first in
// ARGV.
func (s *Redis) run(ctx context.Context, sc *redis.Script, key string, args ...any) *redis.Cmd {
	return sc.Run(ctx, s.rdb, s.keys(key), append([]any{s.offset()}, args...)...)
}

// offset is ARGV[1] of every script: microseconds added to Redis TIME,
// zero outside tests (which may pin the clock instead: "=" and unix
// microseconds).
func (s *Redis) offset() string {
	switch {
	case s.cfg.pinned != nil:
		return "=" + strconv.FormatInt(s.cfg.pinned().UnixMicro(), 10)
	case s.cfg.clockOffset != nil:
		return strconv.FormatInt(s.cfg.clockOffset().Microseconds(), 10)
	}
	return "0"
}

// Reserve implements [store.BudgetStore]: one script, one round trip.
func (s *Redis) Reserve(ctx context.Context, req store.BudgetRequest) (store.BudgetReservation, error) {
	if err := store.CheckBudgetRequest(req); err != nil {
		return store.BudgetReservation{}, err
	}
	if req.Amount > maxExact || req.Limit > maxExact {
		return store.BudgetReservation{}, fmt.Errorf("budgetstore: amount %d or limit %d is past 2^53, where the Redis store's arithmetic stops being exact", req.Amount, req.Limit)
	}
	r, err := s.run(ctx, reserveScript, req.Key, req.ExecutionID, req.Amount, req.Limit, micros(req.Window), flag(req.Overdraft)).Int64Slice()
	if err != nil {
		return store.BudgetReservation{}, err
	}
	if len(r) != 4 {
		return store.BudgetReservation{}, fmt.Errorf("budgetstore: unexpected script reply %v", r)
	}
	return store.BudgetReservation{Reserved: r[0] == 1, Overdraft: r[1] == 1, Spent: r[2], RetryAfter: time.Duration(r[3]) * time.Microsecond}, nil
}

// Release implements [store.BudgetStore]: it finds the reservation by its
// execution and amount.
func (s *Redis) Release(ctx context.Context, req store.BudgetRequest) error {
	if !store.ValidBudgetKey(req.Key) || req.Amount < 0 || req.Amount > maxExact {
		return nil // no such key or amount can hold a reservation
	}
	r, err := s.run(ctx, releaseScript, req.Key, req.ExecutionID, req.Amount).Text()
	if err != nil {
		return err
	}
	if r != "ok" {
		return fmt.Errorf("budgetstore: unexpected script reply %q", r)
	}
	return nil
}

// Read implements [store.BudgetStore].
func (s *Redis) Read(ctx context.Context, key string, window time.Duration) (store.BudgetUsage, error) {
	if !store.ValidBudgetKey(key) || window <= 0 {
		return store.BudgetUsage{}, fmt.Errorf("budgetstore: read of key %q over window %s: want a budget key and a positive window", key, window)
	}
	r, err := s.run(ctx, readScript, key, micros(window)).Slice()
	if err != nil {
		return store.BudgetUsage{}, err
	}
	var n [4]int64
	for i := range n {
		v, ok := number(at(r, i))
		if !ok || len(r) != 4 {
			return store.BudgetUsage{}, unexpected(r)
		}
		n[i] = v
	}
	return store.BudgetUsage{Spent: n[0], Reservations: int(n[1]), Overdrafts: int(n[2]), Overdrawn: n[3]}, nil
}

func at(r []any, i int) any {
	if i < len(r) {
		return r[i]
	}
	return nil
}

// number reads an integer a script replied with: Lua integers arrive as
// int64, what the scripts print as strings.
func number(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func unexpected(r []any) error { return fmt.Errorf("budgetstore: unexpected script reply %v", r) }

// micros is d in microseconds, rounded up: a window never shrinks to none.
func micros(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Microsecond-1)/time.Microsecond), 10)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
