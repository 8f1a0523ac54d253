package resultstore

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

// Redis keeps results in Redis, so that a key is claimed, run and replayed
// once across every server instance sharing the deployment: a single node,
// a Sentinel-managed primary (redis.NewFailoverClient) or a Cluster.
//
// A key's record is one hash at {prefix:own_…}:idk_…, in its owner's hash
// tag (the owner is the audience and whole actor the engine derived the
// key for), beside the owner's index: {prefix:own_…}:records, a sorted set
// of the owner's record ids scored by when each is gone, and
// {prefix:own_…}:bytes, the sizes of its stored results and their sum.
// So each method is one script over one owner's keys, on one node of a
// Cluster, in one round trip, and the quota is checked and counted in the
// same atomic step as the claim: no compensating second step. One
// caller's records all live on one node of a Cluster. The record's
// fields:
//
//	state                          in_flight, done or in_doubt (as stored; a
//	                               write-like claim past its lease reads in_doubt)
//	digest, exec, reconcile_of     the input digest, the holder, the execution
//	                               whose doubt the holder reconciles
//	write_like                     "1" or "0"
//	claimed_at, lease_until,       unix microseconds (Redis TIME)
//	done_at, expires_at
//	retention                      microseconds
//	result_exec, result_code,      the stored result, once done: envelope and
//	envelope, sealed, key_id, late sealed are the engine's opaque bytes
type Redis struct {
	rdb redis.UniversalClient
	cfg config
}

var _ store.ResultStore = (*Redis)(nil)

// The store's scripts: the prelude (shared helpers) and one per method.
// Each touches exactly one key, named in KEYS, and applies all its checks
// before its single write; each is safe to repeat after a lost reply.
var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/complete.lua
	completeLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/doubt.lua
	doubtLua string
	//go:embed lua/get.lua
	getLua string

	claimScript    = redis.NewScript(preludeLua + claimLua)
	completeScript = redis.NewScript(preludeLua + completeLua)
	releaseScript  = redis.NewScript(preludeLua + releaseLua)
	doubtScript    = redis.NewScript(preludeLua + doubtLua)
	getScript      = redis.NewScript(preludeLua + getLua)

	scripts = []*redis.Script{claimScript, completeScript, releaseScript, doubtScript, getScript}
)

// loadTimeout bounds NewRedis's SCRIPT LOAD.
const loadTimeout = 5 * time.Second

// NewRedis returns a store on client: a *redis.Client (one node, or a
// Sentinel-managed primary from redis.NewFailoverClient), a
// *redis.ClusterClient or a *redis.Ring. It loads the store's scripts
// (SCRIPT LOAD, on every master of a Cluster) and fails if Redis cannot be
// reached; afterwards a script missing from Redis's cache (a restart,
// SCRIPT FLUSH, a failover) is sent again by itself (go-redis's Script.Run
// answers NOSCRIPT with EVAL). The store never closes client.
func NewRedis(client redis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	if client == nil {
		return nil, errors.New("resultstore: NewRedis needs a Redis client")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyRedis(&cfg)
		}
	}
	if cfg.prefix == "" || strings.ContainsAny(cfg.prefix, "{}") {
		return nil, fmt.Errorf("resultstore: key prefix %q must be non-empty and free of braces (they would change the keys' hash tags)", cfg.prefix)
	}
	s := &Redis{rdb: client, cfg: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	err := redisnode.LoadScripts(ctx, client, scripts)
	if err != nil {
		return nil, fmt.Errorf("resultstore: load the Redis scripts: %w", err)
	}
	return s, nil
}

// keys are the Redis keys of a result key's record and of its owner's
// index: the owner is their hash tag.
func (s *Redis) keys(k store.ResultKey) []string {
	tag := "{" + s.cfg.prefix + ":" + k.Owner + "}"
	return []string{tag + ":" + k.Key, tag + ":records", tag + ":bytes"}
}

// run runs a script on one result key, with the clock offset and the
// key's id first in ARGV. A malformed key is refused before Redis: it
// could hold braces.
func (s *Redis) run(ctx context.Context, sc *redis.Script, k store.ResultKey, args ...any) ([]any, error) {
	if !k.Valid() {
		return nil, malformed(k)
	}
	return sc.Run(ctx, s.rdb, s.keys(k), append([]any{s.offset(), k.Key}, args...)...).Slice()
}

// offset is ARGV[1] of every script: microseconds added to Redis TIME,
// zero outside tests.
func (s *Redis) offset() string {
	if s.cfg.clockOffset == nil {
		return "0"
	}
	return micros(s.cfg.clockOffset())
}

