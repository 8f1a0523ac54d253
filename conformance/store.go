package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// StoreUnderTest is one fresh, empty store for [RunStore], with a way to
// move its clock.
type StoreUnderTest struct {
	Store middleware.ApprovalStore
	// Advance moves the clock the store decides expiry with forward by d.
	Advance func(d time.Duration)
	// MaxPending is the store's cap on pending records per requester, or 0
	// to skip the cap's subtest.
	MaxPending int
}

// RunStore checks the [middleware.ApprovalStore] contract: one named
// subtest per rule, each on a fresh store from open. A failure message
// names the rule it checks.
func RunStore(t *testing.T, open func(t *testing.T) StoreUnderTest) {
	t.Helper()
	for _, r := range storeRules {
		t.Run(r.name, func(t *testing.T) {
			s := open(t)
			r.check(&storeCheck{T: t, s: s, ctx: t.Context()})
		})
	}
}

type storeCheck struct {
	*testing.T
	s   StoreUnderTest
	ctx context.Context
	n   atomic.Int32
}

var (
	requester = middleware.Actor{ID: "agent-1", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}}
	manager   = middleware.Actor{ID: "manager-bob", Tenant: "acme", Kind: "user"}
	manager2  = middleware.Actor{ID: "manager-carol", Tenant: "acme", Kind: "user"}
)

