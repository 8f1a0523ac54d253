package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// ResultStoreUnderTest is one fresh, empty result store for
// [RunResultStore], with a way to move its clock.
type ResultStoreUnderTest struct {
	Store store.ResultStore
	// Advance moves the clock the store decides leases and retention with
	// forward by d. Required, like Store: the suite refuses a store under
	// test without it.
	Advance func(d time.Duration)
}

// RunResultStore checks the [store.ResultStore] contract: one named
// subtest per rule, each on a fresh store from open. A failure message
// names the rule it checks.
func RunResultStore(t *testing.T, open func(t *testing.T) ResultStoreUnderTest) {
	t.Helper()
	for _, r := range resultRules {
		t.Run(r.name, func(t *testing.T) {
			s := open(t)
			if l := s.lacks(); l != "" {
				t.Fatalf("conformance: RunResultStore's open returned no %s: every rule needs a fresh store and a hook that moves its clock", l)
			}
			r.check(&resultCheck{T: t, s: s, ctx: t.Context()})
		})
	}
}

// lacks names the first field a rule cannot do without that s leaves
// nil, or "".
func (s ResultStoreUnderTest) lacks() string {
	switch {
	case s.Store == nil:
		return "Store"
	case s.Advance == nil:
		return "Advance"
	}
	return ""
}

type resultCheck struct {
	*testing.T
	s   ResultStoreUnderTest
	ctx context.Context
	n   int
}

// The timings of the result rules: a lease and a retention the clock is
// moved across.
const (
	resultLease     = time.Minute
	resultRetention = time.Hour
)

// resultOwner is the owner of the check's keys; ownerN the n-th of a
// series of others.
var resultOwner = ownerN(0)

func ownerN(n int) string { return fmt.Sprintf("own_%032x", n) }

// key returns a fresh key of the check, of resultOwner.
func (c *resultCheck) key() store.ResultKey {
	c.n++
	return store.ResultKey{Owner: resultOwner, Key: fmt.Sprintf("idk_%032x", c.n)}
}

// req is a write-like claim of key by execution, of storeDigest, without
// a quota.
func (c *resultCheck) req(key store.ResultKey, execution string) store.ClaimRequest {
	return store.ClaimRequest{ResultKey: key, Digest: storeDigest, ExecutionID: execution, Lease: resultLease, WriteLike: true, Retention: resultRetention}
}

func (c *resultCheck) claim(req store.ClaimRequest) store.Claim {
	c.Helper()
	got, err := c.s.Store.Claim(c.ctx, req)
	if err != nil {
		c.Fatalf("Claim: %v", err)
	}
	return got
}

// want checks a claim's answer.
func (c *resultCheck) want(rule string, got store.Claim, status store.ClaimStatus, execution string) {
	c.Helper()
	if got.Status != status || got.ExecutionID != execution {
		c.Errorf("%s: Claim answered %s (execution %q), want %s (execution %q)", rule, got.Status, got.ExecutionID, status, execution)
	}
}

// acquired claims a fresh write-like key for execution.
func (c *resultCheck) acquired(execution string) store.ResultKey {
	c.Helper()
	key := c.key()
	if got := c.claim(c.req(key, execution)); got.Status != store.ClaimAcquired {
		c.Fatalf("a new key must be acquired: %s", got.Status)
	}
	return key
}

// sample is a result as the engine stores it: opaque bytes included.
func sample(execution string) store.Result {
	return store.Result{ExecutionID: execution, Code: "OK", Envelope: []byte(`{"status":"completed","executionId":"` + execution + `"}`),
		Sealed: []byte("\x00sealed\xff response\n"), KeyID: "k1"}
}

func (c *resultCheck) complete(key store.ResultKey, execution string, r store.Result) {
	c.Helper()
	if err := c.s.Store.Complete(c.ctx, key, execution, r); err != nil {
		c.Fatalf("Complete: %v", err)
	}
}

