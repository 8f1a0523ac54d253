package approvalstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/internal/ids"
	"github.com/agentsafe/agentsafe/middleware"
)

// Redis keeps approvals in Redis, so that an approval executes at most once
// across every server instance that shares the deployment: a single node, a
// Sentinel-managed primary (redis.NewFailoverClient) or a Cluster. See the
// package documentation for the settings single use depends on.
//
// Keys. A record is one hash at {prefix:apr_…}: the braces make the whole
// key its hash tag, so Get, Decide, Consume and RecordOutcome are each one
// script over one key, on one node of a Cluster, in one round trip. Create
// also needs the requester's pending index, {prefix:pending:<hash>}, which
// a Cluster may place on another node; it writes the record first and
// claims its place in the index second, and checks every index entry it
// acts on against the records. No decision depends on the index. (Keying
// records under the requester's hash tag instead would make Create one
// script, but every Consume would first have to look up where its record
// lives: two round trips on the hot path, for a benefit to deduplication
// only.)
type Redis struct {
	rdb     redis.UniversalClient
	cfg     config
	pattern string // SCAN MATCH pattern of record keys
}

var _ middleware.ApprovalStore = (*Redis)(nil)

// loadTimeout bounds NewRedis's SCRIPT LOAD.
const loadTimeout = 5 * time.Second

