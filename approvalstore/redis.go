package approvalstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/internal/ids"
	"github.com/agentsafe/agentsafe/internal/redisnode"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// Redis keeps approvals in Redis, so that an approval executes at most once
// across every server instance that shares the deployment: a single node, a
// Sentinel-managed primary (redis.NewFailoverClient) or a Cluster. See the
// package documentation for the settings single use depends on.
//
// Keys. A record is one hash at {prefix:apr_…}: the braces make the whole
// key its hash tag, so Get, Decide, Consume, Release and RecordOutcome are
// each one script over one key, on one node of a Cluster, in one round
// trip. Create also needs the requester's pending index,
// {prefix:pending:<hash>}, which a Cluster may place on another node; it
// writes the record first and claims its place in the index second, and
// checks every index entry it acts on against the records. No decision
// depends on the index. (Keying records under the requester's hash tag
// instead would make Create one script, but every Consume would first have
// to look up where its record lives: two round trips on the hot path, for
// a benefit to deduplication only.)
type Redis struct {
	rdb     redis.UniversalClient
	cfg     config
	pattern string           // SCAN MATCH pattern of record keys
	scripts *redisnode.Batch // runs Consume, batching concurrent ones
}

var _ store.ApprovalStore = (*Redis)(nil)

// loadTimeout bounds NewRedis's SCRIPT LOAD.
const loadTimeout = 5 * time.Second

// NewRedis returns a store on client: a *redis.Client (one node, or a
// Sentinel-managed primary from redis.NewFailoverClient), a
// *redis.ClusterClient, or a *redis.Ring (without [WithWait]). It loads the
// store's scripts (SCRIPT LOAD, on every master of a Cluster) and fails if
// Redis cannot be reached; afterwards a script missing from Redis's cache
// (a restart, SCRIPT FLUSH, a failover) is sent again by itself. The store
// never closes client.
func NewRedis(client redis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	if client == nil {
		return nil, errors.New("approvalstore: NewRedis needs a Redis client")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyRedis(&cfg)
		}
	}
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
	s := &Redis{rdb: client, cfg: cfg, pattern: "{" + globEscape(cfg.prefix) + ":" + approvalIDPrefix + "*}", scripts: redisnode.NewBatch(client)}
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	if err := redisnode.LoadScripts(ctx, client, scripts); err != nil {
		return nil, fmt.Errorf("approvalstore: load the Redis scripts: %w", err)
	}
	if cfg.waitN > 0 {
		if err := redisnode.ForEachMaster(ctx, s.rdb, s.checkReplicas); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// checkReplicas fails unless node, a master, reports at least the
// replicas WithWait asks for: with fewer, every WAIT would fall short and
// no approval could ever run.
func (s *Redis) checkReplicas(ctx context.Context, node redis.Cmdable) error {
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("approvalstore: WithWait: read the replication of %s: %w", masterName(ctx, node), err)
	}
	n := -1
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	if n < s.cfg.waitN {
		return fmt.Errorf("approvalstore: WithWait(%d): the master %s reports %d connected replicas (INFO replication), so every consumption would fall short", s.cfg.waitN, masterName(ctx, node), max(n, 0))
	}
	return nil
}

// masterName names a master in an error: its address as the client knows
// it or, for a Sentinel-managed client (which knows it as
// "FailoverClient"), as the master says.
func masterName(ctx context.Context, node redis.Cmdable) string {
	c, ok := node.(*redis.Client)
	if !ok {
		return "the master"
	}
	addr := c.Options().Addr
	if _, _, err := net.SplitHostPort(addr); err != nil {
		if info, err := c.ClientInfo(ctx).Result(); err == nil && info.LAddr != "" {
			return info.LAddr
		}
	}
	return addr
}

const approvalIDPrefix = "apr_"

// recordKey is the key of a record: all of it is the hash tag.
func (s *Redis) recordKey(id string) string { return "{" + s.cfg.prefix + ":" + id + "}" }

// pendingKey is the key of a requester's pending index. The requester is
// hashed: actor ids are the application's and could hold braces.
func (s *Redis) pendingKey(audience string, a store.Actor) string {
	return "{" + s.cfg.prefix + ":pending:" + ids.Derive("", audience, a.Tenant, a.ID) + "}"
}

// Get implements [store.ApprovalStore]. The record's status is read
// as of Redis TIME.
func (s *Redis) Get(ctx context.Context, id string) (store.ApprovalRecord, error) {
	if !store.ValidApprovalID(id) {
		return store.ApprovalRecord{}, store.ErrApprovalNotFound
	}
	r, err := s.run(ctx, getScript, s.recordKey(id))
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	return recordAt(r, 0)
}