// Claim implements [store.ResultStore]: one script, one round trip.
func (s *Redis) Claim(ctx context.Context, req store.ClaimRequest) (store.Claim, error) {
	r, err := s.run(ctx, claimScript, req.ResultKey, req.Digest, req.ExecutionID, micros(req.Lease), flag(req.WriteLike), micros(req.Retention), flag(req.Reconcile),
		req.Quota.Records, req.Quota.Bytes)
	if err != nil {
		return store.Claim{}, err
	}
	word, _ := at(r, 0).(string)
	switch word {
	case "acquired":
		return store.Claim{Status: store.ClaimAcquired}, nil
	case "key_reused":
		return store.Claim{Status: store.ClaimKeyReused}, nil
	case "quota_exceeded":
		return store.Claim{Status: store.ClaimQuotaExceeded}, nil
	case "in_flight", "in_doubt", "reconcile":
		status := map[string]store.ClaimStatus{"in_flight": store.ClaimInFlight, "in_doubt": store.ClaimInDoubt, "reconcile": store.ClaimReconcile}[word]
		exec, ok := at(r, 1).(string)
		if !ok {
			break
		}
		return store.Claim{Status: status, ExecutionID: exec}, nil
	case "done":
		if len(r) != 8 {
			break
		}
		str := func(i int) string { v, _ := r[i].(string); return v }
		res := store.Result{ExecutionID: str(2), Code: str(3), Envelope: bytesOf(str(4)), Sealed: bytesOf(str(5)), KeyID: str(6), Late: str(7) == "1"}
		return store.Claim{Status: store.ClaimDone, ExecutionID: str(1), Result: res}, nil
	}
	return store.Claim{}, unexpected(r)
}

// Complete implements [store.ResultStore].
func (s *Redis) Complete(ctx context.Context, key store.ResultKey, executionID string, res store.Result) error {
	r, err := s.run(ctx, completeScript, key, executionID, res.ExecutionID, res.Code, res.Envelope, res.Sealed, res.KeyID, flag(res.Late), res.Size())
	return written(r, err)
}

// Release implements [store.ResultStore].
func (s *Redis) Release(ctx context.Context, key store.ResultKey, executionID string) error {
	r, err := s.run(ctx, releaseScript, key, executionID)
	return written(r, err)
}

// MarkInDoubt implements [store.ResultStore].
func (s *Redis) MarkInDoubt(ctx context.Context, key store.ResultKey, executionID string) error {
	r, err := s.run(ctx, doubtScript, key, executionID)
	return written(r, err)
}

// written is the error of a write script's reply.
func written(r []any, err error) error {
	if err != nil {
		return err
	}
	switch at(r, 0) {
	case "ok":
		return nil
	case "not_held":
		return store.ErrNotHeld
	}
	return unexpected(r)
}

// recordFields are the fields get.lua returns, in its order.
var recordFields = []string{"state", "digest", "exec", "reconcile_of", "write_like", "claimed_at", "lease_until",
	"retention", "done_at", "expires_at", "result_exec", "result_code", "envelope", "sealed", "key_id", "late"}

// Get implements [store.ResultStore].
func (s *Redis) Get(ctx context.Context, key store.ResultKey) (store.ResultRecord, error) {
	if !key.Valid() {
		return store.ResultRecord{}, store.ErrResultNotFound
	}
	r, err := s.run(ctx, getScript, key)
	if err != nil {
		return store.ResultRecord{}, err
	}
	st, _ := at(r, 0).(string)
	if st == "" {
		return store.ResultRecord{}, store.ErrResultNotFound
	}
	raw, ok := at(r, 1).([]any)
	state, known := store.ParseResultState(st)
	if !ok || len(raw) != len(recordFields) || !known {
		return store.ResultRecord{}, unexpected(r)
	}
	f := make(map[string]string, len(raw))
	for i, v := range raw {
		f[recordFields[i]], _ = v.(string)
	}
	rec := store.ResultRecord{
		ResultKey: key, Digest: f["digest"], State: state, ExecutionID: f["exec"], ReconcileOf: f["reconcile_of"], WriteLike: f["write_like"] == "1",
		ClaimedAt: unixMicro(f["claimed_at"]), LeaseUntil: unixMicro(f["lease_until"]), Retention: microsOf(f["retention"]),
		DoneAt: unixMicro(f["done_at"]), ExpiresAt: unixMicro(f["expires_at"]),
	}
	if f["state"] == "in_flight" && state == store.ResultInDoubt {
		rec.DoneAt = rec.LeaseUntil // in doubt by its lease
	}
	if state == store.ResultDone {
		rec.Result = store.Result{ExecutionID: f["result_exec"], Code: f["result_code"], Envelope: bytesOf(f["envelope"]),
			Sealed: bytesOf(f["sealed"]), KeyID: f["key_id"], Late: f["late"] == "1"}
	}
	return rec, nil
}

func at(r []any, i int) any {
	if i < len(r) {
		return r[i]
	}
	return nil
}

func unexpected(r []any) error { return fmt.Errorf("resultstore: unexpected script reply %v", r) }

// bytesOf returns s as bytes, nil for "": the scripts store "" for none.
func bytesOf(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

func microsOf(s string) time.Duration {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Duration(n) * time.Microsecond
}

func unixMicro(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	n, _ := strconv.ParseInt(s, 10, 64) // the scripts print integers
	return time.UnixMicro(n)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
