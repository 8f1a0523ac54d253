package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// StoreUnderTest is one fresh, empty store for [RunStore], with a way to
// move its clock.
type StoreUnderTest struct {
	Store store.ApprovalStore
	// Advance moves the clock the store decides expiry with forward by d.
	// Required, like Store: the suite refuses a store under test without it.
	Advance func(d time.Duration)
	// MaxPending is the store's cap on pending records per requester, or 0
	// to skip the cap's subtest.
	MaxPending int
	// Retention is how long the store keeps a record after its expiry or
	// lease; the rules that make a store forget records move the clock past
	// it. Zero means 24 hours.
	Retention time.Duration
}

// RunStore checks the [store.ApprovalStore] contract: one named
// subtest per rule, each on a fresh store from open. A failure message
// names the rule it checks.
func RunStore(t *testing.T, open func(t *testing.T) StoreUnderTest) {
	t.Helper()
	for _, r := range storeRules {
		t.Run(r.name, func(t *testing.T) {
			s := open(t)
			if l := s.lacks(); l != "" {
				t.Fatalf("conformance: RunStore's open returned no %s: every rule needs a fresh store and a hook that moves its clock", l)
			}
			if s.Retention <= 0 {
				s.Retention = 24 * time.Hour
			}
			r.check(&storeCheck{T: t, s: s, ctx: t.Context()})
		})
	}
}

// lacks names the first field a rule cannot do without that s leaves
// nil, or "".
func (s StoreUnderTest) lacks() string {
	switch {
	case s.Store == nil:
		return "Store"
	case s.Advance == nil:
		return "Advance"
	}
	return ""
}

type storeCheck struct {
	*testing.T
	s   StoreUnderTest
	ctx context.Context
}

var (
	requester = store.Actor{ID: "agent-1", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"user-alice"}}
	manager   = store.Actor{ID: "manager-bob", Tenant: "acme", Kind: "user"}
	manager2  = store.Actor{ID: "manager-carol", Tenant: "acme", Kind: "user"}
	manager3  = store.Actor{ID: "manager-dave", Tenant: "acme", Kind: "user"}
)

const (
	storeAudience = "orders"
	storeProc     = "/conformance.v1.Orders/Refund"
	storeType     = "manager"
	storeDigest   = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	otherDigest   = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// The preview digests of two states of what a call would change, and the
// text approvers see of the first.
const (
	previewA    = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	previewB    = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	previewText = "refund 120.00 EUR of order 42 to card ****1234 (paid 150.00 EUR on 30 Nov)"
)

// previewed returns a new request of storeDigest with a preview of state
// digest.
func (c *storeCheck) previewed(digest string) store.ApprovalRequest {
	req := c.request(storeDigest)
	req.PreviewText, req.PreviewDigest = previewText, digest
	return req
}

// approvedPreview returns an approved record with a preview of previewA.
func (c *storeCheck) approvedPreview() store.ApprovalRecord {
	c.Helper()
	rec := c.createReq(c.previewed(previewA))
	if _, _, err := c.decide(rec.ID, vote(true, manager, "ok")); err != nil {
		c.Fatalf("Decide: %v", err)
	}
	return rec
}

// resumeAt is a consume request whose preview computed digest.
func (c *storeCheck) resumeAt(execution, digest string) store.ConsumeRequest {
	req := c.consumeReq(execution)
	req.PreviewDigest = digest
	return req
}

// digestN is the n-th of a series of distinct digests.
func digestN(n int) string { return fmt.Sprintf("sha256:%064d", n) }

// request returns a new request for the requester with a fresh id.
func (c *storeCheck) request(digest string) store.ApprovalRequest {
	return store.ApprovalRequest{
		ID: store.NewApprovalID(), Audience: storeAudience, Procedure: storeProc, Type: storeType, Requester: requester,
		RequestedBy: "exe_requester", Digest: digest, View: "refund 120.00 EUR on order 42", Reasons: []string{"amount over 100"},
		SideEffect: "write", Risk: "high", ExpiresIn: 15 * time.Minute,
	}
}

func (c *storeCheck) createReq(req store.ApprovalRequest) store.ApprovalRecord {
	c.Helper()
	rec, err := c.s.Store.Create(c.ctx, req)
	if err != nil {
		c.Fatalf("Create: %v", err)
	}
	return rec
}

func (c *storeCheck) create(digest string) store.ApprovalRecord {
	c.Helper()
	return c.createReq(c.request(digest))
}

// quorum creates a pending record of digest that needs n approvers.
func (c *storeCheck) quorum(digest string, n int) store.ApprovalRecord {
	c.Helper()
	req := c.request(digest)
	req.Quorum = n
	return c.createReq(req)
}

// vote is a decision of the store's audience.
func vote(approve bool, approver store.Actor, comment string) store.Decision {
	return store.Decision{Approve: approve, Approver: approver, Comment: comment, Audience: storeAudience}
}

func (c *storeCheck) decide(id string, d store.Decision) (store.ApprovalRecord, bool, error) {
	return c.s.Store.Decide(c.ctx, id, d)
}

func (c *storeCheck) approved() store.ApprovalRecord {
	c.Helper()
	rec := c.create(storeDigest)
	if _, _, err := c.decide(rec.ID, vote(true, manager, "ok")); err != nil {
		c.Fatalf("Decide: %v", err)
	}
	return rec
}

func (c *storeCheck) consumeReq(execution string) store.ConsumeRequest {
	return store.ConsumeRequest{Audience: storeAudience, Procedure: storeProc, Type: storeType, Actor: requester, Digest: storeDigest, ExecutionID: execution, Lease: time.Minute}
}

// consumed returns an approved record consumed by execution.
func (c *storeCheck) consumed(execution string) store.ApprovalRecord {
	c.Helper()
	rec := c.approved()
	if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq(execution)); err != nil {
		c.Fatalf("Consume: %v", err)
	}
	return rec
}

func (c *storeCheck) get(id string) store.ApprovalRecord {
	c.Helper()
	rec, err := c.s.Store.Get(c.ctx, id)
	if err != nil {
		c.Fatalf("Get(%s): %v", id, err)
	}
	return rec
}

func (c *storeCheck) status(id string) store.ApprovalStatus {
	c.Helper()
	return c.get(id).Status
}

func (c *storeCheck) wantErr(rule string, err, want error) {
	c.Helper()
	if !errors.Is(err, want) {
		c.Errorf("%s: got error %v, want %v", rule, err, want)
	}
}

// mine is the filter of the requester's audience and tenant.
func mine(status store.ApprovalStatus) store.ApprovalFilter {
	return store.ApprovalFilter{Audience: storeAudience, Tenant: requester.Tenant, Status: status}
}