// NewRedis returns a store on client: a *redis.Client (one node, or a
// Sentinel-managed primary from redis.NewFailoverClient), a
// *redis.ClusterClient, or a *redis.Ring (without [WithWait]). It loads the
// store's scripts (SCRIPT LOAD, on every master of a Cluster) and fails if
// Redis cannot be reached; afterwards a script missing from Redis's cache
// (a restart, SCRIPT FLUSH, a failover) is sent again by itself. The store
// never closes client.
func NewRedis(client redis.UniversalClient, opts ...Option) (*Redis, error) {
	if client == nil {
		return nil, errors.New("approvalstore: NewRedis needs a Redis client")
	}
	cfg := newConfig(opts)
	if cfg.prefix == "" || strings.ContainsAny(cfg.prefix, "{}") {
		return nil, fmt.Errorf("approvalstore: key prefix %q must be non-empty and free of braces (they would change the keys' hash tags)", cfg.prefix)
	}
	if cfg.waitN > 0 {
		var rt time.Duration
		switch c := client.(type) {
		case *redis.Client:
			rt = c.Options().ReadTimeout
		case *redis.ClusterClient:
			rt = c.Options().ReadTimeout
		default:
			return nil, fmt.Errorf("approvalstore: WithWait needs a *redis.Client or *redis.ClusterClient, not %T: WAIT must follow the consuming script on its master's connection", client)
		}
		if rt > 0 && cfg.waitTimeout >= rt {
			return nil, fmt.Errorf("approvalstore: the WithWait timeout %v must be below the client's ReadTimeout %v", cfg.waitTimeout, rt)
		}
	}
	s := &Redis{rdb: client, cfg: cfg, pattern: "{" + globEscape(cfg.prefix) + ":" + approvalIDPrefix + "*}"}
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	err := s.forEachMaster(ctx, func(ctx context.Context, node redis.Cmdable) error {
		for _, sc := range scripts {
			if err := sc.Load(ctx, node).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("approvalstore: load the Redis scripts: %w", err)
	}
	return s, nil
}

const approvalIDPrefix = "apr_"

// recordKey is the key of a record: all of it is the hash tag.
func (s *Redis) recordKey(id string) string { return "{" + s.cfg.prefix + ":" + id + "}" }

// pendingKey is the key of a requester's pending index. The requester is
// hashed: actor ids are the application's and could hold braces.
func (s *Redis) pendingKey(audience string, a middleware.Actor) string {
	return "{" + s.cfg.prefix + ":pending:" + ids.Derive("", audience, a.Tenant, a.ID) + "}"
}

// Get implements [middleware.ApprovalStore]. The record's status is read
// as of Redis TIME.
func (s *Redis) Get(ctx context.Context, id string) (middleware.ApprovalRecord, error) {
	if !middleware.ValidApprovalID(id) {
		return middleware.ApprovalRecord{}, middleware.ErrApprovalNotFound
	}
	r, err := s.run(ctx, getScript, s.recordKey(id))
	if err != nil {
		return middleware.ApprovalRecord{}, err
	}
	return recordAt(r, 0)
}

// recordAt decodes the Redis time at r[i] and the record at r[i+1], with
// the record's status as of that time. A record without a status is not
// found.
func recordAt(r reply, i int) (middleware.ApprovalRecord, error) {
	now, err := r.str(i)
	if err != nil {
		return middleware.ApprovalRecord{}, err
	}
	fields, err := r.values(i + 1)
	if err != nil {
		return middleware.ApprovalRecord{}, err
	}
	if _, ok := fields["status"]; !ok {
		return middleware.ApprovalRecord{}, middleware.ErrApprovalNotFound
	}
	rec, err := decodeRecord(fields)
	if err != nil {
		return middleware.ApprovalRecord{}, err
	}
	rec.Status = status(&rec, unixMicro(now))
	return rec, nil
}

// Decide implements [middleware.ApprovalStore]. It reads the record and
// applies the approver rules and policy in Go (the requester and approval
// type never change), then one script checks the state and writes.
func (s *Redis) Decide(ctx context.Context, id string, d middleware.Decision) (middleware.ApprovalRecord, error) {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return middleware.ApprovalRecord{}, err
	}
	if err := s.cfg.checkApprover(ctx, rec, d.Approver); err != nil {
		return middleware.ApprovalRecord{}, err
	}
	a := d.Approver
	r, err := s.run(ctx, decideScript, s.recordKey(id), flag(d.Approve), a.ID, a.Tenant, a.Kind, jsonList(a.OnBehalfOf), d.Comment)
	if err != nil {
		return middleware.ApprovalRecord{}, err
	}
	switch r.status() {
	case "ok":
		return recordAt(r, 1)
	case "not_pending":
		rec, err := recordAt(r, 1)
		if err != nil {
			return middleware.ApprovalRecord{}, err
		}
		return middleware.ApprovalRecord{}, fmt.Errorf("%w: it is %s", middleware.ErrNotPending, rec.Status)
	}
	return middleware.ApprovalRecord{}, scriptError(r)
}

// Consume implements [middleware.ApprovalStore]: one script checks and
// writes, in one round trip (with [WithWait], WAIT travels in the same
// round trip).
func (s *Redis) Consume(ctx context.Context, id string, req middleware.ConsumeRequest) (middleware.ApprovalRecord, error) {
	if !middleware.ValidApprovalID(id) {
		return middleware.ApprovalRecord{}, middleware.ErrApprovalNotFound
	}
	args := []any{s.offset(), req.Audience, req.Actor.ID, req.Actor.Tenant, req.Procedure, req.Type, req.Digest, req.ExecutionID,
		micros(req.Lease), micros(s.cfg.retention), flag(s.cfg.waitN > 0)}
	key := s.recordKey(id)
	var r reply
	var err error
	if s.cfg.waitN > 0 {
		r, err = s.consumeAndWait(ctx, key, args)
		if errors.Is(err, errNotDurable) {
			// Nothing will run on this consumption: record that, so the
			// record reads failed rather than "may have run" (in_doubt).
			// The approval is spent either way; a new one is needed.
			_ = s.RecordOutcome(context.WithoutCancel(ctx), id, req.ExecutionID, middleware.CodeApprovalUnavailable)
		}
	} else {
		var v []any
		v, err = consumeScript.Run(ctx, s.rdb, []string{key}, args...).Slice()
		r = v
	}
	if err != nil {
		return middleware.ApprovalRecord{}, err
	}
	if r.status() == "ok" {
		return recordAt(r, 1)
	}
	return middleware.ApprovalRecord{}, scriptError(r)
}

// consumeAndWait sends the consume script and WAIT in one pipeline on the
// connection of the key's master, so WAIT counts the replicas that have the
// consumption. Too few is an error that is not a decision: the engine
// fails closed with APPROVAL_UNAVAILABLE and runs nothing.
func (s *Redis) consumeAndWait(ctx context.Context, key string, args []any) (reply, error) {
	var node *redis.Client
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		node = n
	case *redis.Client:
		node = c
	}
	keys := []string{key}
	var eval *redis.Cmd
	var wait *redis.Cmd
	for _, source := range []bool{false, true} {
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error { // each command's error is read below
			if source {
				eval = consumeScript.Eval(ctx, p, keys, args...)
			} else {
				eval = consumeScript.EvalSha(ctx, p, keys, args...)
			}
			wait = p.Do(ctx, "wait", s.cfg.waitN, max(s.cfg.waitTimeout.Milliseconds(), 1)) // 0 would block forever
			return nil
		})
		if !redis.HasErrorPrefix(eval.Err(), "NOSCRIPT") {
			break
		}
	}
	v, err := eval.Slice()
	if err != nil {
		// The slot moved (resharding): fail closed, and have the client
		// learn the new layout, which this pipeline bypassed.
		_, moved := redis.IsMovedError(err)
		_, ask := redis.IsAskError(err)
		if c, ok := s.rdb.(*redis.ClusterClient); ok && (moved || ask) {
			c.ReloadState(ctx)
		}
		return nil, err
	}
	r := reply(v)
	if r.status() != "ok" {
		return r, nil // refused: nothing was written, nothing to wait for
	}
	acked, err := wait.Int64()
	if err != nil {
		return nil, fmt.Errorf("approvalstore: WAIT after consuming: %w", err)
	}
	if acked < int64(s.cfg.waitN) {
		return nil, fmt.Errorf("%w: only %d of %d replicas acknowledged the consumption within %v; not running on a consumption a failover could lose",
			errNotDurable, acked, s.cfg.waitN, s.cfg.waitTimeout)
	}
	return r, nil
}