const (
	storeProc   = "/conformance.v1.Orders/Refund"
	storeType   = "manager"
	storeDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	otherDigest = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// request returns a new request for the requester with a fresh id.
func (c *storeCheck) request(digest string) middleware.ApprovalRequest {
	return middleware.ApprovalRequest{
		ID: middleware.NewApprovalID(), Audience: "orders", Procedure: storeProc, Type: storeType, Requester: requester,
		RequestedBy: "exe_requester", Digest: digest, View: "refund 120.00 EUR on order 42", Reasons: []string{"amount over 100"},
		SideEffect: middleware.SideEffectWrite, Risk: middleware.RiskHigh, ExpiresIn: 15 * time.Minute,
	}
}

func (c *storeCheck) create(digest string) middleware.ApprovalRecord {
	c.Helper()
	rec, err := c.s.Store.Create(c.ctx, c.request(digest))
	if err != nil {
		c.Fatalf("Create: %v", err)
	}
	return rec
}

func (c *storeCheck) approved() middleware.ApprovalRecord {
	c.Helper()
	rec := c.create(storeDigest)
	if _, err := c.s.Store.Decide(c.ctx, rec.ID, middleware.Decision{Approve: true, Approver: manager, Comment: "ok"}); err != nil {
		c.Fatalf("Decide: %v", err)
	}
	return rec
}

func (c *storeCheck) consumeReq(execution string) middleware.ConsumeRequest {
	return middleware.ConsumeRequest{Audience: "orders", Procedure: storeProc, Type: storeType, Actor: requester, Digest: storeDigest, ExecutionID: execution, Lease: time.Minute}
}

func (c *storeCheck) status(id string) middleware.ApprovalStatus {
	c.Helper()
	rec, err := c.s.Store.Get(c.ctx, id)
	if err != nil {
		c.Fatalf("Get(%s): %v", id, err)
	}
	return rec.Status
}

func (c *storeCheck) wantErr(rule string, err, want error) {
	c.Helper()
	if !errors.Is(err, want) {
		c.Errorf("%s: got error %v, want %v", rule, err, want)
	}
}

var storeRules = []struct {
	name  string
	check func(c *storeCheck)
}{
	{"Create/stores a pending record stamped with the store's clock", func(c *storeCheck) {
		req := c.request(storeDigest)
		rec, err := c.s.Store.Create(c.ctx, req)
		if err != nil {
			c.Fatal(err)
		}
		if rec.ID != req.ID || rec.Status != middleware.ApprovalPending || rec.RequestedAt.IsZero() || !rec.ExpiresAt.Equal(rec.RequestedAt.Add(req.ExpiresIn)) {
			c.Errorf("a new record must be pending with ExpiresAt = RequestedAt + ExpiresIn: %+v", rec)
		}
		got, err := c.s.Store.Get(c.ctx, rec.ID)
		if err != nil || got.Requester.ID != requester.ID || got.Digest != storeDigest || got.View != req.View || len(got.Reasons) != 1 ||
			got.Type != storeType || got.Procedure != storeProc || got.Risk != middleware.RiskHigh || got.SideEffect != middleware.SideEffectWrite ||
			got.RequestedBy != "exe_requester" || len(got.Requester.OnBehalfOf) != 1 {
			c.Errorf("Get must return every field Create stored: %+v, %v", got, err)
		}
	}},
	{"Create/a repeat of a pending call returns the same record", func(c *storeCheck) {
		first := c.create(storeDigest)
		again := c.create(storeDigest)
		if again.ID != first.ID {
			c.Errorf("while a record for the same (procedure, actor, digest) is pending, a repeat must return its id: %s != %s", again.ID, first.ID)
		}
		if other := c.create(otherDigest); other.ID == first.ID {
			c.Error("another input must get another approval")
		}
	}},
	{"Create/pending records per requester are capped", func(c *storeCheck) {
		if c.s.MaxPending == 0 {
			c.Skip("the harness sets no cap")
		}
		for i := range c.s.MaxPending {
			c.create(fmt.Sprintf("sha256:%064d", i))
		}
		_, err := c.s.Store.Create(c.ctx, c.request(fmt.Sprintf("sha256:%064d", c.s.MaxPending)))
		c.wantErr("pending records per actor are capped", err, middleware.ErrTooManyPending)
	}},
	{"Get/an unknown id is not found", func(c *storeCheck) {
		_, err := c.s.Store.Get(c.ctx, middleware.NewApprovalID())
		c.wantErr("an unknown id is not found", err, middleware.ErrApprovalNotFound)
	}},
	{"Decide/records approver, comment and time", func(c *storeCheck) {
		rec := c.create(storeDigest)
		got, err := c.s.Store.Decide(c.ctx, rec.ID, middleware.Decision{Approve: true, Approver: manager, Comment: "fine"})
		if err != nil || got.Status != middleware.ApprovalApproved || got.Approver.ID != manager.ID || got.Comment != "fine" || got.DecidedAt.IsZero() {
			c.Errorf("an approval must record approver, comment and time: %+v, %v", got, err)
		}
		if s := c.status(rec.ID); s != middleware.ApprovalApproved {
			c.Errorf("after approval Get says %s", s)
		}
		rej := c.create(otherDigest)
		if got, err := c.s.Store.Decide(c.ctx, rej.ID, middleware.Decision{Approve: false, Approver: manager}); err != nil || got.Status != middleware.ApprovalRejected {
			c.Errorf("a rejection must be recorded: %+v, %v", got, err)
		}
	}},
	{"Decide/self-approval is refused", func(c *storeCheck) {
		rec := c.create(storeDigest)
		for _, a := range []middleware.Actor{
			requester,
			{ID: "user-alice", Tenant: "acme"}, // the requester acts for her
			{ID: "agent-9", Tenant: "acme", OnBehalfOf: []string{"user-alice"}}, // acts for the same person
			{ID: "agent-8", Tenant: "acme", OnBehalfOf: []string{requester.ID}}, // acts for the requester
		} {
			_, err := c.s.Store.Decide(c.ctx, rec.ID, middleware.Decision{Approve: true, Approver: a})
			c.wantErr("the requester and its OnBehalfOf chain may not approve", err, middleware.ErrSelfApproval)
		}
		_, err := c.s.Store.Decide(c.ctx, rec.ID, middleware.Decision{Approve: true, Approver: middleware.Actor{ID: "manager-eve", Tenant: "other"}})
		c.wantErr("an approver in another tenant may not approve", err, middleware.ErrApproverNotAllowed)
		if s := c.status(rec.ID); s != middleware.ApprovalPending {
			c.Errorf("a refused decision must change nothing, record is %s", s)
		}
	}},
	{"Decide/the same decision again is a no-op", func(c *storeCheck) {
		rec := c.approved()
		if _, err := c.s.Store.Decide(c.ctx, rec.ID, middleware.Decision{Approve: true, Approver: manager}); err != nil {
			c.Errorf("the same decision by the same approver must be a no-op, got %v", err)
		}
	}},
	{"Decide/only pending records are decided", func(c *storeCheck) {
		rec := c.approved()
		_, err := c.s.Store.Decide(c.ctx, rec.ID, middleware.Decision{Approve: false, Approver: manager})
		c.wantErr("a decided record cannot be decided otherwise", err, middleware.ErrNotPending)
		_, err = c.s.Store.Decide(c.ctx, rec.ID, middleware.Decision{Approve: true, Approver: manager2})
		c.wantErr("a decided record cannot be decided by someone else", err, middleware.ErrNotPending)
		if s := c.status(rec.ID); s != middleware.ApprovalApproved {
			c.Errorf("a refused decision changed the record to %s", s)
		}
		_, err = c.s.Store.Decide(c.ctx, middleware.NewApprovalID(), middleware.Decision{Approve: true, Approver: manager})
		c.wantErr("deciding an unknown id", err, middleware.ErrApprovalNotFound)
	}},
	{"Decide/an expired record cannot be decided", func(c *storeCheck) {
		rec := c.create(storeDigest)
		c.s.Advance(16 * time.Minute)
		_, err := c.s.Store.Decide(c.ctx, rec.ID, middleware.Decision{Approve: true, Approver: manager})
		c.wantErr("a record past its expiry cannot be decided", err, middleware.ErrApprovalExpired)
		if s := c.status(rec.ID); s != middleware.ApprovalExpired {
			c.Errorf("a pending record past its expiry must read expired, got %s", s)
		}
	}},
	{"Consume/an approved record is consumed by one execution", func(c *storeCheck) {
		rec := c.approved()
		got, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a"))
		if err != nil || got.Status != middleware.ApprovalConsumed || got.ConsumedBy != "exe_a" || got.Approver.ID != manager.ID || got.LeaseUntil.IsZero() {
			c.Fatalf("consuming an approved record: %+v, %v", got, err)
		}
		_, err = c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_b"))
		c.wantErr("a second execution must get APPROVAL_CONSUMED", err, middleware.ErrApprovalConsumed)
	}},
	{"Consume/is idempotent per execution", func(c *storeCheck) {
		rec := c.approved()
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil {
			c.Fatal(err)
		}
		if got, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil || got.ConsumedBy != "exe_a" {
			c.Errorf("repeating Consume for the same execution (a lost reply) must succeed: %+v, %v", got, err)
		}
	}},
	{"Consume/undecided, rejected and expired records are refused", func(c *storeCheck) {
		pending := c.create(storeDigest)
		_, err := c.s.Store.Consume(c.ctx, pending.ID, c.consumeReq("exe_a"))
		c.wantErr("a pending record", err, middleware.ErrApprovalPending)

		rejected := c.create(otherDigest)
		c.s.Store.Decide(c.ctx, rejected.ID, middleware.Decision{Approve: false, Approver: manager})
		req := c.consumeReq("exe_a")
		req.Digest = otherDigest
		_, err = c.s.Store.Consume(c.ctx, rejected.ID, req)
		c.wantErr("a rejected record", err, middleware.ErrApprovalRejected)

		_, err = c.s.Store.Decide(c.ctx, pending.ID, middleware.Decision{Approve: true, Approver: manager})
		if err != nil {
			c.Fatal(err)
		}
		c.s.Advance(16 * time.Minute)
		_, err = c.s.Store.Consume(c.ctx, pending.ID, c.consumeReq("exe_a"))
		c.wantErr("an approved record past its expiry", err, middleware.ErrApprovalExpired)
	}},
	{"Consume/another actor or audience learns nothing", func(c *storeCheck) {
		rec := c.approved()
		for name, mutate := range map[string]func(*middleware.ConsumeRequest){
			"another actor":    func(r *middleware.ConsumeRequest) { r.Actor = middleware.Actor{ID: "agent-2", Tenant: "acme"} },
			"another tenant":   func(r *middleware.ConsumeRequest) { r.Actor.Tenant = "other" },
			"another audience": func(r *middleware.ConsumeRequest) { r.Audience = "billing" },
		} {
			req := c.consumeReq("exe_x")
			mutate(&req)
			_, err := c.s.Store.Consume(c.ctx, rec.ID, req)
			c.wantErr(name+" must get APPROVAL_NOT_FOUND", err, middleware.ErrApprovalNotFound)
		}
		_, err := c.s.Store.Consume(c.ctx, middleware.NewApprovalID(), c.consumeReq("exe_x"))
		c.wantErr("an unknown id", err, middleware.ErrApprovalNotFound)
	}},
	{"Consume/a mismatch does not burn the record", func(c *storeCheck) {
		rec := c.approved()
		for name, tc := range map[string]struct {
			mutate func(*middleware.ConsumeRequest)
			want   error
		}{
			"another procedure": {func(r *middleware.ConsumeRequest) { r.Procedure = "/conformance.v1.Orders/Cancel" }, middleware.ErrApprovalResumeMismatch},
			"another type":      {func(r *middleware.ConsumeRequest) { r.Type = "director" }, middleware.ErrApprovalResumeMismatch},
			"another input":     {func(r *middleware.ConsumeRequest) { r.Digest = otherDigest }, middleware.ErrApprovalInputMismatch},
		} {
			req := c.consumeReq("exe_x")
			tc.mutate(&req)
			_, err := c.s.Store.Consume(c.ctx, rec.ID, req)
			c.wantErr(name, err, tc.want)
		}
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil {
			c.Errorf("after refused mismatches the record must still be consumable: %v", err)
		}
	}},
	{"Consume/concurrent consumers have exactly one winner", func(c *storeCheck) {
		rec := c.approved()
		const racers = 64
		var wins atomic.Int32
		var others sync.Map
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				_, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq(fmt.Sprintf("exe_%d", i)))
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, middleware.ErrApprovalConsumed):
				default:
					others.Store(i, err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			c.Errorf("exactly one of %d concurrent consumers must win, %d did", racers, wins.Load())
		}
		others.Range(func(k, v any) bool { c.Errorf("racer %v: %v, want APPROVAL_CONSUMED", k, v); return true })
	}},
	{"RecordOutcome/only the consuming execution records the outcome", func(c *storeCheck) {
		rec := c.approved()
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil {
			c.Fatal(err)
		}
		c.wantErr("another execution's outcome", c.s.Store.RecordOutcome(c.ctx, rec.ID, "exe_b", middleware.CodeOK), middleware.ErrApprovalNotFound)
		if err := c.s.Store.RecordOutcome(c.ctx, rec.ID, "exe_a", middleware.CodeOK); err != nil {
			c.Fatal(err)
		}
		got, _ := c.s.Store.Get(c.ctx, rec.ID)
		if got.Status != middleware.ApprovalCompleted || got.Outcome != middleware.CodeOK || got.OutcomeAt.IsZero() {
			c.Errorf("a recorded success must read completed: %+v", got)
		}
		failed := c.create(otherDigest)
		c.s.Store.Decide(c.ctx, failed.ID, middleware.Decision{Approve: true, Approver: manager})
		req := c.consumeReq("exe_c")
		req.Digest = otherDigest
		c.s.Store.Consume(c.ctx, failed.ID, req)
		c.s.Store.RecordOutcome(c.ctx, failed.ID, "exe_c", middleware.CodeTimeout)
		if got, _ := c.s.Store.Get(c.ctx, failed.ID); got.Status != middleware.ApprovalFailed || got.Outcome != middleware.CodeTimeout {
			c.Errorf("a recorded failure must read failed with its code: %+v", got)
		}
	}},
	{"RecordOutcome/no outcome after the lease reads in_doubt", func(c *storeCheck) {
		rec := c.approved()
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil {
			c.Fatal(err)
		}
		if s := c.status(rec.ID); s != middleware.ApprovalConsumed {
			c.Errorf("within its lease a consumed record reads %s, want consumed", s)
		}
		c.s.Advance(2 * time.Minute)
		if s := c.status(rec.ID); s != middleware.ApprovalInDoubt {
			c.Errorf("a consumed record without an outcome after its lease must read in_doubt (it may have run), got %s", s)
		}
		list, err := c.s.Store.List(c.ctx, middleware.ApprovalFilter{Status: middleware.ApprovalInDoubt})
		if err != nil || len(list) != 1 || list[0].ID != rec.ID {
			c.Errorf("List must report in_doubt records: %v, %v", list, err)
		}
	}},
	{"List/pending records, oldest first, within a limit", func(c *storeCheck) {
		var ids []string
		for i := range 3 {
			ids = append(ids, c.create(fmt.Sprintf("sha256:%064d", i)).ID)
			c.s.Advance(time.Second)
		}
		c.s.Store.Decide(c.ctx, ids[1], middleware.Decision{Approve: true, Approver: manager})
		list, err := c.s.Store.List(c.ctx, middleware.ApprovalFilter{Status: middleware.ApprovalPending})
		if err != nil || len(list) != 2 || list[0].ID != ids[0] || list[1].ID != ids[2] {
			c.Errorf("List(pending) must give the undecided records oldest first: %v, %v", recIDs(list), err)
		}
		list, _ = c.s.Store.List(c.ctx, middleware.ApprovalFilter{Limit: 1})
		if len(list) != 1 {
			c.Errorf("List must honour its limit: %d records", len(list))
		}
		list, _ = c.s.Store.List(c.ctx, middleware.ApprovalFilter{Audience: "elsewhere"})
		if len(list) != 0 {
			c.Errorf("List must filter by audience: %d records", len(list))
		}
	}},
}

func recIDs(rs []middleware.ApprovalRecord) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}