// recordAt decodes the Redis time at r[i] and the record at r[i+1], with
// the record's status as of that time. A record without a status is not
// found.
func recordAt(r reply, i int) (store.ApprovalRecord, error) {
	now, err := r.str(i)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	fields, err := r.values(i + 1)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	if _, ok := fields["status"]; !ok {
		return store.ApprovalRecord{}, store.ErrApprovalNotFound
	}
	rec, err := decodeRecord(fields)
	if err != nil {
		return store.ApprovalRecord{}, err
	}
	rec.Status = status(&rec, unixMicro(now))
	return rec, nil
}

// Decide implements [store.ApprovalStore]. It reads the record and
// applies the approver rule and policy in Go (the requester and approval
// type never change); then one script checks the state and the earlier
// voters, and records the vote.
func (s *Redis) Decide(ctx context.Context, id string, d store.Decision) (store.ApprovalRecord, bool, error) {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return store.ApprovalRecord{}, false, err
	}
	if rec.Audience != d.Audience {
		return store.ApprovalRecord{}, false, store.ErrApprovalNotFound
	}
	if err := s.cfg.checkApprover(ctx, rec, d.Approver); err != nil {
		return store.ApprovalRecord{}, false, err
	}
	a := d.Approver
	r, err := s.run(ctx, decideScript, s.recordKey(id), d.Audience, flag(d.Approve), a.ID, a.Tenant, a.Kind, jsonList(a.OnBehalfOf), d.Comment, voteJSON(d))
	if err != nil {
		return store.ApprovalRecord{}, false, err
	}
	switch r.status() {
	case "ok", "same":
		rec, err := recordAt(r, 1)
		return rec, err == nil && r.status() == "ok", err
	case "not_pending":
		rec, err := recordAt(r, 1)
		if err != nil {
			return store.ApprovalRecord{}, false, err
		}
		return store.ApprovalRecord{}, false, fmt.Errorf("%w: it is %s", store.ErrNotPending, rec.Status)
	case "voted":
		// The script applied store.CheckVoter's rule; the record it read
		// lets the store SPI name the earlier voter, in its own words.
		rec, err := recordAt(r, 1)
		if err != nil {
			return store.ApprovalRecord{}, false, err
		}
		if err := store.CheckVoter(rec, d.Approver, s.cfg.allowSelf); err != nil {
			return store.ApprovalRecord{}, false, err
		}
		return store.ApprovalRecord{}, false, fmt.Errorf("%w: an earlier voter shares a principal with %s", store.ErrAlreadyVoted, d.Approver.ID)
	}
	return store.ApprovalRecord{}, false, scriptError(r)
}

// Consume implements [store.ApprovalStore]: one script checks and
// writes, in one round trip, and replies with the deciding vote alone
// (with [WithWait], WAIT travels in the same round trip).
func (s *Redis) Consume(ctx context.Context, id string, req store.ConsumeRequest) (store.ConsumedApproval, error) {
	if !store.ValidApprovalID(id) || !validActor(req.Actor) { // Create binds no such actor
		return store.ConsumedApproval{}, store.ErrApprovalNotFound
	}
	a := req.Actor
	args := []any{s.offset(), req.Audience, a.ID, a.Tenant, a.Kind, jsonList(a.OnBehalfOf), req.Procedure, req.Type, quorum(req.Quorum),
		req.Digest, req.ExecutionID, micros(req.Lease), micros(s.cfg.retention), flag(s.cfg.waitN > 0), req.PreviewDigest}
	key := s.recordKey(id)
	var r reply
	var err error
	if s.cfg.waitN > 0 {
		r, err = s.consumeAndWait(ctx, key, args)
		if errors.Is(err, errNotDurable) {
			// Nothing runs on a consumption a failover could lose: give it
			// back, so that the approval is not spent and the caller may
			// try again.
			err = s.releaseAfter(ctx, id, req.ExecutionID, err)
		}
	} else {
		r, err = s.scripts.Run(ctx, consumeScript, key, args...)
	}
	if err != nil {
		return store.ConsumedApproval{}, err
	}
	if r.status() != "ok" {
		return store.ConsumedApproval{}, scriptError(r)
	}
	return consumedAt(id, r)
}

// consumedAt decodes the consume script's flat reply.
func consumedAt(id string, r reply) (store.ConsumedApproval, error) {
	names := []string{"type", "approver_id", "approver_tenant", "approver_kind", "approver_on_behalf_of", "comment", "decided_at"}
	f := make(map[string]string, len(names))
	for i, name := range names {
		v, err := r.str(i + 1)
		if err != nil {
			return store.ConsumedApproval{}, err
		}
		f[name] = v
	}
	d := recordDecoder{f: f}
	a := store.ConsumedApproval{ID: id, Type: f["type"], Approver: d.actor("approver"), Comment: f["comment"], DecidedAt: d.time("decided_at")}
	return a, d.err
}