func (c *resultCheck) get(key store.ResultKey) store.ResultRecord {
	c.Helper()
	rec, err := c.s.Store.Get(c.ctx, key)
	if err != nil {
		c.Fatalf("Get: %v", err)
	}
	return rec
}

func (c *resultCheck) wantErr(rule string, err, want error) {
	c.Helper()
	if !errors.Is(err, want) {
		c.Errorf("%s: got error %v, want %v", rule, err, want)
	}
}

func (c *resultCheck) wantGone(rule string, key store.ResultKey) {
	c.Helper()
	_, err := c.s.Store.Get(c.ctx, key)
	c.wantErr(rule+": Get", err, store.ErrResultNotFound)
}

func sameResult(a, b store.Result) bool {
	return a.ExecutionID == b.ExecutionID && a.Code == b.Code && bytes.Equal(a.Envelope, b.Envelope) &&
		bytes.Equal(a.Sealed, b.Sealed) && a.KeyID == b.KeyID && a.Late == b.Late
}

var resultRules = []struct {
	name  string
	check func(c *resultCheck)
}{
	{"Claim/a new key is acquired and in flight", func(c *resultCheck) {
		const rule = "the first claim of a key holds it, in flight, with a lease from the store's clock"
		key := c.key()
		c.want(rule, c.claim(c.req(key, "exe_a")), store.ClaimAcquired, "")
		rec := c.get(key)
		if rec.ResultKey != key || rec.Digest != storeDigest || rec.State != store.ResultInFlight || rec.ExecutionID != "exe_a" || !rec.WriteLike ||
			rec.ClaimedAt.IsZero() || !rec.LeaseUntil.Equal(rec.ClaimedAt.Add(resultLease)) || rec.Retention != resultRetention || !rec.DoneAt.IsZero() {
			c.Errorf("%s: %+v", rule, rec)
		}
	}},
	{"Claim/a claim repeated by its holder answers as the first", func(c *resultCheck) {
		const rule = "a Claim repeated after a lost reply acquires again, for the same execution only"
		key := c.acquired("exe_a")
		c.want(rule, c.claim(c.req(key, "exe_a")), store.ClaimAcquired, "")
		c.want(rule, c.claim(c.req(key, "exe_b")), store.ClaimInFlight, "exe_a")
	}},
	{"Claim/another execution finds the key in flight", func(c *resultCheck) {
		const rule = "a key held by a running execution is in flight for every other, and names its holder"
		key := c.acquired("exe_a")
		for range 2 {
			c.want(rule, c.claim(c.req(key, "exe_b")), store.ClaimInFlight, "exe_a")
		}
		if rec := c.get(key); rec.ExecutionID != "exe_a" || rec.State != store.ResultInFlight {
			c.Errorf("%s: a refused claim must change nothing: %+v", rule, rec)
		}
	}},
	{"Claim/another digest is key reused in every state", func(c *resultCheck) {
		const rule = "a key that comes back with another input is KEY_REUSED, whatever its state, and nothing changes"
		other := func(key store.ResultKey) store.ClaimRequest {
			r := c.req(key, "exe_z")
			r.Digest = otherDigest
			r.Reconcile = true
			return r
		}
		inFlight := c.acquired("exe_a")
		done := c.acquired("exe_b")
		c.complete(done, "exe_b", sample("exe_b"))
		doubt := c.acquired("exe_c")
		if err := c.s.Store.MarkInDoubt(c.ctx, doubt, "exe_c"); err != nil {
			c.Fatal(err)
		}
		for state, key := range map[string]store.ResultKey{"in flight": inFlight, "done": done, "in doubt": doubt} {
			if got := c.claim(other(key)); got.Status != store.ClaimKeyReused {
				c.Errorf("%s: %s key claimed with another digest: %s", rule, state, got.Status)
			}
			if rec := c.get(key); rec.Digest != storeDigest || rec.ExecutionID == "exe_z" {
				c.Errorf("%s: the %s record changed: %+v", rule, state, rec)
			}
		}
	}},
	{"Claim/exactly one of concurrent claims acquires", func(c *resultCheck) {
		const rule = "any number of executions may race for one key: exactly one holds it"
		key := c.key()
		const racers = 32
		var wg sync.WaitGroup
		got := make([]store.Claim, racers)
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() { got[i], errs[i] = c.s.Store.Claim(c.ctx, c.req(key, fmt.Sprintf("exe_%02d", i))) })
		}
		wg.Wait()
		winner := ""
		for i, g := range got {
			switch {
			case errs[i] != nil:
				c.Fatalf("%s: Claim: %v", rule, errs[i])
			case g.Status == store.ClaimAcquired && winner == "":
				winner = fmt.Sprintf("exe_%02d", i)
			case g.Status == store.ClaimAcquired:
				c.Errorf("%s: two executions acquired the key: %s and exe_%02d", rule, winner, i)
			}
		}
		if winner == "" {
			c.Fatalf("%s: nobody acquired the key", rule)
		}
		for _, g := range got {
			if g.Status != store.ClaimAcquired && (g.Status != store.ClaimInFlight || g.ExecutionID != winner) {
				c.Errorf("%s: a loser must see the key in flight, held by %s: %s %q", rule, winner, g.Status, g.ExecutionID)
			}
		}
	}},
	{"Claim/keys are separate", func(c *resultCheck) {
		const rule = "one key's record never answers for another"
		a := c.acquired("exe_a")
		c.complete(a, "exe_a", sample("exe_a"))
		c.want(rule, c.claim(c.req(c.key(), "exe_b")), store.ClaimAcquired, "")
	}},
	{"Complete/a done key answers with its result as stored", func(c *resultCheck) {
		const rule = "a repeat of a done key gets the stored result, byte for byte, and nothing changes"
		key := c.acquired("exe_a")
		res := sample("exe_a")
		res.Code = "EXECUTION_FAILED"
		c.complete(key, "exe_a", res)
		for _, ex := range []string{"exe_b", "exe_a"} {
			got := c.claim(c.req(key, ex))
			if got.Status != store.ClaimDone || !sameResult(got.Result, res) {
				c.Errorf("%s: %s: %s %+v, want done with %+v", rule, ex, got.Status, got.Result, res)
			}
		}
		rec := c.get(key)
		if rec.State != store.ResultDone || rec.ExecutionID != "exe_a" || !sameResult(rec.Result, res) || rec.DoneAt.IsZero() || !rec.ExpiresAt.Equal(rec.DoneAt.Add(resultRetention)) {
			c.Errorf("%s: Get must report the done record with its retention from DoneAt: %+v", rule, rec)
		}
		empty := c.acquired("exe_c")
		none := store.Result{ExecutionID: "exe_c", Code: "OK", Envelope: []byte("{}")}
		c.complete(empty, "exe_c", none)
		if got := c.claim(c.req(empty, "exe_d")); got.Status != store.ClaimDone || len(got.Result.Sealed) != 0 || !bytes.Equal(got.Result.Envelope, none.Envelope) {
			c.Errorf("%s: a result without a response must come back without one: %+v", rule, got.Result)
		}
	}},
	{"Complete/only the holder stores a result", func(c *resultCheck) {
		const rule = "Complete by an execution that does not hold the key is ErrNotHeld and changes nothing"
		key := c.acquired("exe_a")
		c.wantErr(rule, c.s.Store.Complete(c.ctx, key, "exe_b", sample("exe_b")), store.ErrNotHeld)
		c.wantErr(rule, c.s.Store.Complete(c.ctx, c.key(), "exe_a", sample("exe_a")), store.ErrNotHeld)
		if rec := c.get(key); rec.State != store.ResultInFlight {
			c.Errorf("%s: the record is %s", rule, rec.State)
		}
	}},
	{"Complete/a repeated Complete keeps the first result", func(c *resultCheck) {
		const rule = "Complete repeated by the holder is a no-op"
		key := c.acquired("exe_a")
		first := sample("exe_a")
		c.complete(key, "exe_a", first)
		again := sample("exe_a")
		again.Code = "TIMEOUT"
		c.complete(key, "exe_a", again)
		if rec := c.get(key); !sameResult(rec.Result, first) {
			c.Errorf("%s: the result changed to %+v", rule, rec.Result)
		}
	}},
	{"Lease/a write-like claim past its lease is in doubt", func(c *resultCheck) {
		const rule = "past its lease with no result, a write-like claim turns in doubt"
		key := c.acquired("exe_a")
		c.s.Advance(resultLease / 2)
		c.want(rule+" (not before)", c.claim(c.req(key, "exe_b")), store.ClaimInFlight, "exe_a")
		c.s.Advance(resultLease / 2)
		c.want(rule, c.claim(c.req(key, "exe_b")), store.ClaimInDoubt, "exe_a")
		rec := c.get(key)
		if rec.State != store.ResultInDoubt || rec.ExecutionID != "exe_a" || !rec.DoneAt.Equal(rec.LeaseUntil) || !rec.ExpiresAt.Equal(rec.LeaseUntil.Add(resultRetention)) {
			c.Errorf("%s: Get must read in doubt from its lease on, kept its retention after: %+v", rule, rec)
		}
	}},
	{"Lease/a read's claim past its lease is released", func(c *resultCheck) {
		const rule = "past its lease with no result, a read's claim is released"
		key := c.key()
		read := c.req(key, "exe_a")
		read.WriteLike = false
		c.want(rule, c.claim(read), store.ClaimAcquired, "")
		c.s.Advance(resultLease)
		c.wantGone(rule, key)
		read.ExecutionID = "exe_b"
		c.want(rule, c.claim(read), store.ClaimAcquired, "")
		c.wantErr(rule+": the old holder's result", c.s.Store.Complete(c.ctx, key, "exe_a", sample("exe_a")), store.ErrNotHeld)
		if rec := c.get(key); rec.ExecutionID != "exe_b" || rec.State != store.ResultInFlight {
			c.Errorf("%s: the new claim must hold the key: %+v", rule, rec)
		}
	}},
	{"Release/the holder gives the key back", func(c *resultCheck) {
		const rule = "Release by the holder frees the key for the next claim"
		key := c.acquired("exe_a")
		if err := c.s.Store.Release(c.ctx, key, "exe_a"); err != nil {
			c.Fatal(err)
		}
		c.wantGone(rule, key)
		c.want(rule, c.claim(c.req(key, "exe_b")), store.ClaimAcquired, "")
		if err := c.s.Store.Release(c.ctx, key, "exe_a"); err != nil {
			c.Errorf("%s: a repeated Release must be a no-op: %v", rule, err)
		}
		if rec := c.get(key); rec.ExecutionID != "exe_b" {
			c.Errorf("%s: a Release by a former holder released another's claim: %+v", rule, rec)
		}
	}},
	{"Release/is a no-op unless the holder's claim has no result", func(c *resultCheck) {
		const rule = "Release never removes a result or another execution's claim"
		held := c.acquired("exe_a")
		done := c.acquired("exe_b")
		c.complete(done, "exe_b", sample("exe_b"))
		for key, ex := range map[store.ResultKey]string{held: "exe_z", done: "exe_b", c.key(): "exe_a"} {
			if err := c.s.Store.Release(c.ctx, key, ex); err != nil {
				c.Errorf("%s: Release must answer nil: %v", rule, err)
			}
		}
		if rec := c.get(held); rec.ExecutionID != "exe_a" || rec.State != store.ResultInFlight {
			c.Errorf("%s: another execution's claim changed: %+v", rule, rec)
		}
		if rec := c.get(done); rec.State != store.ResultDone {
			c.Errorf("%s: a done record changed: %+v", rule, rec)
		}
	}},
	{"InDoubt/MarkInDoubt turns the holder's claim in doubt", func(c *resultCheck) {
		const rule = "a claim marked in doubt answers IN_DOUBT to repeats, naming its execution"
		key := c.acquired("exe_a")
		c.wantErr(rule+": by another execution", c.s.Store.MarkInDoubt(c.ctx, key, "exe_b"), store.ErrNotHeld)
		if err := c.s.Store.MarkInDoubt(c.ctx, key, "exe_a"); err != nil {
			c.Fatal(err)
		}
		if err := c.s.Store.MarkInDoubt(c.ctx, key, "exe_a"); err != nil {
			c.Errorf("%s: a repeated MarkInDoubt must be a no-op: %v", rule, err)
		}
		c.want(rule, c.claim(c.req(key, "exe_b")), store.ClaimInDoubt, "exe_a")
		rec := c.get(key)
		if rec.State != store.ResultInDoubt || rec.DoneAt.IsZero() || !rec.ExpiresAt.Equal(rec.DoneAt.Add(resultRetention)) {
			c.Errorf("%s: Get must report in doubt, retained from then: %+v", rule, rec)
		}
		c.wantErr(rule+": an unknown key", c.s.Store.MarkInDoubt(c.ctx, c.key(), "exe_a"), store.ErrNotHeld)
	}},
	{"InDoubt/a late result replaces in doubt", func(c *resultCheck) {
		const rule = "an abandoned attempt's result, stored when it returns, replaces in doubt"
		marked := c.acquired("exe_a")
		if err := c.s.Store.MarkInDoubt(c.ctx, marked, "exe_a"); err != nil {
			c.Fatal(err)
		}
		lapsed := c.acquired("exe_b")
		c.s.Advance(resultLease)
		for key, ex := range map[store.ResultKey]string{marked: "exe_a", lapsed: "exe_b"} {
			late := sample(ex)
			late.Late = true
			c.wantErr(rule+": by another execution", c.s.Store.Complete(c.ctx, key, "exe_z", late), store.ErrNotHeld)
			c.complete(key, ex, late)
			if got := c.claim(c.req(key, "exe_z")); got.Status != store.ClaimDone || !sameResult(got.Result, late) {
				c.Errorf("%s: %s then %+v", rule, got.Status, got.Result)
			}
			if err := c.s.Store.MarkInDoubt(c.ctx, key, ex); err != nil || c.get(key).State != store.ResultDone {
				c.Errorf("%s: MarkInDoubt on a done record must leave it done: %v", rule, err)
			}
		}
	}},
	{"Reconcile/one execution takes an in-doubt key over", func(c *resultCheck) {
		const rule = "a claim with Reconcile takes an in-doubt key for exactly one execution, naming the one in doubt"
		key := c.acquired("exe_a")
		if err := c.s.Store.MarkInDoubt(c.ctx, key, "exe_a"); err != nil {
			c.Fatal(err)
		}
		const racers = 16
		var wg sync.WaitGroup
		got := make([]store.Claim, racers)
		for i := range racers {
			wg.Go(func() {
				r := c.req(key, fmt.Sprintf("exe_r%02d", i))
				r.Reconcile = true
				var err error
				if got[i], err = c.s.Store.Claim(c.ctx, r); err != nil {
					c.Errorf("Claim: %v", err)
				}
			})
		}
		wg.Wait()
		winner := -1
		for i, g := range got {
			switch {
			case g.Status == store.ClaimReconcile && g.ExecutionID == "exe_a" && winner < 0:
				winner = i
			case g.Status == store.ClaimReconcile:
				c.Errorf("%s: a second reconciler (%d, %q) after %d", rule, i, g.ExecutionID, winner)
			case g.Status != store.ClaimInFlight:
				c.Errorf("%s: a loser must see the key in flight: %s", rule, g.Status)
			}
		}
		if winner < 0 {
			c.Fatalf("%s: nobody took the key over", rule)
		}
		holder := fmt.Sprintf("exe_r%02d", winner)
		again := c.req(key, holder)
		again.Reconcile = true
		c.want(rule+": repeated by the reconciler", c.claim(again), store.ClaimReconcile, "exe_a")
		rec := c.get(key)
		if rec.State != store.ResultInFlight || rec.ExecutionID != holder || rec.ReconcileOf != "exe_a" || !rec.LeaseUntil.Equal(rec.ClaimedAt.Add(resultLease)) {
			c.Errorf("%s: the record must be in flight for the reconciler: %+v", rule, rec)
		}
		c.wantErr(rule+": the old holder's late result", c.s.Store.Complete(c.ctx, key, "exe_a", sample("exe_a")), store.ErrNotHeld)
		res := sample("exe_a")
		c.complete(key, holder, res)
		if got := c.claim(c.req(key, "exe_z")); got.Status != store.ClaimDone || !sameResult(got.Result, res) {
			c.Errorf("%s: the reconciled result must be stored: %s %+v", rule, got.Status, got.Result)
		}
	}},
	{"Reconcile/a failed reconciliation stays in doubt", func(c *resultCheck) {
		const rule = "a reconciler that cannot tell marks the key in doubt again, about the execution it reconciled"
		key := c.acquired("exe_a")
		c.s.Advance(resultLease) // in doubt by its lease
		r := c.req(key, "exe_b")
		r.Reconcile = true
		c.want(rule, c.claim(r), store.ClaimReconcile, "exe_a")
		if err := c.s.Store.MarkInDoubt(c.ctx, key, "exe_b"); err != nil {
			c.Fatal(err)
		}
		if rec := c.get(key); rec.State != store.ResultInDoubt || rec.ExecutionID != "exe_a" || rec.ReconcileOf != "" {
			c.Errorf("%s: the record must be in doubt about exe_a, which may have run (exe_b ran nothing): %+v", rule, rec)
		}
		c.want(rule, c.claim(c.req(key, "exe_c")), store.ClaimInDoubt, "exe_a")
		r.ExecutionID = "exe_d"
		c.want(rule, c.claim(r), store.ClaimReconcile, "exe_a")
		if err := c.s.Store.MarkInDoubt(c.ctx, key, "exe_d"); err != nil {
			c.Fatal(err)
		}
		late := sample("exe_a")
		late.Late = true
		c.complete(key, "exe_a", late) // its abandoned attempt came back
		if got := c.claim(c.req(key, "exe_e")); got.Status != store.ClaimDone || !sameResult(got.Result, late) {
			c.Errorf("%s: the late result of the execution in doubt replaces in doubt: %s %+v", rule, got.Status, got.Result)
		}
	}},
	{"Reconcile/a reconciler that releases frees the key", func(c *resultCheck) {
		const rule = "a reconciler that finds nothing ran may run again under the key, or give it back"
		key := c.acquired("exe_a")
		if err := c.s.Store.MarkInDoubt(c.ctx, key, "exe_a"); err != nil {
			c.Fatal(err)
		}
		r := c.req(key, "exe_b")
		r.Reconcile = true
		c.want(rule, c.claim(r), store.ClaimReconcile, "exe_a")
		if err := c.s.Store.Release(c.ctx, key, "exe_b"); err != nil {
			c.Fatal(err)
		}
		c.want(rule, c.claim(c.req(key, "exe_c")), store.ClaimAcquired, "")
	}},
	{"Retention/a done record is gone after its retention", func(c *resultCheck) {
		const rule = "a result is kept for its retention, from when it was stored, then forgotten"
		key := c.acquired("exe_a")
		c.s.Advance(resultLease / 2)
		c.complete(key, "exe_a", sample("exe_a"))
		c.s.Advance(resultRetention - time.Second)
		if got := c.claim(c.req(key, "exe_b")); got.Status != store.ClaimDone {
			c.Errorf("%s: within its retention: %s", rule, got.Status)
		}
		c.s.Advance(time.Second)
		c.wantGone(rule, key)
		c.want(rule, c.claim(c.req(key, "exe_c")), store.ClaimAcquired, "")
	}},
	{"Retention/an in-doubt record is gone after its retention", func(c *resultCheck) {
		const rule = "an in-doubt record is kept for its retention, then forgotten"
		marked := c.acquired("exe_a")
		if err := c.s.Store.MarkInDoubt(c.ctx, marked, "exe_a"); err != nil {
			c.Fatal(err)
		}
		lapsed := c.acquired("exe_b")
		c.s.Advance(resultLease + resultRetention - time.Second)
		c.want(rule, c.claim(c.req(lapsed, "exe_z")), store.ClaimInDoubt, "exe_b")
		c.s.Advance(time.Second)
		for _, key := range []store.ResultKey{marked, lapsed} {
			c.wantGone(rule, key)
			c.want(rule, c.claim(c.req(key, "exe_z")), store.ClaimAcquired, "")
		}
	}},
	{"Quota/a new key of an owner at its record quota is refused, and nothing changes", func(c *resultCheck) {
		const rule = "a claim that would make a new record for an owner at its record quota is QUOTA_EXCEEDED, and records nothing"
		quota := func(r store.ClaimRequest) store.ClaimRequest { r.Quota = store.ResultQuota{Records: 2}; return r }
		a, b, over := c.key(), c.key(), c.key()
		c.want(rule, c.claim(quota(c.req(a, "exe_a"))), store.ClaimAcquired, "")
		c.want(rule, c.claim(quota(c.req(b, "exe_b"))), store.ClaimAcquired, "") // in flight counts
		for range 2 {
			c.want(rule, c.claim(quota(c.req(over, "exe_c"))), store.ClaimQuotaExceeded, "")
		}
		c.wantGone(rule+": the refused key", over)
		c.want(rule+": a repeat by the holder", c.claim(quota(c.req(a, "exe_a"))), store.ClaimAcquired, "")
		c.want(rule+": another execution", c.claim(quota(c.req(a, "exe_z"))), store.ClaimInFlight, "exe_a")
		c.complete(a, "exe_a", sample("exe_a"))
		if got := c.claim(quota(c.req(a, "exe_z"))); got.Status != store.ClaimDone {
			c.Errorf("%s: a stored result is answered at the quota: %s", rule, got.Status)
		}
		elsewhere := store.ResultKey{Owner: ownerN(1), Key: over.Key}
		c.want(rule+": another owner", c.claim(quota(c.req(elsewhere, "exe_d"))), store.ClaimAcquired, "")
		if err := c.s.Store.Release(c.ctx, b, "exe_b"); err != nil {
			c.Fatal(err)
		}
		c.want(rule+": a released claim stops counting", c.claim(quota(c.req(over, "exe_c"))), store.ClaimAcquired, "")
		c.want(rule, c.claim(quota(c.req(c.key(), "exe_e"))), store.ClaimQuotaExceeded, "")
	}},
	{"Quota/stored bytes count once stored, and one result may overshoot", func(c *resultCheck) {
		const rule = "the sizes of an owner's stored results count against its byte quota from when each is stored"
		res := sample("exe_a")
		quota := func(r store.ClaimRequest) store.ClaimRequest {
			r.Quota = store.ResultQuota{Bytes: res.Size() + 1}
			return r
		}
		a, b := c.key(), c.key()
		c.want(rule, c.claim(quota(c.req(a, "exe_a"))), store.ClaimAcquired, "")
		c.want(rule+": a claim has no bytes yet", c.claim(quota(c.req(b, "exe_b"))), store.ClaimAcquired, "")
		c.complete(a, "exe_a", res)
		c.want(rule+": under the quota", c.claim(quota(c.req(c.key(), "exe_c"))), store.ClaimAcquired, "")
		c.complete(b, "exe_b", sample("exe_b")) // storing is never refused: it overshoots
		if got := c.claim(quota(c.req(b, "exe_z"))); got.Status != store.ClaimDone {
			c.Errorf("%s: the result that overshot the quota is stored: %s", rule, got.Status)
		}
		c.want(rule+": over the quota", c.claim(quota(c.req(c.key(), "exe_d"))), store.ClaimQuotaExceeded, "")
	}},
	{"Quota/what is gone stops counting", func(c *resultCheck) {
		const rule = "records stop counting against the quota once gone: a read's claim past its lease, a done or in-doubt record past its retention"
		quota := func(r store.ClaimRequest) store.ClaimRequest {
			r.Quota = store.ResultQuota{Records: 1, Bytes: 1}
			return r
		}
		read := quota(c.req(c.key(), "exe_a"))
		read.WriteLike = false
		c.want(rule, c.claim(read), store.ClaimAcquired, "")
		c.want(rule, c.claim(quota(c.req(c.key(), "exe_z"))), store.ClaimQuotaExceeded, "")
		c.s.Advance(resultLease)
		done := c.key()
		c.want(rule+": a read's lapsed claim", c.claim(quota(c.req(done, "exe_b"))), store.ClaimAcquired, "")
		c.complete(done, "exe_b", sample("exe_b"))
		c.s.Advance(resultRetention - time.Second)
		c.want(rule+": within the retention", c.claim(quota(c.req(c.key(), "exe_z"))), store.ClaimQuotaExceeded, "")
		c.s.Advance(time.Second)
		doubt := c.key()
		c.want(rule+": a done record past its retention (records and bytes)", c.claim(quota(c.req(doubt, "exe_c"))), store.ClaimAcquired, "")
		if err := c.s.Store.MarkInDoubt(c.ctx, doubt, "exe_c"); err != nil {
			c.Fatal(err)
		}
		c.want(rule+": in doubt counts", c.claim(quota(c.req(c.key(), "exe_z"))), store.ClaimQuotaExceeded, "")
		c.s.Advance(resultRetention)
		c.want(rule+": an in-doubt record past its retention", c.claim(quota(c.req(c.key(), "exe_d"))), store.ClaimAcquired, "")
	}},
	{"Quota/a key in doubt is reconciled at the quota", func(c *resultCheck) {
		const rule = "the quota holds new records only: an in-doubt key is taken over to reconcile it at the quota"
		key := c.acquired("exe_a")
		if err := c.s.Store.MarkInDoubt(c.ctx, key, "exe_a"); err != nil {
			c.Fatal(err)
		}
		r := c.req(key, "exe_b")
		r.Reconcile, r.Quota = true, store.ResultQuota{Records: 1}
		c.want(rule, c.claim(r), store.ClaimReconcile, "exe_a")
	}},
	{"Quota/racing claims of one owner never pass its quota", func(c *resultCheck) {
		const rule = "the quota is checked and counted in the claim's atomic step: racing claims of new keys of one owner acquire at most the quota"
		const racers, quota = 24, 5
		var wg sync.WaitGroup
		got := make([]store.Claim, racers)
		errs := make([]error, racers)
		for i := range racers {
			r := c.req(c.key(), fmt.Sprintf("exe_%02d", i))
			r.Quota = store.ResultQuota{Records: quota}
			wg.Go(func() { got[i], errs[i] = c.s.Store.Claim(c.ctx, r) })
		}
		wg.Wait()
		acquired := 0
		for i, g := range got {
			switch {
			case errs[i] != nil:
				c.Fatalf("%s: Claim: %v", rule, errs[i])
			case g.Status == store.ClaimAcquired:
				acquired++
			case g.Status != store.ClaimQuotaExceeded:
				c.Errorf("%s: a claim of a new key answered %s", rule, g.Status)
			}
		}
		if acquired != quota {
			c.Errorf("%s: %d of %d claims acquired, want %d", rule, acquired, racers, quota)
		}
	}},
	{"Get/an unknown key is not found", func(c *resultCheck) {
		c.wantGone("an unknown key is not found", c.key())
	}},
}