// errNotDurable: a consumption too few replicas acknowledged. Not a
// sentinel of middleware: the engine fails closed with APPROVAL_UNAVAILABLE.
var errNotDurable = errors.New("approvalstore: consumption not durable")

// RecordOutcome implements [middleware.ApprovalStore].
func (s *Redis) RecordOutcome(ctx context.Context, id, executionID string, outcome middleware.Code) error {
	if !middleware.ValidApprovalID(id) {
		return middleware.ErrApprovalNotFound
	}
	r, err := s.run(ctx, outcomeScript, s.recordKey(id), executionID, outcomeStatus(outcome).String(), outcome.String())
	if err != nil {
		return err
	}
	if r.status() == "ok" {
		return nil
	}
	return scriptError(r)
}

// List implements [middleware.ApprovalStore]. It SCANs every master for
// record keys and reads them, judging each by its node's TIME: meant for
// consoles and audits, it costs a pass over the keyspace.
func (s *Redis) List(ctx context.Context, f middleware.ApprovalFilter) ([]middleware.ApprovalRecord, error) {
	var mu sync.Mutex
	var out []middleware.ApprovalRecord
	err := s.forEachMaster(ctx, func(ctx context.Context, node redis.Cmdable) error {
		recs, err := s.scan(ctx, node, f)
		mu.Lock()
		out = append(out, recs...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b middleware.ApprovalRecord) int {
		return cmp.Or(a.RequestedAt.Compare(b.RequestedAt), cmp.Compare(a.ID, b.ID))
	})
	return limit(out, f.Limit), nil
}

// scanBatch is the COUNT hint of List's SCAN.
const scanBatch = 500

func (s *Redis) scan(ctx context.Context, node redis.Cmdable, f middleware.ApprovalFilter) ([]middleware.ApprovalRecord, error) {
	now, err := node.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	if s.cfg.clockOffset != nil {
		now = now.Add(s.cfg.clockOffset())
	}
	var out []middleware.ApprovalRecord
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, s.pattern, scanBatch).Result()
		if err != nil {
			return out, err
		}
		cmds := make([]*redis.MapStringStringCmd, len(keys))
		if _, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = p.HGetAll(ctx, k)
			}
			return nil
		}); err != nil {
			return out, err
		}
		for _, c := range cmds {
			fields := c.Val()
			if len(fields) == 0 {
				continue // collected since the scan saw it
			}
			rec, err := decodeRecord(fields)
			if err != nil {
				return out, err
			}
			if matches(&rec, f, now) {
				rec.Status = status(&rec, now)
				out = append(out, rec)
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// forEachMaster calls fn on every master: each master of a Cluster, each
// shard of a Ring, or the client itself.
func (s *Redis) forEachMaster(ctx context.Context, fn func(ctx context.Context, node redis.Cmdable) error) error {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	default:
		return fn(ctx, s.rdb)
	}
}

// run runs a script on one key, with the clock offset first in ARGV.
func (s *Redis) run(ctx context.Context, sc *redis.Script, key string, args ...any) (reply, error) {
	v, err := sc.Run(ctx, s.rdb, []string{key}, append([]any{s.offset()}, args...)...).Slice()
	return v, err
}

// offset is ARGV[1] of every script: microseconds added to Redis TIME,
// zero outside tests.
func (s *Redis) offset() string {
	if s.cfg.clockOffset == nil {
		return "0"
	}
	return micros(s.cfg.clockOffset())
}

// scriptErrors maps the scripts' refusals to the middleware's sentinels.
var scriptErrors = map[string]error{
	"not_found":       middleware.ErrApprovalNotFound,
	"pending":         middleware.ErrApprovalPending,
	"rejected":        middleware.ErrApprovalRejected,
	"expired":         middleware.ErrApprovalExpired,
	"consumed":        middleware.ErrApprovalConsumed,
	"resume_mismatch": middleware.ErrApprovalResumeMismatch,
	"input_mismatch":  middleware.ErrApprovalInputMismatch,
}

func scriptError(r reply) error {
	if err, ok := scriptErrors[r.status()]; ok {
		return err
	}
	return fmt.Errorf("approvalstore: unexpected script reply %v", []any(r))
}

func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

func unixMicro(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64) // the scripts print integers
	return time.UnixMicro(n)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// globEscape escapes the characters SCAN MATCH treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