// releaseTimeout bounds the Release after a WAIT shortfall, which runs
// even when the caller's context is done.
const releaseTimeout = 5 * time.Second

// releaseAfter releases the consumption by executionID that failed with
// cause, and returns cause, with the release's failure if any: then the
// record stays consumed and reads in_doubt after its lease.
func (s *Redis) releaseAfter(ctx context.Context, id, executionID string, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := s.Release(ctx, id, executionID); err != nil {
		return fmt.Errorf("%w; giving the approval back failed too, so it is spent (in_doubt after its lease): %v", cause, err)
	}
	return cause
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
		return nil, fmt.Errorf("%w: only %d of %d replicas acknowledged the consumption within %v; not running on a consumption a failover could lose, and giving it back",
			errNotDurable, acked, s.cfg.waitN, s.cfg.waitTimeout)
	}
	return r, nil
}

// errNotDurable: a consumption too few replicas acknowledged. Not a
// sentinel of middleware: the engine fails closed with APPROVAL_UNAVAILABLE.
var errNotDurable = errors.New("approvalstore: consumption not durable")

// Release implements [store.ApprovalStore]: one script.
func (s *Redis) Release(ctx context.Context, id, executionID string) error {
	if !store.ValidApprovalID(id) {
		return nil
	}
	_, err := s.run(ctx, releaseScript, s.recordKey(id), executionID)
	return err
}

// RecordOutcome implements [store.ApprovalStore]: one script.
func (s *Redis) RecordOutcome(ctx context.Context, id, executionID string, o store.Outcome) error {
	if err := store.CheckOutcome(o); err != nil {
		return err
	}
	if !store.ValidApprovalID(id) {
		return store.ErrApprovalNotFound
	}
	r, err := s.run(ctx, outcomeScript, s.recordKey(id), executionID, o.Status.String(), o.Code, flag(o.Late))
	if err != nil {
		return err
	}
	if r.status() == "ok" {
		return nil
	}
	return scriptError(r)
}

// List implements [store.ApprovalStore]. It SCANs every master for
// record keys and reads them (all but the payload), judging each by its
// node's TIME and keeping those that match f as it goes: meant for
// consoles and audits, it costs a pass over the keyspace, and holds at
// most about twice the limit per master.
func (s *Redis) List(ctx context.Context, f store.ApprovalFilter) ([]store.ApprovalRecord, error) {
	n := listLimit(f)
	var mu sync.Mutex
	var out []store.ApprovalRecord
	err := redisnode.ForEachMaster(ctx, s.rdb, func(ctx context.Context, node redis.Cmdable) error {
		recs, err := s.scan(ctx, node, f, n)
		mu.Lock()
		out = append(out, recs...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, err
	}
	return oldest(out, n), nil
}

// scanBatch is the COUNT hint of List's SCAN.
const scanBatch = 500

// scan returns the n oldest records on node that match f.
func (s *Redis) scan(ctx context.Context, node redis.Cmdable, f store.ApprovalFilter, n int) ([]store.ApprovalRecord, error) {
	now, err := node.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	if s.cfg.clockOffset != nil {
		now = now.Add(s.cfg.clockOffset())
	}
	var out []store.ApprovalRecord
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, s.pattern, scanBatch).Result()
		if err != nil {
			return nil, err
		}
		cmds := make([]*redis.SliceCmd, len(keys))
		if _, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = p.HMGet(ctx, k, listFields...)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		for _, c := range cmds {
			fields := make(map[string]string, len(listFields))
			for i, v := range c.Val() {
				if v, ok := v.(string); ok {
					fields[listFields[i]] = v
				}
			}
			if _, ok := fields["status"]; !ok {
				continue // collected since the scan saw it
			}
			rec, err := decodeRecord(fields)
			if err != nil {
				return nil, err
			}
			if matches(&rec, f, now) {
				rec.Status = status(&rec, now)
				out = append(out, rec)
			}
		}
		if len(out) > 2*n {
			out = oldest(out, n)
		}
		if cursor = next; cursor == 0 {
			return oldest(out, n), nil
		}
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
	"not_found":       store.ErrApprovalNotFound,
	"pending":         store.ErrApprovalPending,
	"rejected":        store.ErrApprovalRejected,
	"expired":         store.ErrApprovalExpired,
	"consumed":        store.ErrApprovalConsumed,
	"resume_mismatch": store.ErrApprovalResumeMismatch,
	"input_mismatch":  store.ErrApprovalInputMismatch,
	"stale":           store.ErrApprovalStale,
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
