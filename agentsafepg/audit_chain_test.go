package agentsafepg_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/internal/auditpg"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// verifyTrail checks the table as `agentsafe audit verify` does.
func verifyTrail(t *testing.T, pool *pgxpool.Pool, keys []ed25519.PublicKey, kept []auditchain.Checkpoint) *auditchain.Report {
	t.Helper()
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	v := auditchain.NewVerifier(keys, kept)
	if err := auditpg.Verify(t.Context(), conn.Conn(), v); err != nil {
		t.Fatal(err)
	}
	return v.Finish()
}

// loser is a dialer whose connections lose the reply to a statement once
// armed: the statement reaches the server, and once lost reports it
// committed, the reading side fails as a dropped connection would.
type loser struct {
	armed atomic.Bool
	lost  func() bool // whether the statement is committed yet
	hit   atomic.Int32
}

func (l *loser) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, l: l}, nil
}

type losingConn struct {
	net.Conn
	l     *loser
	wrote atomic.Bool
}

func (c *losingConn) Write(p []byte) (int, error) {
	if c.l.armed.Load() {
		c.wrote.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *losingConn) Read(p []byte) (int, error) {
	if c.wrote.Load() && c.l.armed.CompareAndSwap(true, false) {
		for deadline := time.Now().Add(10 * time.Second); !c.l.lost() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		c.l.hit.Add(1)
		c.Conn.Close()
		return 0, io.ErrUnexpectedEOF
	}
	return c.Conn.Read(p)
}

// TestAChainGoesOnAfterALostCommitReply: a batch commits, its reply is
// lost, the engine is told it failed and sends the batch's queued records
// again with its next (middleware.BatchAuditSink), the synchronous one not
// at all. The sink re-reads its chain's head before that write, goes on
// after the committed rows, and does not write the queued ones twice.
func TestAChainGoesOnAfterALostCommitReply(t *testing.T) {
	ctx := t.Context()
	url := migratedURL(t)
	observer := newPool(t, url)
	l := &loser{lost: func() bool {
		var n int
		observer.QueryRow(context.Background(), `SELECT count(*) FROM agentsafe.audit_events WHERE execution_id = 'exe_lost'`).Scan(&n)
		return n > 0
	}}
	pool := newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.DialFunc = l.dial })
	sink, err := agentsafepg.NewAuditSink(pool, agentsafepg.WithCheckpoints(1000, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Record(ctx, event(middleware.EventRequested, "exe_1")); err != nil {
		t.Fatal(err)
	}
	queued := event(middleware.EventCompleted, "exe_1")
	l.armed.Store(true)
	err = sink.RecordBatch(ctx, []middleware.Event{queued, event(middleware.EventRequested, "exe_lost")})
	if err == nil || l.hit.Load() != 1 {
		t.Fatalf("the write whose reply was lost returned %v (%d replies lost)", err, l.hit.Load())
	}
	if err := sink.RecordBatch(ctx, []middleware.Event{queued, event(middleware.EventRequested, "exe_2")}); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := observer.Query(ctx, `SELECT execution_id || ' ' || type FROM agentsafe.audit_events WHERE type NOT LIKE 'audit.%' ORDER BY chain_seq`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"exe_1 capability.requested", "exe_1 capability.completed", "exe_lost capability.requested", "exe_2 capability.requested"}
	if !slices.Equal(got, want) {
		t.Errorf("the trail is %q; want %q (each record once, in order)", got, want)
	}
	if rep := verifyTrail(t, observer, nil, nil); rep.Tampered() || len(rep.Chains) != 1 || rep.Chains[0].Last != 5 {
		t.Errorf("the chain does not verify whole: %+v %+v", rep, rep.Chains)
	}
}

// TestASplitBatchLeavesNoGap: calls through an engine whose strict sink
// is the chained PostgreSQL one, one actor's rows refused by the
// database: the engine splits the batches that hold them, every other
// call runs, and the chain has no gap (a row takes its chain_seq when it
// is committed).
func TestASplitBatchLeavesNoGap(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	refuseActor(t, pool, "mallory")
	sink := openAudit(t, pool)
	reg := middleware.NewRegistry().Register(refund, middleware.Capability{SideEffect: middleware.SideEffectExternal})
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithAuditSink(sink),
		middleware.WithLogger(slog.New(slog.DiscardHandler)),
		middleware.WithActor(func(ctx context.Context) (middleware.Actor, error) {
			return middleware.Actor{ID: ctx.Value(actorKey{}).(string), Tenant: "acme"}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ran, refused atomic.Int32
	for i := range 64 {
		wg.Go(func() {
			actor := "agent-7"
			if i%8 == 0 {
				actor = "mallory"
			}
			_, _, err := adapter.Execute(context.WithValue(ctx, actorKey{}, actor), adapter.Resolve(eng, refund), adapter.Call[any]{},
				func(context.Context) (any, error) { return nil, nil })
			switch {
			case err == nil:
				ran.Add(1)
			case actor == "mallory" && middleware.CodeOf(err) == middleware.CodeAuditUnavailable:
				refused.Add(1)
			default:
				t.Errorf("call %d (%s): %v", i, actor, err)
			}
		})
	}
	wg.Wait()
	if ran.Load() != 56 || refused.Load() != 8 {
		t.Fatalf("%d calls ran, %d refused; want 56 and 8", ran.Load(), refused.Load())
	}
	rep := verifyTrail(t, pool, nil, nil)
	if rep.Tampered() || len(rep.Chains) != 1 || rep.Chains[0].First != 1 || int(rep.Chains[0].Last) != rep.Chains[0].Records {
		t.Fatalf("the chain has a gap or a finding: %+v %+v", rep, rep.Chains)
	}
}

// TestTheSinksChainVerifies: an engine's records through the sink, a
// checkpoint every 10 (and one at Close), signed and kept elsewhere.
func TestTheSinksChainVerifies(t *testing.T) {
	ctx := t.Context()
	pool := migrated(t)
	pub, key, _ := ed25519.GenerateKey(nil)
	var mu sync.Mutex
	var kept []auditchain.Checkpoint
	sink, err := agentsafepg.NewAuditSink(pool, agentsafepg.WithSigner(key), agentsafepg.WithCheckpoints(10, time.Hour),
		agentsafepg.OnCheckpoint(func(c auditlog.Checkpoint) {
			h, _ := auditchain.ParseHash(c.Hash)
			mu.Lock()
			kept = append(kept, auditchain.Checkpoint{Chain: c.Chain, Seq: c.Seq, Hash: h, Time: c.Time, Signature: c.Signature, Final: c.Final})
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for n := range 5 {
				id := "exe_" + string(rune('a'+w)) + string(rune('a'+n))
				for _, typ := range []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted} {
					if err := sink.Record(ctx, event(typ, id)); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep := verifyTrail(t, pool, []ed25519.PublicKey{pub}, kept)
	// 120 records, a checkpoint after every 10, the last at Close: 133 rows.
	if rep.Tampered() || len(rep.Chains) != 1 {
		t.Fatalf("%+v", rep)
	}
	if c := rep.Chains[0]; c.Chain != sink.Chain() || c.Records != 133 || c.Attested != 133 || c.AttestedBy != "signed and kept" || len(kept) != 13 || !kept[12].Final {
		t.Errorf("chain %+v, %d kept", c, len(kept))
	}
}

func TestNewAuditSinkRefusesAKeyThatIsNotEd25519(t *testing.T) {
	_, err := agentsafepg.NewAuditSink(migrated(t), agentsafepg.WithSigner(ed25519.PrivateKey("short")))
	if err == nil || !strings.Contains(err.Error(), "Ed25519") {
		t.Errorf("NewAuditSink with a 5-byte key: %v", err)
	}
}

// TestCrossChecksNameWhatHasNoRecords: two instances, each with its chain;
// every approval and stored result has its records in one. Then one
// instance's whole chain is deleted, which no gap shows: the approval and
// result tables still name what it held.
func TestCrossChecksNameWhatHasNoRecords(t *testing.T) {
	ctx := t.Context()
	url := migratedURL(t)
	pool := newPool(t, url)
	type instance struct {
		eng      *middleware.Engine
		sink     *agentsafepg.AuditSink
		approval string
		resumed  string
	}
	var instances [2]instance
	for i := range instances {
		sink, err := agentsafepg.NewAuditSink(pool)
		if err != nil {
			t.Fatal(err)
		}
		eng := newEngine(t, openApprovals(t, pool), middleware.WithResultStore(openResults(t, pool)),
			middleware.WithResultKey(sealKey), middleware.WithAuditSink(sink), middleware.WithLogger(slog.New(slog.DiscardHandler)))
		in := refundInput(0, i)
		key := fmt.Sprintf("key-%d", i)
		call := func(approval string) (middleware.Envelope, error) {
			_, env, err := adapter.Execute(ctx, adapter.Resolve(eng, refund),
				adapter.Call[any]{Input: in, ApprovalID: approval, IdempotencyKey: key, Codec: stringCodec{}}, (&ledger{runs: map[string]int{}}).handler)
			return env, err
		}
		env, err := call("")
		if middleware.CodeOf(err) != middleware.CodeApprovalRequired {
			t.Fatalf("the first call: %v", err)
		}
		if _, err := eng.Decide(ctx, env.ApprovalID, store.Decision{Approve: true, Approver: manager, Comment: "ok"}); err != nil {
			t.Fatal(err)
		}
		resumed, err := call(env.ApprovalID)
		if err != nil || resumed.Status != middleware.StatusCompleted {
			t.Fatalf("the resume: %v, %+v", err, resumed)
		}
		instances[i] = instance{eng: eng, sink: sink, approval: env.ApprovalID, resumed: resumed.ExecutionID}
	}
	// The records the cross-checks need (requested, started) were
	// committed before each call went on.
	for _, in := range instances {
		if err := in.sink.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if rep := verifyTrail(t, pool, nil, nil); rep.Tampered() || len(rep.Extra) > 0 {
		t.Fatalf("the untouched trail: %+v", rep)
	}
	gone := instances[0]
	if _, err := pool.Exec(ctx, `DELETE FROM agentsafe.audit_events WHERE chain = $1`, gone.sink.Chain()); err != nil {
		t.Fatal(err)
	}
	rep := verifyTrail(t, pool, nil, nil)
	var got []string
	for _, f := range rep.Extra {
		got = append(got, f.Detail)
	}
	want := []string{
		"approval " + gone.approval + " (completed): the capability.requested record of",
		"approval " + gone.approval + " (completed): the capability.requested and .started records of " + gone.resumed,
		"stored result ",
	}
	if len(got) != len(want) || len(rep.Chains) != 1 {
		t.Fatalf("cross-checks: %q; want 3, of instance 0 only", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("finding %d is %q; want it to start %q", i, got[i], want[i])
		}
	}
	if !strings.Contains(got[2], gone.resumed) {
		t.Errorf("the stored result's finding does not name %s: %q", gone.resumed, got[2])
	}
}
