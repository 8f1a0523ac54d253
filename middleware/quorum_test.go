package middleware_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

var (
	managerA = middleware.Actor{ID: "manager-a", Tenant: "acme", Kind: "user"}
	managerB = middleware.Actor{ID: "manager-b", Tenant: "acme", Kind: "user"}
	managerC = middleware.Actor{ID: "manager-c", Tenant: "acme", Kind: "user"}
	// deputyA acts for manager-a: one party with manager-a.
	deputyA = middleware.Actor{ID: "deputy-a", Tenant: "acme", Kind: "user", OnBehalfOf: []string{"manager-a"}}
)

func quorumCap(n int) middleware.Capability {
	c := gatedCap
	c.Approval.Quorum = n
	return c
}

// decisionEvents counts the decision events of the execution that
// requested an approval, once every sink has caught up.
func (w *waiting) decisionEvents(requestedBy string) map[middleware.EventType]int {
	synctest.Wait()
	n := map[middleware.EventType]int{}
	for _, e := range w.rec.Execution(requestedBy) {
		switch e.Type {
		case middleware.EventApprovalVote, middleware.EventApproved, middleware.EventRejected:
			n[e.Type]++
		}
	}
	return n
}

func TestQuorumRunsOnlyAfterTheNthDistinctVote(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, quorumCap(3))
		id := w.requested()
		rec, _ := w.store.Get(t.Context(), id)
		vote := func(a middleware.Actor, wantErr error, wantVotes int) {
			t.Helper()
			_, err := w.decide(id, a)
			if !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
				t.Fatalf("vote of %s: %v, want %v", a.ID, err, wantErr)
			}
			if got, _ := w.store.Get(t.Context(), id); len(got.Votes) != wantVotes {
				t.Fatalf("after the vote of %s the record has %d votes, want %d", a.ID, len(got.Votes), wantVotes)
			}
		}
		vote(managerA, nil, 1)
		vote(managerA, nil, 1)                  // the same vote again: a no-op
		vote(deputyA, store.ErrSelfApproval, 1) // acts for an earlier voter: one party
		vote(agent, store.ErrSelfApproval, 1)   // the requester
		vote(managerB, nil, 2)
		env, err := w.resume(t.Context(), agent, refund, id, 0)
		wantCode(t, env, err, middleware.CodeApprovalPending)
		if w.runs.Load() != 0 {
			t.Fatal("the call ran before the quorum")
		}
		if got := w.decisionEvents(rec.RequestedBy); got[middleware.EventApprovalVote] != 2 || got[middleware.EventApproved] != 0 {
			t.Errorf("after two counted votes of three: %v, want 2 capability.approval_vote and no capability.approved", got)
		}
		vote(managerC, nil, 3)
		vote(managerC, nil, 3) // repeated after the quorum: still a no-op
		if got := w.decisionEvents(rec.RequestedBy); got[middleware.EventApprovalVote] != 3 || got[middleware.EventApproved] != 1 {
			t.Errorf("at the third distinct vote: %v, want 3 capability.approval_vote and capability.approved once", got)
		}
		env, err = w.resume(t.Context(), agent, refund, id, 0)
		wantCode(t, env, err, middleware.CodeOK)
		env, err = w.resume(t.Context(), agent, refund, id, 0)
		wantCode(t, env, err, middleware.CodeApprovalConsumed)
		if w.runs.Load() != 1 {
			t.Errorf("%d runs, want exactly one after the quorum", w.runs.Load())
		}
		got, _ := w.store.Get(t.Context(), id)
		if len(got.Votes) != 3 || got.Approver.ID != managerC.ID {
			t.Errorf("the record keeps the three votes and the deciding voter: %+v", got)
		}
	})
}

func TestQuorumOneRejectionRejects(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, quorumCap(3))
		id := w.requested()
		rec, _ := w.store.Get(t.Context(), id)
		w.decide(id, managerA)
		if _, err := w.eng.Decide(t.Context(), id, store.Decision{Approve: false, Approver: managerB, Comment: "no"}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.decide(id, managerC); !errors.Is(err, store.ErrNotPending) {
			t.Errorf("a vote after the rejection: %v, want ErrNotPending", err)
		}
		if got := w.decisionEvents(rec.RequestedBy); got[middleware.EventApprovalVote] != 2 || got[middleware.EventRejected] != 1 || got[middleware.EventApproved] != 0 {
			t.Errorf("decision events %v, want 2 capability.approval_vote and one capability.rejected", got)
		}
		env, err := w.resume(t.Context(), agent, refund, id, 0)
		wantCode(t, env, err, middleware.CodeApprovalRejected)
		if w.runs.Load() != 0 {
			t.Error("a rejected call ran")
		}
	})
}

func TestQuorumWaitingCallResumesAtTheNthVote(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		w := newWaiting(t, quorumCap(2))
		id := w.requested()
		done := w.resumeAsync(t.Context(), agent, refund, id, time.Minute)
		w.decide(id, managerA)
		synctest.Wait()
		if w.runs.Load() != 0 {
			t.Fatal("a waiting call ran after one vote of two")
		}
		w.decide(id, managerB)
		o := <-done
		wantCode(t, o.env, o.err, middleware.CodeOK)
		if w.runs.Load() != 1 {
			t.Errorf("%d runs, want one, at the second vote", w.runs.Load())
		}
	})
}

// decide approves id as a, through the engine.
func (w *waiting) decide(id string, a middleware.Actor) (store.ApprovalRecord, error) {
	return w.eng.Decide(w.t.Context(), id, store.Decision{Approve: true, Approver: a})
}