var storeRules = []struct {
	name  string
	check func(c *storeCheck)
}{
	{"Create/stores a pending record stamped with the store's clock", func(c *storeCheck) {
		req := c.request(storeDigest)
		req.Quorum = 2
		rec, err := c.s.Store.Create(c.ctx, req)
		if err != nil {
			c.Fatal(err)
		}
		if rec.ID != req.ID || rec.Status != store.ApprovalPending || rec.RequestedAt.IsZero() || !rec.ExpiresAt.Equal(rec.RequestedAt.Add(req.ExpiresIn)) {
			c.Errorf("a new record must be pending with ExpiresAt = RequestedAt + ExpiresIn: %+v", rec)
		}
		got, err := c.s.Store.Get(c.ctx, rec.ID)
		if err != nil || !store.SameActor(got.Requester, requester) || got.Digest != storeDigest || got.View != req.View || len(got.Reasons) != 1 ||
			got.Type != storeType || got.Procedure != storeProc || got.Risk != "high" || got.SideEffect != "write" ||
			got.RequestedBy != "exe_requester" || got.Audience != storeAudience || got.Quorum != 2 || got.ExpiresIn != req.ExpiresIn {
			c.Errorf("Get must return every field Create stored: %+v, %v", got, err)
		}
		if len(got.Votes) != 0 || got.Approver.ID != "" || !got.DecidedAt.IsZero() || got.ConsumedBy != "" || got.Outcome != (store.Outcome{}) {
			c.Errorf("a new record has no votes, decision, consumer or outcome: %+v", got)
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
		// An actor with nothing but an id: no tenant, kind or chain.
		bare := c.request(storeDigest)
		bare.Requester = store.Actor{ID: "agent-bare"}
		if a, b := c.createReq(bare), c.createReq(bare); a.ID != b.ID {
			c.Errorf("a repeat of a pending call returns the same record, for an actor with no tenant, kind or chain too: %s != %s", a.ID, b.ID)
		}
	}},
	{"Create/a repeat by another whole actor is another request", func(c *storeCheck) {
		first := c.create(storeDigest)
		for name, a := range map[string]store.Actor{
			"acting for someone else": {ID: requester.ID, Tenant: requester.Tenant, Kind: requester.Kind, OnBehalfOf: []string{"user-carol"}},
			"acting for nobody":       {ID: requester.ID, Tenant: requester.Tenant, Kind: requester.Kind},
			"of another kind":         {ID: requester.ID, Tenant: requester.Tenant, Kind: "service", OnBehalfOf: requester.OnBehalfOf},
			"in another tenant":       {ID: requester.ID, Tenant: "globex", Kind: requester.Kind, OnBehalfOf: requester.OnBehalfOf},
		} {
			req := c.request(storeDigest)
			req.Requester = a
			rec := c.createReq(req)
			if rec.ID == first.ID || !store.SameActor(rec.Requester, a) {
				c.Errorf("a repeat by another whole actor is another request: the requester %s got the original requester's record %s", name, first.ID)
			}
		}
		if again := c.create(storeDigest); again.ID != first.ID {
			c.Errorf("a repeat by another whole actor is another request: the original requester's repeat must still get %s, got %s", first.ID, again.ID)
		}
	}},
	{"Create/pending records per requester are capped", func(c *storeCheck) {
		if c.s.MaxPending == 0 {
			c.Skip("the harness sets no cap")
		}
		for i := range c.s.MaxPending {
			c.create(digestN(i))
		}
		_, err := c.s.Store.Create(c.ctx, c.request(digestN(c.s.MaxPending)))
		c.wantErr("pending records per actor are capped", err, store.ErrTooManyPending)
	}},
	{"Create/refuses a malformed request and stores nothing", func(c *storeCheck) {
		bad := map[string]func(r *store.ApprovalRequest){
			"a malformed id":    func(r *store.ApprovalRequest) { r.ID = "apr_not-hex" },
			"no expiry":         func(r *store.ApprovalRequest) { r.ExpiresIn = 0 },
			"no requester":      func(r *store.ApprovalRequest) { r.Requester = store.Actor{} },
			"a negative quorum": func(r *store.ApprovalRequest) { r.Quorum = -1 },
		}
		for what, spoil := range bad {
			req := c.request(storeDigest)
			spoil(&req)
			if _, err := c.s.Store.Create(c.ctx, req); err == nil {
				c.Errorf("Create stored a request with %s", what)
			}
		}
		if list, err := c.s.Store.List(c.ctx, mine(0)); err != nil || len(list) != 0 {
			c.Errorf("after refused requests List returned %d records, %v; want none", len(list), err)
		}
	}},
	{"Create/keeps the preview's text and digest", func(c *storeCheck) {
		rec := c.createReq(c.previewed(previewA))
		if got := c.get(rec.ID); got.PreviewText != previewText || got.PreviewDigest != previewA {
			c.Errorf("Get must return the preview's text and digest as Create stored them: %q, %q", got.PreviewText, got.PreviewDigest)
		}
		list, err := c.s.Store.List(c.ctx, mine(store.ApprovalPending))
		if err != nil || len(list) != 1 || list[0].PreviewText != previewText || list[0].PreviewDigest != previewA {
			c.Errorf("List must show approvers the preview's text: %+v, %v", list, err)
		}
		plain := c.create(otherDigest)
		if got := c.get(plain.ID); got.PreviewText != "" || got.PreviewDigest != "" {
			c.Errorf("a record without a preview has none: %q, %q", got.PreviewText, got.PreviewDigest)
		}
	}},
	{"Create/a changed preview is a new request", func(c *storeCheck) {
		first := c.createReq(c.previewed(previewA))
		if again := c.createReq(c.previewed(previewA)); again.ID != first.ID {
			c.Errorf("a repeat of a pending call with the same preview returns the same record: %s != %s", again.ID, first.ID)
		}
		changed := c.createReq(c.previewed(previewB))
		if changed.ID == first.ID || changed.PreviewDigest != previewB {
			c.Errorf("a changed preview is a new request: the call with preview B got %s (%s), the one with preview A %s", changed.ID, changed.PreviewDigest, first.ID)
		}
		if plain := c.create(storeDigest); plain.ID == first.ID || plain.ID == changed.ID {
			c.Errorf("a request without a preview is not the same call as one with: %s", plain.ID)
		}
		if again := c.createReq(c.previewed(previewB)); again.ID != changed.ID {
			c.Errorf("a changed preview is a new request, and a repeat of it returns that one: %s != %s", again.ID, changed.ID)
		}
	}},
	{"Get/an unknown id is not found", func(c *storeCheck) {
		_, err := c.s.Store.Get(c.ctx, store.NewApprovalID())
		c.wantErr("an unknown id is not found", err, store.ErrApprovalNotFound)
	}},
	{"Get/returns the payload, List never does", func(c *storeCheck) {
		payload := []byte("sealed\x00arguments\xff\n{}")
		req := c.request(storeDigest)
		req.Payload = payload
		rec := c.createReq(req)
		if got := c.get(rec.ID); !bytes.Equal(got.Payload, payload) {
			c.Errorf("Get must return the payload byte for byte: %q, want %q", got.Payload, payload)
		}
		list, err := c.s.Store.List(c.ctx, mine(0))
		if err != nil || len(list) != 1 || list[0].ID != rec.ID {
			c.Fatalf("List: %v, %v", recIDs(list), err)
		}
		if list[0].Payload != nil {
			c.Errorf("List must never return the payload: %q", list[0].Payload)
		}
	}},
	{"Decide/records approver, comment and time", func(c *storeCheck) {
		rec := c.create(storeDigest)
		got, changed, err := c.decide(rec.ID, vote(true, manager, "fine"))
		if err != nil || !changed || got.Status != store.ApprovalApproved || !store.SameActor(got.Approver, manager) || got.Comment != "fine" || got.DecidedAt.IsZero() {
			c.Errorf("an approval must record approver, comment and time, and report a change: %+v, %v, %v", got, changed, err)
		}
		if len(got.Votes) != 1 || !got.Votes[0].Approve || got.Votes[0].Approver.ID != manager.ID || got.Votes[0].Comment != "fine" || !got.Votes[0].At.Equal(got.DecidedAt) {
			c.Errorf("an approval must be recorded as the record's one vote: %+v", got.Votes)
		}
		if s := c.status(rec.ID); s != store.ApprovalApproved {
			c.Errorf("after approval Get says %s", s)
		}
		rej := c.create(otherDigest)
		if got, changed, err := c.decide(rej.ID, vote(false, manager, "no")); err != nil || !changed || got.Status != store.ApprovalRejected || got.Comment != "no" {
			c.Errorf("a rejection must be recorded: %+v, %v, %v", got, changed, err)
		}
	}},
	{"Decide/self-approval is refused", func(c *storeCheck) {
		rec := c.create(storeDigest)
		for _, a := range []store.Actor{
			requester,
			{ID: "user-alice", Tenant: "acme"}, // the requester acts for her
			{ID: "agent-9", Tenant: "acme", OnBehalfOf: []string{"user-alice"}}, // acts for the same person
			{ID: "agent-8", Tenant: "acme", OnBehalfOf: []string{requester.ID}}, // acts for the requester
		} {
			_, _, err := c.decide(rec.ID, vote(true, a, ""))
			c.wantErr("the requester and its OnBehalfOf chain may not approve", err, store.ErrSelfApproval)
		}
		_, _, err := c.decide(rec.ID, vote(true, store.Actor{ID: "manager-eve", Tenant: "other"}, ""))
		c.wantErr("an approver in another tenant may not approve", err, store.ErrApproverNotAllowed)
		if got := c.get(rec.ID); got.Status != store.ApprovalPending || len(got.Votes) != 0 {
			c.Errorf("a refused decision must change nothing, record is %s with %d votes", got.Status, len(got.Votes))
		}
	}},
	{"Decide/the same decision again is a no-op", func(c *storeCheck) {
		rec := c.approved()
		got, changed, err := c.decide(rec.ID, vote(true, manager, "again"))
		if err != nil || changed || got.Status != store.ApprovalApproved || got.Comment != "ok" || len(got.Votes) != 1 {
			c.Errorf("the same decision by the same approver must be a no-op that reports no change: %+v, changed=%v, %v", got, changed, err)
		}
		rej := c.create(otherDigest)
		c.decide(rej.ID, vote(false, manager, "no"))
		if got, changed, err := c.decide(rej.ID, vote(false, manager, "no")); err != nil || changed || got.Status != store.ApprovalRejected {
			c.Errorf("the same rejection by the same approver must be a no-op that reports no change: %+v, changed=%v, %v", got, changed, err)
		}
	}},
	{"Decide/a repeated vote reports no change", func(c *storeCheck) {
		rec := c.quorum(storeDigest, 2)
		if _, changed, err := c.decide(rec.ID, vote(true, manager, "first")); err != nil || !changed {
			c.Fatalf("a first vote: changed=%v, %v", changed, err)
		}
		for range 2 {
			got, changed, err := c.decide(rec.ID, vote(true, manager, "again"))
			if err != nil || changed || got.Status != store.ApprovalPending || len(got.Votes) != 1 || got.Votes[0].Comment != "first" {
				c.Errorf("a repeated vote is a no-op that reports no change (the engine emits nothing for it): %+v, changed=%v, %v", got, changed, err)
			}
		}
	}},
	{"Decide/a quorum approves at the N-th distinct approver", func(c *storeCheck) {
		rec := c.quorum(storeDigest, 3)
		req := c.consumeReq("exe_a")
		req.Quorum = 3
		for i, a := range []store.Actor{manager, manager2} {
			got, changed, err := c.decide(rec.ID, vote(true, a, a.ID))
			if err != nil || !changed || got.Status != store.ApprovalPending || len(got.Votes) != i+1 || got.Approver.ID != "" || !got.DecidedAt.IsZero() {
				c.Errorf("a quorum approves at the N-th distinct approver: after vote %d of 3 the record must stay pending with %d votes and no decider: %+v, %v, %v", i+1, i+1, got, changed, err)
			}
			_, err = c.s.Store.Consume(c.ctx, rec.ID, req)
			c.wantErr("a quorum approves at the N-th distinct approver: consuming before the quorum", err, store.ErrApprovalPending)
		}
		got, changed, err := c.decide(rec.ID, vote(true, manager3, "third"))
		if err != nil || !changed || got.Status != store.ApprovalApproved || !store.SameActor(got.Approver, manager3) || got.Comment != "third" || got.DecidedAt.IsZero() {
			c.Errorf("a quorum approves at the N-th distinct approver, whose vote decides: %+v, %v, %v", got, changed, err)
		}
		if len(got.Votes) != 3 || got.Votes[0].Approver.ID != manager.ID || got.Votes[1].Approver.ID != manager2.ID || got.Votes[2].Approver.ID != manager3.ID {
			c.Errorf("a quorum approves at the N-th distinct approver: the votes must be kept oldest first: %+v", got.Votes)
		}
		if !c.get(rec.ID).DecidedAt.Equal(got.Votes[2].At) {
			c.Errorf("a quorum approves at the N-th distinct approver: DecidedAt must be the deciding vote's time")
		}
	}},
	{"Decide/one rejection rejects under a quorum", func(c *storeCheck) {
		rec := c.quorum(storeDigest, 3)
		c.decide(rec.ID, vote(true, manager, "yes"))
		got, changed, err := c.decide(rec.ID, vote(false, manager2, "no"))
		if err != nil || !changed || got.Status != store.ApprovalRejected || got.Approver.ID != manager2.ID || got.Comment != "no" || len(got.Votes) != 2 || got.Votes[1].Approve {
			c.Errorf("one rejection rejects under a quorum, and is recorded as the deciding vote: %+v, %v, %v", got, changed, err)
		}
		_, _, err = c.decide(rec.ID, vote(true, manager3, ""))
		c.wantErr("one rejection rejects under a quorum: a later vote", err, store.ErrNotPending)
		req := c.consumeReq("exe_a")
		req.Quorum = 3
		_, err = c.s.Store.Consume(c.ctx, rec.ID, req)
		c.wantErr("one rejection rejects under a quorum: consuming", err, store.ErrApprovalRejected)
	}},
	{"Decide/one party votes once under a quorum", func(c *storeCheck) {
		rec := c.quorum(storeDigest, 3)
		erin := store.Actor{ID: "manager-erin", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"manager-frank"}}
		if _, _, err := c.decide(rec.ID, vote(true, manager, "")); err != nil {
			c.Fatal(err)
		}
		if _, _, err := c.decide(rec.ID, vote(true, erin, "")); err != nil {
			c.Fatal(err)
		}
		for name, d := range map[string]store.Decision{
			"the same id as another actor":         vote(true, store.Actor{ID: manager.ID, Tenant: "acme", Kind: "agent"}, ""),
			"acting for an earlier voter":          vote(true, store.Actor{ID: "agent-3", Tenant: "acme", OnBehalfOf: []string{manager.ID}}, ""),
			"someone an earlier voter acts for":    vote(true, store.Actor{ID: "manager-frank", Tenant: "acme"}, ""),
			"an earlier voter changing their mind": vote(false, manager, ""),
		} {
			_, _, err := c.decide(rec.ID, d)
			c.wantErr("one party votes once under a quorum: "+name, err, store.ErrAlreadyVoted)
		}
		if got := c.get(rec.ID); got.Status != store.ApprovalPending || len(got.Votes) != 2 {
			c.Errorf("one party votes once under a quorum: refused votes must change nothing: %s with %d votes", got.Status, len(got.Votes))
		}
		if got, _, err := c.decide(rec.ID, vote(true, manager3, "")); err != nil || got.Status != store.ApprovalApproved {
			c.Errorf("one party votes once under a quorum: a third distinct party approves: %+v, %v", got, err)
		}
	}},
	{"Decide/two delegates of one person are one approver", func(c *storeCheck) {
		// An actor's principals are its ID and every OnBehalfOf entry; two
		// voters are distinct only when their principal sets are disjoint.
		// A later voter who shares a principal with a counted one is that
		// person voting again: refused, as a person voting twice is.
		rec := c.quorum(storeDigest, 2)
		first := store.Actor{ID: "assistant-1", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"manager-carol"}}
		if _, changed, err := c.decide(rec.ID, vote(true, first, "for carol")); err != nil || !changed {
			c.Fatalf("two delegates of one person are one approver: the first delegate's vote must count: changed=%v, %v", changed, err)
		}
		for _, tc := range []struct {
			name    string
			voter   store.Actor
			approve bool
		}{
			{"another assistant acting for carol", store.Actor{ID: "assistant-2", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"manager-carol"}}, true},
			{"carol further down another chain", store.Actor{ID: "assistant-3", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"team-lead", "manager-carol"}}, true},
			{"another assistant rejecting for carol", store.Actor{ID: "assistant-4", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"manager-carol"}}, false},
			{"carol's own session after her assistant", store.Actor{ID: "manager-carol", Tenant: "acme", Kind: "user"}, true},
		} {
			got, changed, err := c.decide(rec.ID, vote(tc.approve, tc.voter, "for carol again"))
			c.wantErr("two delegates of one person are one approver: "+tc.name, err, store.ErrAlreadyVoted)
			if changed || (err == nil && len(got.Votes) != 1) {
				c.Errorf("two delegates of one person are one approver: %s counted: %s with %d votes, changed=%v", tc.name, got.Status, len(got.Votes), changed)
			}
		}
		if got := c.get(rec.ID); got.Status != store.ApprovalPending || len(got.Votes) != 1 {
			c.Errorf("two delegates of one person are one approver: carol alone must not reach a quorum of 2: %s with %d votes", got.Status, len(got.Votes))
		}
		if got, changed, err := c.decide(rec.ID, vote(true, first, "again")); err != nil || changed || len(got.Votes) != 1 {
			c.Errorf("two delegates of one person are one approver: the counted delegate repeating its vote is a no-op: %+v, changed=%v, %v", got, changed, err)
		}
		other := store.Actor{ID: "assistant-5", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"manager-dave"}}
		if got, changed, err := c.decide(rec.ID, vote(true, other, "for dave")); err != nil || !changed || got.Status != store.ApprovalApproved {
			c.Errorf("two delegates of one person are one approver: a delegate of another person is a second approver: %+v, changed=%v, %v", got, changed, err)
		}
	}},
	{"Decide/one party votes once whatever bytes its id holds", func(c *storeCheck) {
		// Ids are the application's strings, not always UTF-8 (a header
		// value may carry any byte): a store that compares voters through
		// an encoding that replaces invalid bytes must still know one
		// approver from another, and the same approver from itself.
		rec := c.quorum(storeDigest, 2)
		odd := store.Actor{ID: "manager-\xff", Tenant: "acme", Kind: "user", OnBehalfOf: []string{"boss-\xfe"}}
		if _, _, err := c.decide(rec.ID, vote(true, odd, "")); err != nil {
			if !errors.Is(err, store.ErrApproverNotAllowed) {
				c.Fatalf("one party votes once whatever bytes its id holds: a first vote may count or be refused as not allowed, got %v", err)
			}
			return // the store refuses such approvers outright
		}
		for _, d := range []store.Decision{vote(true, odd, "again"), vote(false, odd, "changed my mind")} {
			got, changed, err := c.decide(rec.ID, d)
			if changed || (err == nil && (got.Status != store.ApprovalPending || len(got.Votes) != 1)) {
				c.Errorf("one party votes once whatever bytes its id holds: a second vote by the same approver counted: %+v, changed=%v, %v", got, changed, err)
			}
		}
		if got := c.get(rec.ID); got.Status != store.ApprovalPending || len(got.Votes) != 1 {
			c.Errorf("one party votes once whatever bytes its id holds: one approver alone must not reach a quorum of 2: %s with %d votes", got.Status, len(got.Votes))
		}
		for _, a := range []store.Actor{
			{ID: "agent-3", Tenant: "acme", OnBehalfOf: []string{odd.ID}}, // acts for the voter
			{ID: "boss-\xfe", Tenant: "acme"},                             // the voter acts for them
		} {
			_, _, err := c.decide(rec.ID, vote(true, a, ""))
			c.wantErr("one party votes once whatever bytes its id holds: "+a.ID, err, store.ErrSelfApproval)
		}
		if _, _, err := c.decide(rec.ID, vote(true, store.Actor{ID: "manager-\xfe", Tenant: "acme", Kind: "user"}, "")); err != nil {
			c.Errorf("one party votes once whatever bytes its id holds: another id is another approver: %v", err)
		}
	}},
	{"Decide/concurrent voters of one party are admitted once", func(c *storeCheck) {
		pairs := map[string][2]store.Actor{
			"one in the other's chain": {manager, {ID: "agent-3", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{manager.ID}}},
			"one id, two actors":       {manager, {ID: manager.ID, Tenant: "acme", Kind: "agent"}},
			"two delegates of one person": {
				{ID: "assistant-1", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{manager2.ID}},
				{ID: "assistant-2", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"team-lead", manager2.ID}},
			},
		}
		for name, pair := range pairs {
			for round := range 10 {
				rec := c.quorum(digestN(round), 2)
				var admitted atomic.Int32
				errs := make([]error, 2)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i, a := range pair {
					wg.Go(func() {
						<-start
						var changed bool
						_, changed, errs[i] = c.decide(rec.ID, vote(true, a, ""))
						if changed {
							admitted.Add(1)
						}
					})
				}
				close(start)
				wg.Wait()
				got := c.get(rec.ID)
				if admitted.Load() != 1 || got.Status != store.ApprovalPending || len(got.Votes) != 1 {
					c.Errorf("concurrent voters of one party are admitted once (%s): %d admitted, record %s with %d votes (errors %v)", name, admitted.Load(), got.Status, len(got.Votes), errs)
				}
				for _, err := range errs {
					if err != nil && !errors.Is(err, store.ErrAlreadyVoted) {
						c.Errorf("concurrent voters of one party are admitted once (%s): the other must get ErrAlreadyVoted, got %v", name, err)
					}
				}
				c.s.Advance(16 * time.Minute) // the next round's cap
			}
		}
	}},
	{"Decide/another audience's record is not found", func(c *storeCheck) {
		rec := c.create(storeDigest)
		d := vote(true, manager, "")
		d.Audience = "billing"
		_, _, err := c.decide(rec.ID, d)
		c.wantErr("another audience's record is not found", err, store.ErrApprovalNotFound)
		if got := c.get(rec.ID); got.Status != store.ApprovalPending || len(got.Votes) != 0 {
			c.Errorf("another audience's record is not found: the vote must change nothing: %+v", got)
		}
	}},
	{"Decide/only pending records are decided", func(c *storeCheck) {
		rec := c.approved()
		_, _, err := c.decide(rec.ID, vote(false, manager, ""))
		c.wantErr("a decided record cannot be decided otherwise", err, store.ErrNotPending)
		_, _, err = c.decide(rec.ID, vote(true, manager2, ""))
		c.wantErr("a decided record cannot be decided by someone else", err, store.ErrNotPending)
		if s := c.status(rec.ID); s != store.ApprovalApproved {
			c.Errorf("a refused decision changed the record to %s", s)
		}
		_, _, err = c.decide(store.NewApprovalID(), vote(true, manager, ""))
		c.wantErr("deciding an unknown id", err, store.ErrApprovalNotFound)
	}},
	{"Decide/an expired record cannot be decided", func(c *storeCheck) {
		rec := c.create(storeDigest)
		c.s.Advance(16 * time.Minute)
		_, _, err := c.decide(rec.ID, vote(true, manager, ""))
		c.wantErr("a record past its expiry cannot be decided", err, store.ErrApprovalExpired)
		if s := c.status(rec.ID); s != store.ApprovalExpired {
			c.Errorf("a pending record past its expiry must read expired, got %s", s)
		}
	}},
	{"Decide/survives a concurrent sweep", func(c *storeCheck) {
		// Deciders race Creates that move the clock past the retention, so
		// that the store may forget the record while Decide works on it:
		// Decide must answer, never panic.
		const rounds, records, deciders = 60, 8, 6
		for round := range rounds {
			ids := make([]string, records)
			for i := range ids {
				ids[i] = c.create(digestN(1000*round + i)).ID
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			failures := make(chan string, deciders+1)
			guard := func(f func()) {
				defer func() {
					if p := recover(); p != nil {
						failures <- fmt.Sprintf("panic: %v", p)
					}
				}()
				<-start
				f()
			}
			for d := range deciders {
				approver := store.Actor{ID: fmt.Sprintf("manager-%d", d), Tenant: "acme"}
				wg.Go(func() {
					guard(func() {
						for _, id := range ids {
							_, _, err := c.decide(id, vote(true, approver, ""))
							if err != nil && !errors.Is(err, store.ErrApprovalNotFound) && !errors.Is(err, store.ErrApprovalExpired) && !errors.Is(err, store.ErrNotPending) {
								failures <- fmt.Sprintf("Decide: %v", err)
								return
							}
						}
					})
				})
			}
			wg.Go(func() {
				guard(func() {
					for i := range records {
						c.s.Advance(c.s.Retention + time.Hour)
						if _, err := c.s.Store.Create(c.ctx, c.request(digestN(1000*round+records+i))); err != nil {
							failures <- fmt.Sprintf("Create: %v", err)
							return
						}
					}
				})
			})
			close(start)
			wg.Wait()
			close(failures)
			for f := range failures {
				c.Fatalf("Decide survives a concurrent sweep: round %d: %s; want a clean answer (approved, not found, expired or not pending)", round, f)
			}
		}
	}},
	{"Consume/an approved record is consumed by one execution", func(c *storeCheck) {
		rec := c.approved()
		got, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a"))
		if err != nil || got.ID != rec.ID || got.Type != storeType {
			c.Fatalf("consuming an approved record: %+v, %v", got, err)
		}
		if r := c.get(rec.ID); r.Status != store.ApprovalConsumed || r.ConsumedBy != "exe_a" || r.ConsumedAt.IsZero() || !r.LeaseUntil.Equal(r.ConsumedAt.Add(time.Minute)) {
			c.Errorf("a consumed record names its execution and lease: %+v", r)
		}
		_, err = c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_b"))
		c.wantErr("a second execution must get APPROVAL_CONSUMED", err, store.ErrApprovalConsumed)
	}},
	{"Consume/returns the deciding vote", func(c *storeCheck) {
		rec := c.quorum(storeDigest, 2)
		c.decide(rec.ID, vote(true, manager, "first"))
		decided, _, err := c.decide(rec.ID, vote(true, manager2, "second"))
		if err != nil {
			c.Fatal(err)
		}
		req := c.consumeReq("exe_a")
		req.Quorum = 2
		want := store.ConsumedApproval{ID: rec.ID, Type: storeType, Approver: manager2, Comment: "second", DecidedAt: decided.DecidedAt}
		for _, what := range []string{"consuming", "consuming again (a lost reply)"} {
			got, err := c.s.Store.Consume(c.ctx, rec.ID, req)
			if err != nil || got.ID != want.ID || got.Type != want.Type || !store.SameActor(got.Approver, want.Approver) || got.Comment != want.Comment || !got.DecidedAt.Equal(want.DecidedAt) {
				c.Errorf("Consume returns the deciding vote (%s): %+v, %v; want %+v", what, got, err, want)
			}
		}
	}},
	{"Consume/is idempotent per execution", func(c *storeCheck) {
		rec := c.approved()
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil {
			c.Fatal(err)
		}
		if got, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil || got.ID != rec.ID || c.get(rec.ID).ConsumedBy != "exe_a" {
			c.Errorf("repeating Consume for the same execution (a lost reply) must succeed: %+v, %v", got, err)
		}
	}},
	{"Consume/undecided, rejected and expired records are refused", func(c *storeCheck) {
		pending := c.create(storeDigest)
		_, err := c.s.Store.Consume(c.ctx, pending.ID, c.consumeReq("exe_a"))
		c.wantErr("a pending record", err, store.ErrApprovalPending)

		rejected := c.create(otherDigest)
		c.decide(rejected.ID, vote(false, manager, ""))
		req := c.consumeReq("exe_a")
		req.Digest = otherDigest
		_, err = c.s.Store.Consume(c.ctx, rejected.ID, req)
		c.wantErr("a rejected record", err, store.ErrApprovalRejected)

		if _, _, err = c.decide(pending.ID, vote(true, manager, "")); err != nil {
			c.Fatal(err)
		}
		c.s.Advance(16 * time.Minute)
		_, err = c.s.Store.Consume(c.ctx, pending.ID, c.consumeReq("exe_a"))
		c.wantErr("an approved record past its expiry", err, store.ErrApprovalExpired)
	}},
	{"Consume/another actor or audience learns nothing", func(c *storeCheck) {
		rec := c.approved()
		for name, mutate := range map[string]func(*store.ConsumeRequest){
			"another actor":    func(r *store.ConsumeRequest) { r.Actor = store.Actor{ID: "agent-2", Tenant: "acme"} },
			"another tenant":   func(r *store.ConsumeRequest) { r.Actor.Tenant = "other" },
			"another audience": func(r *store.ConsumeRequest) { r.Audience = "billing" },
		} {
			req := c.consumeReq("exe_x")
			mutate(&req)
			_, err := c.s.Store.Consume(c.ctx, rec.ID, req)
			c.wantErr(name+" must get APPROVAL_NOT_FOUND", err, store.ErrApprovalNotFound)
		}
		_, err := c.s.Store.Consume(c.ctx, store.NewApprovalID(), c.consumeReq("exe_x"))
		c.wantErr("an unknown id", err, store.ErrApprovalNotFound)
	}},
	{"Consume/only the whole requesting actor consumes", func(c *storeCheck) {
		rec := c.approved()
		for name, a := range map[string]store.Actor{
			"the session acting for someone else": {ID: requester.ID, Tenant: requester.Tenant, Kind: requester.Kind, OnBehalfOf: []string{"user-bob"}},
			"the session acting for nobody":       {ID: requester.ID, Tenant: requester.Tenant, Kind: requester.Kind},
			"a longer chain":                      {ID: requester.ID, Tenant: requester.Tenant, Kind: requester.Kind, OnBehalfOf: []string{"user-alice", "user-bob"}},
			"another kind":                        {ID: requester.ID, Tenant: requester.Tenant, Kind: "service", OnBehalfOf: requester.OnBehalfOf},
		} {
			req := c.consumeReq("exe_x")
			req.Actor = a
			_, err := c.s.Store.Consume(c.ctx, rec.ID, req)
			c.wantErr("only the whole requesting actor consumes: "+name+" must get APPROVAL_NOT_FOUND", err, store.ErrApprovalNotFound)
		}
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil {
			c.Errorf("only the whole requesting actor consumes: the requester itself must still consume after the refusals: %v", err)
		}
	}},
	{"Consume/the whole actor is compared byte for byte", func(c *storeCheck) {
		// Two sessions of one agent, acting for people whose ids differ
		// only in bytes that are not UTF-8: a store that compares chains
		// through an encoding that replaces invalid bytes would take one
		// for the other.
		forB := store.Actor{ID: requester.ID, Tenant: requester.Tenant, Kind: requester.Kind, OnBehalfOf: []string{"user-\xfe"}}
		forA := forB
		forA.OnBehalfOf = []string{"user-\xff"}
		req := c.request(storeDigest)
		req.Requester = forA
		rec, err := c.s.Store.Create(c.ctx, req)
		if err != nil {
			return // the store refuses such requesters outright
		}
		if _, _, err := c.decide(rec.ID, vote(true, manager, "")); err != nil {
			c.Fatal(err)
		}
		other := c.consumeReq("exe_x")
		other.Actor = forB
		_, err = c.s.Store.Consume(c.ctx, rec.ID, other)
		c.wantErr("the whole actor is compared byte for byte: the session acting for another must get APPROVAL_NOT_FOUND", err, store.ErrApprovalNotFound)
		req2 := c.request(storeDigest)
		req2.Requester = forB
		if again, err := c.s.Store.Create(c.ctx, req2); err == nil && again.ID == rec.ID {
			c.Errorf("the whole actor is compared byte for byte: the session acting for another got the same pending record")
		}
	}},
	{"Consume/a mismatch does not burn the record", func(c *storeCheck) {
		rec := c.approved()
		for name, tc := range map[string]struct {
			mutate func(*store.ConsumeRequest)
			want   error
		}{
			"another procedure": {func(r *store.ConsumeRequest) { r.Procedure = "/conformance.v1.Orders/Cancel" }, store.ErrApprovalResumeMismatch},
			"another type":      {func(r *store.ConsumeRequest) { r.Type = "director" }, store.ErrApprovalResumeMismatch},
			"another quorum":    {func(r *store.ConsumeRequest) { r.Quorum = 2 }, store.ErrApprovalResumeMismatch},
			"another input":     {func(r *store.ConsumeRequest) { r.Digest = otherDigest }, store.ErrApprovalInputMismatch},
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
	{"Consume/a changed preview is stale and changes nothing", func(c *storeCheck) {
		rec := c.approvedPreview()
		_, err := c.s.Store.Consume(c.ctx, rec.ID, c.resumeAt("exe_x", previewB))
		c.wantErr("a resume whose preview differs from the approved one must get APPROVAL_STALE", err, store.ErrApprovalStale)
		if got := c.get(rec.ID); got.Status != store.ApprovalApproved || got.ConsumedBy != "" {
			c.Errorf("a stale resume must consume nothing: the record is %s, consumed by %q", got.Status, got.ConsumedBy)
		}
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.resumeAt("exe_a", previewA)); err != nil {
			c.Errorf("once the state is as approved, the record is consumed: %v", err)
		}
		_, err = c.s.Store.Consume(c.ctx, rec.ID, c.resumeAt("exe_y", previewB))
		c.wantErr("a consumed record is consumed, whatever the preview", err, store.ErrApprovalConsumed)
	}},
	{"Consume/a record without a preview is stale for a resume with one", func(c *storeCheck) {
		rec := c.approved() // made before its capability had a preview
		_, err := c.s.Store.Consume(c.ctx, rec.ID, c.resumeAt("exe_x", previewA))
		c.wantErr("a record without a preview digest, resumed with one, must get APPROVAL_STALE (fail closed)", err, store.ErrApprovalStale)
		if got := c.get(rec.ID); got.Status != store.ApprovalApproved {
			c.Errorf("a stale resume must consume nothing: the record is %s", got.Status)
		}
	}},
	{"Consume/without a preview digest the record's is not compared", func(c *storeCheck) {
		rec := c.approvedPreview()
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_a")); err != nil {
			c.Errorf("a resume without a preview digest (its capability has none) consumes as before: %v", err)
		}
	}},
	{"Consume/staleness is checked after the other bindings", func(c *storeCheck) {
		rec := c.approvedPreview()
		req := c.resumeAt("exe_x", previewB)
		req.Digest = otherDigest
		_, err := c.s.Store.Consume(c.ctx, rec.ID, req)
		c.wantErr("another input with a changed preview is an input mismatch first", err, store.ErrApprovalInputMismatch)
		req = c.resumeAt("exe_x", previewB)
		req.Type = "director"
		_, err = c.s.Store.Consume(c.ctx, rec.ID, req)
		c.wantErr("another approval type with a changed preview is a resume mismatch first", err, store.ErrApprovalResumeMismatch)
		pending := c.createReq(c.previewed(previewB))
		_, err = c.s.Store.Consume(c.ctx, pending.ID, c.resumeAt("exe_x", previewA))
		c.wantErr("a pending record is pending, whatever the preview", err, store.ErrApprovalPending)
	}},
	{"Consume/concurrent consumers with a preview have exactly one winner", func(c *storeCheck) {
		rec := c.approvedPreview()
		const racers = 64
		var wins, stale atomic.Int32
		var others sync.Map
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				digest := previewA
				if i%2 == 1 {
					digest = previewB // the state flipped for half of them
				}
				_, err := c.s.Store.Consume(c.ctx, rec.ID, c.resumeAt(fmt.Sprintf("exe_%d", i), digest))
				switch {
				case err == nil && digest == previewA:
					wins.Add(1)
				case errors.Is(err, store.ErrApprovalConsumed):
				case errors.Is(err, store.ErrApprovalStale) && digest == previewB:
					stale.Add(1)
				default:
					others.Store(i, err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			c.Errorf("exactly one of the concurrent consumers whose preview is the approved one must win, %d did", wins.Load())
		}
		others.Range(func(k, v any) bool {
			c.Errorf("racer %v: %v, want success with the approved preview, APPROVAL_STALE with another, or APPROVAL_CONSUMED", k, v)
			return true
		})
	}},
	{"Consume/the quorum is bound like the type", func(c *storeCheck) {
		rec := c.quorum(storeDigest, 2)
		c.decide(rec.ID, vote(true, manager, ""))
		c.decide(rec.ID, vote(true, manager2, ""))
		for _, q := range []int{0, 1, 3} {
			req := c.consumeReq("exe_x")
			req.Quorum = q
			_, err := c.s.Store.Consume(c.ctx, rec.ID, req)
			c.wantErr(fmt.Sprintf("the quorum is bound like the type: a record approved by 2 consumed with quorum %d", q), err, store.ErrApprovalResumeMismatch)
		}
		one := c.create(otherDigest) // Quorum zero: one approver
		c.decide(one.ID, vote(true, manager, ""))
		req := c.consumeReq("exe_y")
		req.Digest, req.Quorum = otherDigest, 1
		if _, err := c.s.Store.Consume(c.ctx, one.ID, req); err != nil {
			c.Errorf("the quorum is bound like the type: zero means 1, on either side: %v", err)
		}
		req = c.consumeReq("exe_a")
		req.Quorum = 2
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, req); err != nil {
			c.Errorf("the quorum is bound like the type: the same quorum consumes after the refusals: %v", err)
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
				case errors.Is(err, store.ErrApprovalConsumed):
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
	{"Release/returns this execution's consumption to approved", func(c *storeCheck) {
		rec := c.consumed("exe_a")
		if err := c.s.Store.Release(c.ctx, rec.ID, "exe_a"); err != nil {
			c.Fatalf("Release: %v", err)
		}
		got := c.get(rec.ID)
		if got.Status != store.ApprovalApproved || got.ConsumedBy != "" || !got.ConsumedAt.IsZero() || !got.LeaseUntil.IsZero() || got.Approver.ID != manager.ID {
			c.Errorf("Release returns this execution's consumption to approved, as if never consumed: %+v", got)
		}
		if err := c.s.Store.Release(c.ctx, rec.ID, "exe_a"); err != nil {
			c.Errorf("Release returns this execution's consumption to approved: a repeat must be a no-op: %v", err)
		}
		if _, err := c.s.Store.Consume(c.ctx, rec.ID, c.consumeReq("exe_b")); err != nil {
			c.Errorf("Release returns this execution's consumption to approved: another execution may consume it then: %v", err)
		}
		if got := c.get(rec.ID); got.ConsumedBy != "exe_b" {
			c.Errorf("Release returns this execution's consumption to approved: the new consumer is recorded: %+v", got)
		}
	}},
	{"Release/is a no-op for any other record", func(c *storeCheck) {
		unknown := store.NewApprovalID()
		c.wantErr("Release is a no-op for any other record: an unknown id", c.s.Store.Release(c.ctx, unknown, "exe_a"), nil)

		approved := c.approved()
		c.wantErr("Release is a no-op for any other record: one never consumed", c.s.Store.Release(c.ctx, approved.ID, "exe_a"), nil)
		if s := c.status(approved.ID); s != store.ApprovalApproved {
			c.Errorf("Release is a no-op for any other record: an approved record became %s", s)
		}
		pending := c.create(otherDigest)
		c.s.Store.Release(c.ctx, pending.ID, "exe_a")
		if s := c.status(pending.ID); s != store.ApprovalPending {
			c.Errorf("Release is a no-op for any other record: a pending record became %s", s)
		}

		if _, err := c.s.Store.Consume(c.ctx, approved.ID, c.consumeReq("exe_a")); err != nil {
			c.Fatal(err)
		}
		c.wantErr("Release is a no-op for any other record: another execution's", c.s.Store.Release(c.ctx, approved.ID, "exe_b"), nil)
		if got := c.get(approved.ID); got.Status != store.ApprovalConsumed || got.ConsumedBy != "exe_a" {
			c.Errorf("Release is a no-op for any other record: another execution released exe_a's consumption: %+v", got)
		}
		if err := c.s.Store.RecordOutcome(c.ctx, approved.ID, "exe_a", store.Outcome{Status: store.ApprovalInDoubt, Code: "TIMEOUT"}); err != nil {
			c.Fatal(err)
		}
		c.wantErr("Release is a no-op for any other record: one with an outcome", c.s.Store.Release(c.ctx, approved.ID, "exe_a"), nil)
		if got := c.get(approved.ID); got.Status != store.ApprovalInDoubt || got.ConsumedBy != "exe_a" {
			c.Errorf("Release is a no-op for any other record: a record with an outcome (it may have run) was released: %+v", got)
		}
	}},
	{"RecordOutcome/refuses what is not an outcome and records nothing", func(c *storeCheck) {
		rec := c.consumed("exe_a")
		for _, o := range []store.Outcome{{}, {Status: store.ApprovalApproved, Code: "OK"}, {Status: store.ApprovalConsumed, Code: "OK"}} {
			if err := c.s.Store.RecordOutcome(c.ctx, rec.ID, "exe_a", o); err == nil {
				c.Errorf("RecordOutcome took %+v as an outcome", o)
			}
		}
		if got := c.get(rec.ID); got.Status != store.ApprovalConsumed || got.Outcome != (store.Outcome{}) {
			c.Errorf("a refused outcome changed the record: %+v", got)
		}
	}},
	{"RecordOutcome/only the consuming execution records the outcome", func(c *storeCheck) {
		rec := c.consumed("exe_a")
		completed := store.Outcome{Status: store.ApprovalCompleted, Code: "OK"}
		c.wantErr("another execution's outcome", c.s.Store.RecordOutcome(c.ctx, rec.ID, "exe_b", completed), store.ErrApprovalNotFound)
		if err := c.s.Store.RecordOutcome(c.ctx, rec.ID, "exe_a", completed); err != nil {
			c.Fatal(err)
		}
		got := c.get(rec.ID)
		if got.Status != store.ApprovalCompleted || got.Outcome.Status != store.ApprovalCompleted || got.Outcome.Code != "OK" || got.Outcome.Late || got.Outcome.At.IsZero() {
			c.Errorf("a recorded success must read completed, stamped by the store: %+v", got)
		}
		failed := c.create(otherDigest)
		c.decide(failed.ID, vote(true, manager, ""))
		req := c.consumeReq("exe_c")
		req.Digest = otherDigest
		c.s.Store.Consume(c.ctx, failed.ID, req)
		c.s.Store.RecordOutcome(c.ctx, failed.ID, "exe_c", store.Outcome{Status: store.ApprovalFailed, Code: "TIMEOUT"})
		if got := c.get(failed.ID); got.Status != store.ApprovalFailed || got.Outcome.Status != store.ApprovalFailed || got.Outcome.Code != "TIMEOUT" {
			c.Errorf("a recorded failure must read failed with its code: %+v", got)
		}
		c.wantErr("an unknown record's outcome", c.s.Store.RecordOutcome(c.ctx, store.NewApprovalID(), "exe_a", completed), store.ErrApprovalNotFound)
	}},
	{"RecordOutcome/no outcome reads as none, not success", func(c *storeCheck) {
		rec := c.consumed("exe_a")
		if got := c.get(rec.ID); got.Outcome != (store.Outcome{}) {
			c.Errorf("no outcome reads as none, not success: a consumed record without an outcome has Outcome %+v", got.Outcome)
		}
	}},
	{"RecordOutcome/the zero outcome is refused", func(c *storeCheck) {
		rec := c.consumed("exe_a")
		for name, o := range map[string]store.Outcome{
			"the zero outcome":        {},
			"a code without a status": {Code: "OK"},
			"a status not an outcome": {Status: store.ApprovalApproved},
		} {
			if err := c.s.Store.RecordOutcome(c.ctx, rec.ID, "exe_a", o); err == nil {
				c.Errorf("the zero outcome is refused: %s was accepted", name)
			}
		}
		if got := c.get(rec.ID); got.Status != store.ApprovalConsumed || got.Outcome != (store.Outcome{}) {
			c.Errorf("the zero outcome is refused: a refused outcome changed the record: %+v", got)
		}
	}},
	{"RecordOutcome/no outcome after the lease reads in_doubt", func(c *storeCheck) {
		rec := c.consumed("exe_a")
		if s := c.status(rec.ID); s != store.ApprovalConsumed {
			c.Errorf("within its lease a consumed record reads %s, want consumed", s)
		}
		c.s.Advance(2 * time.Minute)
		if s := c.status(rec.ID); s != store.ApprovalInDoubt {
			c.Errorf("a consumed record without an outcome after its lease must read in_doubt (it may have run), got %s", s)
		}
		list, err := c.s.Store.List(c.ctx, mine(store.ApprovalInDoubt))
		if err != nil || len(list) != 1 || list[0].ID != rec.ID {
			c.Errorf("List must report in_doubt records: %v, %v", recIDs(list), err)
		}
	}},
	{"RecordOutcome/in_doubt takes a later result", func(c *storeCheck) {
		recorded := c.consumed("exe_a")
		if err := c.s.Store.RecordOutcome(c.ctx, recorded.ID, "exe_a", store.Outcome{Status: store.ApprovalInDoubt, Code: "TIMEOUT"}); err != nil {
			c.Fatal(err)
		}
		if got := c.get(recorded.ID); got.Status != store.ApprovalInDoubt || got.Outcome.Status != store.ApprovalInDoubt || got.Outcome.Code != "TIMEOUT" {
			c.Errorf("in_doubt takes a later result: a recorded in_doubt must read in_doubt: %+v", got)
		}
		if err := c.s.Store.RecordOutcome(c.ctx, recorded.ID, "exe_a", store.Outcome{Status: store.ApprovalCompleted, Code: "OK", Late: true}); err != nil {
			c.Fatal(err)
		}
		if got := c.get(recorded.ID); got.Status != store.ApprovalCompleted || got.Outcome.Status != store.ApprovalCompleted || !got.Outcome.Late || got.Outcome.Code != "OK" {
			c.Errorf("in_doubt takes a later result: a late completion must replace a recorded in_doubt: %+v", got)
		}

		derived := c.create(otherDigest)
		c.decide(derived.ID, vote(true, manager, ""))
		req := c.consumeReq("exe_b")
		req.Digest = otherDigest
		if _, err := c.s.Store.Consume(c.ctx, derived.ID, req); err != nil {
			c.Fatal(err)
		}
		c.s.Advance(2 * time.Minute)
		if err := c.s.Store.RecordOutcome(c.ctx, derived.ID, "exe_b", store.Outcome{Status: store.ApprovalFailed, Code: "EXECUTION_FAILED"}); err != nil {
			c.Fatal(err)
		}
		if got := c.get(derived.ID); got.Status != store.ApprovalFailed || got.Outcome.Code != "EXECUTION_FAILED" || got.Outcome.Late {
			c.Errorf("in_doubt takes a later result: a record in_doubt past its lease must take a failure: %+v", got)
		}
	}},
	{"RecordOutcome/completed and failed are final", func(c *storeCheck) {
		rec := c.consumed("exe_a")
		if err := c.s.Store.RecordOutcome(c.ctx, rec.ID, "exe_a", store.Outcome{Status: store.ApprovalFailed, Code: "EXECUTION_FAILED"}); err != nil {
			c.Fatal(err)
		}
		for _, o := range []store.Outcome{
			{Status: store.ApprovalCompleted, Code: "OK", Late: true},
			{Status: store.ApprovalInDoubt, Code: "TIMEOUT"},
		} {
			if err := c.s.Store.RecordOutcome(c.ctx, rec.ID, "exe_a", o); err != nil {
				c.Errorf("completed and failed are final: a further outcome is a no-op, not an error: %v", err)
			}
		}
		if got := c.get(rec.ID); got.Status != store.ApprovalFailed || got.Outcome.Code != "EXECUTION_FAILED" || got.Outcome.Late {
			c.Errorf("completed and failed are final: the record must keep its first result: %+v", got)
		}
	}},
	{"List/pending records, oldest first, within a limit", func(c *storeCheck) {
		var ids []string
		for i := range 3 {
			ids = append(ids, c.create(digestN(i)).ID)
			c.s.Advance(time.Second)
		}
		c.decide(ids[1], vote(true, manager, ""))
		list, err := c.s.Store.List(c.ctx, mine(store.ApprovalPending))
		if err != nil || len(list) != 2 || list[0].ID != ids[0] || list[1].ID != ids[2] {
			c.Errorf("List(pending) must give the undecided records oldest first: %v, %v", recIDs(list), err)
		}
		f := mine(0)
		f.Limit = 1
		list, _ = c.s.Store.List(c.ctx, f)
		if len(list) != 1 || list[0].ID != ids[0] {
			c.Errorf("List must honour its limit, keeping the oldest: %v", recIDs(list))
		}
		list, _ = c.s.Store.List(c.ctx, store.ApprovalFilter{Audience: "elsewhere", Tenant: requester.Tenant})
		if len(list) != 0 {
			c.Errorf("List must filter by audience: %d records", len(list))
		}
	}},
	{"List/filters by audience and tenant before the limit", func(c *storeCheck) {
		// Older records of another tenant and of another audience, more of
		// them than the limit.
		var others []string
		for i := range 6 {
			req := c.request(digestN(i))
			switch i % 3 {
			case 0:
				req.Requester = store.Actor{ID: requester.ID, Tenant: "globex", Kind: "agent"}
			case 1:
				req.Requester = store.Actor{ID: "agent-9", Tenant: ""} // the empty tenant is a tenant like any other
			case 2:
				req.Audience = "billing"
			}
			others = append(others, c.createReq(req).ID)
			c.s.Advance(time.Second)
		}
		ours := c.create(storeDigest)
		f := mine(store.ApprovalPending)
		f.Limit = 3
		list, err := c.s.Store.List(c.ctx, f)
		if err != nil || len(list) != 1 || list[0].ID != ours.ID {
			c.Errorf("List filters by audience and tenant before the limit: acme must see its one record, not other tenants' or audiences': %v, %v", recIDs(list), err)
		}
		list, _ = c.s.Store.List(c.ctx, store.ApprovalFilter{Audience: storeAudience, Tenant: ""})
		if len(list) != 2 {
			c.Errorf("List filters by audience and tenant before the limit: the empty tenant must match exactly its own records: %v", recIDs(list))
		}
		list, _ = c.s.Store.List(c.ctx, store.ApprovalFilter{Audience: storeAudience, AnyTenant: true})
		if len(list) != 5 || list[len(list)-1].ID != ours.ID {
			c.Errorf("List filters by audience and tenant before the limit: AnyTenant must list every tenant of the audience, oldest first: %v", recIDs(list))
		}
		list, _ = c.s.Store.List(c.ctx, store.ApprovalFilter{Audience: storeAudience, AnyTenant: true, Limit: 2})
		if len(list) != 2 || list[0].ID != others[0] {
			c.Errorf("List filters by audience and tenant before the limit: AnyTenant with a limit keeps the oldest: %v", recIDs(list))
		}
	}},
}

func recIDs(rs []store.ApprovalRecord) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}
