package resultstore

import (
	"fmt"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// The rules of the contract (middleware/store.ResultStore) in Go, for the
// memory store; the Redis store's scripts apply the same ones, and
// conformance.RunResultStore holds both to them.

// view returns r as of now: a claim past its lease reads in doubt
// (write-like) or gone (a read: released); a done or in-doubt record past
// its retention is gone.
func view(r *store.ResultRecord, now time.Time) (store.ResultRecord, bool) {
	v := *r
	if v.State == store.ResultInFlight && !now.Before(v.LeaseUntil) {
		if !v.WriteLike {
			return store.ResultRecord{}, false
		}
		v.State, v.DoneAt = store.ResultInDoubt, v.LeaseUntil
	}
	if !now.Before(v.ExpiresAt) {
		return store.ResultRecord{}, false
	}
	return v, true
}

// claimed returns the record of a fresh claim by req at now.
func claimed(req store.ClaimRequest, now time.Time) *store.ResultRecord {
	r := &store.ResultRecord{ResultKey: req.ResultKey, Digest: req.Digest, State: store.ResultInFlight, ExecutionID: req.ExecutionID,
		WriteLike: req.WriteLike, ClaimedAt: now, LeaseUntil: now.Add(req.Lease), Retention: req.Retention}
	r.ExpiresAt = r.LeaseUntil
	if r.WriteLike {
		r.ExpiresAt = r.LeaseUntil.Add(r.Retention)
	}
	return r
}

// settle makes r done or in doubt at now, with its retention from now.
func settle(r *store.ResultRecord, state store.ResultState, now time.Time) {
	r.State, r.DoneAt, r.ExpiresAt, r.ReconcileOf = state, now, now.Add(r.Retention), ""
}

// malformed is the error of a claim of a key the engine would never give.
func malformed(k store.ResultKey) error {
	return fmt.Errorf("resultstore: malformed key %q of owner %q: want \"idk_\" and \"own_\", each with 32 lowercase hex digits", k.Key, k.Owner)
}
