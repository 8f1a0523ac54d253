package approvalstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// The approvers of the quorum race: three managers, and a deputy acting
// for the first, who is one party with her (only the first of the two to
// vote is counted).
var (
	quorumVoters = []middleware.Actor{
		{ID: "manager-a", Tenant: "acme", Kind: "user"},
		{ID: "manager-b", Tenant: "acme", Kind: "user"},
		{ID: "manager-c", Tenant: "acme", Kind: "user"},
		{ID: "deputy-a", Tenant: "acme", Kind: "user", OnBehalfOf: []string{"manager-a"}},
	}
)

const quorum = 3

// TestRedisQuorumRace: on a single Redis node, engines race the votes of a
// quorum and the agent's resumes on every record; TestRedisCluster runs it
// on a Cluster too.
func TestRedisQuorumRace(t *testing.T) {
	srv := redistest.Start(t)
	raceQuorum(t, 3, 16, func() redis.UniversalClient { return srv.Client() })
}

// raceQuorum: 8 engines, each with its own Redis client, share the
// records of a refund that 3 distinct approvers must approve. For every
// record at once, each approver votes twice through two engines (the same
// vote repeated is a no-op), the deputy of the first votes too (one party
// with her: refused when second, counted instead of her when first), and
// every engine resumes the agent's call over and over until it learns the
// outcome. The handler runs exactly once per record, and only after the
// third distinct vote; each counted vote emits capability.approval_vote and
// the record emits capability.approved once.
// Records are raced in rounds of at most 16: a requester may have only so
// many approvals pending.
func raceQuorum(t *testing.T, rounds, records int, client func() redis.UniversalClient) {
	prefix := newPrefix()
	rec := &agentsafetest.Recorder{}
	engines := make([]*middleware.Engine, instances)
	for i := range engines {
		s, err := approvalstore.NewRedis(client(), approvalstore.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		reg := middleware.NewRegistry().Register(refund, middleware.Capability{
			SideEffect: middleware.SideEffectExternal, Risk: middleware.RiskHigh,
			Approval: middleware.Approval{Required: true, Type: "manager", Quorum: quorum},
		})
		engines[i], err = middleware.New(reg, middleware.WithApprovalStore(s), middleware.WithAudience("orders"),
			middleware.WithProtoFiles(nil), middleware.WithEventSink(rec),
			middleware.WithActor(func(context.Context) (middleware.Actor, error) { return agent, nil }))
		if err != nil {
			t.Fatal(err)
		}
	}
	for round := range rounds {
		raceQuorumRound(t, engines, rec, round, records)
	}
}

func raceQuorumRound(t *testing.T, engines []*middleware.Engine, rec *agentsafetest.Recorder, round, records int) {
	// A record that never gets its quorum fails the round, never hangs it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ids := make([]string, records)
	requestedBy := make([]string, records)
	for n := range ids {
		env, err := execute(ctx, engines[n%instances], refundInput(round, n), "", func(context.Context) (any, error) {
			t.Error("a call without an approval must run nothing")
			return nil, nil
		})
		if middleware.CodeOf(err) != middleware.CodeApprovalRequired {
			t.Fatalf("record %d: %v, want APPROVAL_REQUIRED", n, err)
		}
		ids[n], requestedBy[n] = env.ApprovalID, env.ExecutionID
	}

	// The handler checks, as it runs, that the record it consumed counts
	// three distinct approving parties.
	var mu sync.Mutex
	runs := map[string]int{}
	handler := func(ctx context.Context) (any, error) {
		x, ok := middleware.ExecutionFromContext(ctx)
		if !ok || x.Approval == nil {
			return nil, fmt.Errorf("a gated handler ran without a consumed approval: %+v", x)
		}
		r, err := engines[0].Get(ctx, x.Approval.ID)
		if err != nil {
			return nil, err
		}
		if yes := approvingVotes(r); yes != quorum {
			t.Errorf("record %s: the handler ran after %d approving votes, want %d", x.Approval.ID, yes, quorum)
		}
		mu.Lock()
		runs[x.Approval.ID]++
		mu.Unlock()
		return "refunded", nil
	}

	var counted, refused, completed, consumed, pending atomic.Int64
	var unexpected sync.Map
	start := make(chan struct{})
	var wg sync.WaitGroup
	for n, id := range ids {
		for v, voter := range quorumVoters {
			for k := range 2 {
				eng := engines[(n+v*2+k)%instances]
				wg.Go(func() {
					<-start
					_, err := eng.Decide(ctx, id, store.Decision{Approve: true, Approver: voter, Comment: "ok"})
					switch {
					case err == nil:
						counted.Add(1) // counted, or the same vote again: the events tell
					case errorsIsAny(err, store.ErrSelfApproval, store.ErrNotPending):
						refused.Add(1) // one party with an earlier voter; or the quorum was met
					default:
						unexpected.Store(fmt.Sprintf("record %d: vote %d of %s", n, k, voter.ID), err)
					}
				})
			}
		}
		for e, eng := range engines {
			wg.Go(func() {
				<-start
				for {
					env, err := execute(ctx, eng, refundInput(round, n), id, handler)
					switch code := middleware.CodeOf(err); {
					case err == nil && env.Status == middleware.StatusCompleted:
						completed.Add(1)
						return
					case code == middleware.CodeApprovalConsumed:
						consumed.Add(1)
						return
					case code == middleware.CodeApprovalPending:
						pending.Add(1)
						runtime.Gosched() // not decided yet: the agent asks again
					default:
						unexpected.Store(fmt.Sprintf("record %d: resume on engine %d", n, e), err)
						return
					}
				}
			})
		}
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("round %d: %d records, %d votes (%d accepted, %d refused), %d resumes that found the approval still pending and %d that learnt the outcome, from %d engines in %v",
		round, records, records*len(quorumVoters)*2, counted.Load(), refused.Load(), pending.Load(), completed.Load()+consumed.Load(), instances, time.Since(began).Round(time.Millisecond))

	unexpected.Range(func(k, v any) bool { t.Errorf("%s: %v", k, v); return true })
	for n, id := range ids {
		if runs[id] != 1 {
			t.Errorf("record %d ran its handler %d times, want exactly once", n, runs[id])
		}
		r, err := engines[0].Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if approvingVotes(r) != quorum || len(r.Votes) != quorum {
			t.Errorf("record %d: %d votes (%d approving), want exactly %d: %+v", n, len(r.Votes), approvingVotes(r), quorum, r.Votes)
		}
		evs, err := rec.Wait(ctx, requestedBy[n], func(evs []middleware.Event) bool {
			return count(evs, middleware.EventApprovalVote) >= quorum && count(evs, middleware.EventApproved) >= 1
		})
		if err != nil {
			t.Fatalf("record %d: the decision events did not arrive: %v", n, err)
		}
		if v, a := count(evs, middleware.EventApprovalVote), count(evs, middleware.EventApproved); v != quorum || a != 1 {
			t.Errorf("record %d: %d approval_vote and %d approved events, want %d and 1", n, v, a, quorum)
		}
	}
	if completed.Load() != int64(records) || consumed.Load() != int64(records*(instances-1)) {
		t.Errorf("%d resumes completed and %d found the approval consumed; want %d and %d", completed.Load(), consumed.Load(), records, records*(instances-1))
	}
}

// approvingVotes counts the distinct approvers among r's approving votes.
func approvingVotes(r store.ApprovalRecord) int {
	seen := map[string]bool{}
	for _, v := range r.Votes {
		if v.Approve {
			seen[v.Approver.ID] = true
		}
	}
	return len(seen)
}

func count(evs []middleware.Event, t middleware.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == t {
			n++
		}
	}
	return n
}

func errorsIsAny(err error, targets ...error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
