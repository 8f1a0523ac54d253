package store

import (
	"context"
	"errors"
	"time"

	"github.com/agentsafe/agentsafe/internal/ids"
)

// ResultStore is the seam between the engine and where the results of
// calls that carry a caller's Idempotency-Key (or fall within a
// capability's dedup window) live: the first call with a key claims it,
// runs, and stores its result; a repeat is answered from the store and
// runs nothing. Implementations are in package resultstore (memory,
// Redis) and agentsafepg; package conformance checks any implementation
// against this contract (RunResultStore).
//
// A key's record moves through these states:
//
//	absent    --Claim-------------------------> in flight (held by one execution, until its lease ends)
//	in flight --Complete----------------------> done
//	in flight --Release-----------------------> absent
//	in flight --MarkInDoubt-------------------> in doubt
//	in flight --lease ends, write-like claim--> in doubt
//	in flight --lease ends, read claim--------> absent
//	in doubt  --Complete (a late result)------> done
//	in doubt  --Claim with Reconcile----------> in flight (held by the claiming execution)
//	done, in doubt --retention ends-----------> absent
//
// The contract, for every method:
//   - Time is the store's own clock (Redis: TIME inside the script), never
//     the caller's: leases and retention end by it.
//   - Every method is one atomic step, and Claim one round trip: a failed
//     check changes nothing, and any number of engines may race for one
//     key: exactly one holds it.
//   - Every method is safe to repeat after a lost reply: a Claim repeated
//     by the execution that holds the key answers as the first did;
//     Complete, Release and MarkInDoubt repeated are no-ops.
//   - Claim answers with a [ClaimStatus], never a sentinel; the writes
//     answer [ErrNotHeld] when the key is not held by the execution. Any
//     other error is a store failure: the engine answers
//     IDEMPOTENCY_UNAVAILABLE, and nothing runs.
//   - Stores keep [Result] as given: its Envelope and Sealed bytes are the
//     engine's, opaque to the store.
//   - Every record belongs to an owner ([ResultKey].Owner: the audience and
//     the whole actor the engine derived the key for), and what one owner
//     keeps is bounded by the quota its claims carry ([ResultQuota]): a
//     claim that would make a new record for an owner at its quota is
//     refused ([ClaimQuotaExceeded]), so one caller can never fill a store
//     that others share. A store may keep an owner's records together (the
//     Redis store gives them one hash tag), which is why every method names
//     the owner as well as the key.
type ResultStore interface {
	// Claim is the first step of every call with a key, checking in one
	// atomic step, as of the store's clock:
	//   - no record for req.Key, or one that is gone (a done or in-doubt
	//     record past its retention, a read's claim past its lease): when
	//     req.Owner is at req.Quota ([ResultQuota]), [ClaimQuotaExceeded],
	//     and nothing changes; else a new record of req.Owner, in flight,
	//     held by req.ExecutionID until now + req.Lease; [ClaimAcquired]. The
	//     quota is checked and the record counted in the same atomic step,
	//     so that claims racing for one owner never pass its quota;
	//   - a record with another digest, in any state: [ClaimKeyReused],
	//     nothing changes (checked before the states below);
	//   - in flight, held by req.ExecutionID: [ClaimAcquired] again (or
	//     [ClaimReconcile], with the same ReconcileOf, for a holder that
	//     claimed it to reconcile): a repeated Claim answers as the first;
	//   - in flight, held by another execution, its lease not over:
	//     [ClaimInFlight], with the holder's ExecutionID;
	//   - in doubt (marked so, or a write-like claim past its lease): with
	//     req.Reconcile, the record is claimed for req.ExecutionID as for a
	//     new one, remembering the execution that held it
	//     (ResultRecord.ReconcileOf), and the answer is [ClaimReconcile]
	//     with that ExecutionID; without it, [ClaimInDoubt] with the
	//     ExecutionID that held it, nothing changes;
	//   - done: [ClaimDone] with the stored Result.
	//
	// Only a new record is held to the quota: a repeat of a key whose
	// record is live is answered as above whatever its owner keeps.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)
	// Complete stores how the execution holding key ended, and makes the
	// record done; its retention starts now. The record must be held by
	// executionID: in flight (a read's claim only until its lease ends) or
	// in doubt (a late result: an abandoned attempt that returned after
	// its execution finalized). A done record held by executionID is left
	// as it is (nil); anything else is [ErrNotHeld]. The result's
	// [Result.Size] counts against its owner's byte quota from now until
	// the record is gone.
	Complete(ctx context.Context, key ResultKey, executionID string, r Result) error
	// Release gives the key back when its holder knows nothing ran: a
	// record held by executionID that is not done is removed, so that the
	// next Claim acquires it. For any other record (absent, held by
	// another execution, done) it is a no-op that returns nil.
	Release(ctx context.Context, key ResultKey, executionID string) error
	// MarkInDoubt records that the execution holding key may have had an
	// effect and has no result to store: a record held by executionID in
	// flight (its lease over or not) turns in doubt, and its retention
	// starts now. A record claimed to reconcile (ReconcileOf set) turns in
	// doubt about ReconcileOf, the execution that may have run: its
	// ExecutionID is ReconcileOf again, so that execution's late result
	// may still replace in doubt, and a repeat of the reconciler's
	// MarkInDoubt is [ErrNotHeld]. A record held by executionID that is
	// in doubt already, or done, is left as it is (nil); anything else is
	// [ErrNotHeld].
	MarkInDoubt(ctx context.Context, key ResultKey, executionID string) error
	// Get returns the record of key as of the store's clock (a write-like
	// claim past its lease reads as [ResultInDoubt]), or
	// [ErrResultNotFound] when there is none or it is gone. It changes
	// nothing; it is for operators and tests, never on a call's path.
	Get(ctx context.Context, key ResultKey) (ResultRecord, error)
}

// ResultKey names a key's record: the key, and the owner whose quota the
// record counts against.
type ResultKey struct {
	// Owner is whose record it is: "own_" and 32 hex digits, derived by
	// the engine from the audience and the whole actor of the call, so
	// that every record of one caller has one owner.
	Owner string
	// Key is the record's key: "idk_" and 32 hex digits, derived by the
	// engine from the caller's key (or the dedup window's inputs) and who
	// is calling what, so that it is never shared across actors or
	// procedures ([ValidResultKey]). Keys are unique across owners.
	Key string
}

// Valid reports whether k has the form the engine gives: a valid Key and
// an Owner of "own_" and 32 lowercase hex digits. Stores refuse other
// keys (they could hold a Redis hash tag's braces, say).
func (k ResultKey) Valid() bool { return ValidResultKey(k.Key) && ids.Valid("own_", k.Owner) }

// ResultQuota bounds what one owner's records keep. A zero field means
// no bound of that kind.
type ResultQuota struct {
	// Records bounds the owner's live records: in flight, done or in
	// doubt, until they are gone. It is counted at the claim.
	Records int
	// Bytes bounds the sum of [Result.Size] over the owner's live done
	// records. It is counted when a result is stored, so an owner may
	// overshoot it by one result; the claims after that are refused until
	// enough of its results are gone.
	Bytes int64
}

// Exceeded reports whether an owner that keeps records live records and
// bytes bytes of stored results is at q, so that a new record of the owner
// is refused ([ClaimQuotaExceeded]). A store that counts in a script or a
// statement applies the same comparison there.
func (q ResultQuota) Exceeded(records int, bytes int64) bool {
	return (q.Records > 0 && records >= q.Records) || (q.Bytes > 0 && bytes >= q.Bytes)
}

// ClaimRequest is what the engine claims a key with.
type ClaimRequest struct {
	// ResultKey is the record's key and owner.
	ResultKey
	// Quota bounds what the owner keeps: a claim that would make a new
	// record of an owner at its quota is [ClaimQuotaExceeded].
	Quota ResultQuota
	// Digest is the input digest of the call: a repeat with another digest
	// is [ClaimKeyReused].
	Digest      string
	ExecutionID string
	// Lease is how long the claim holds without a result: the longest the
	// execution may run, plus a grace.
	Lease time.Duration
	// WriteLike decides what a claim past its lease becomes: in doubt (the
	// execution may have had an effect) for a write-like capability,
	// released for a read.
	WriteLike bool
	// Retention is how long the record is kept once done or in doubt.
	Retention time.Duration
	// Reconcile asks to claim an in-doubt record for this execution, which
	// reconciles it (the capability has a Reconcile hook).
	Reconcile bool
}

// ClaimStatus is the answer of [ResultStore.Claim].
type ClaimStatus uint8

// The answers of a claim.
const (
	// ClaimAcquired: the execution holds the key; it runs.
	ClaimAcquired ClaimStatus = iota + 1
	// ClaimReconcile: the key was in doubt, and the execution holds it now
	// to reconcile it (Claim.ExecutionID held it before).
	ClaimReconcile
	// ClaimInFlight: another execution (Claim.ExecutionID) holds the key.
	ClaimInFlight
	// ClaimKeyReused: the key's record has another input digest.
	ClaimKeyReused
	// ClaimDone: the key's execution ended; Claim.Result is its result.
	ClaimDone
	// ClaimInDoubt: the key's execution (Claim.ExecutionID) may have had
	// an effect, and left no result.
	ClaimInDoubt
	// ClaimQuotaExceeded: the key has no live record, and its owner is at
	// the claim's quota: nothing changed, and nothing may run.
	ClaimQuotaExceeded
)

var claimStatusNames = [...]string{"", "acquired", "reconcile", "in_flight", "key_reused", "done", "in_doubt", "quota_exceeded"}

func (s ClaimStatus) String() string {
	if int(s) < len(claimStatusNames) && s > 0 {
		return claimStatusNames[s]
	}
	return "unknown"
}

// Claim is the answer of [ResultStore.Claim].
type Claim struct {
	Status ClaimStatus
	// ExecutionID is, for ClaimInFlight and ClaimInDoubt, the execution
	// holding (or that held) the key; for ClaimReconcile the execution
	// whose doubt is being reconciled; for ClaimDone the execution that
	// held the key when it was done.
	ExecutionID string
	// Result is the stored result, for ClaimDone.
	Result Result
}

// Result is how an execution ended, as the engine stores it for repeats.
type Result struct {
	// ExecutionID is the execution that produced the result (for a
	// reconciled doubt, the one in doubt).
	ExecutionID string
	// Code is the name of the execution's final code: "OK" when it
	// completed.
	Code string
	// Envelope is the engine's encoding of the execution's envelope.
	Envelope []byte
	// Sealed is the response, sealed by the engine (AES-GCM); nil when
	// there is none.
	Sealed []byte
	// KeyID names the engine's key Sealed was sealed with, so keys rotate.
	KeyID string
	// Late marks the result of an attempt that returned after its
	// execution had finalized, replacing in doubt.
	Late bool
}

// Size is what r counts against its owner's byte quota: the bytes of its
// fields, whatever a store's own overhead.
func (r Result) Size() int64 {
	return int64(len(r.ExecutionID) + len(r.Code) + len(r.Envelope) + len(r.Sealed) + len(r.KeyID))
}

// ResultState is where a key's record is in its life.
type ResultState uint8

// The states of a key's record.
const (
	ResultInFlight ResultState = iota + 1
	ResultDone
	ResultInDoubt
)

var resultStateNames = [...]string{"", "in_flight", "done", "in_doubt"}

func (s ResultState) String() string {
	if int(s) < len(resultStateNames) && s > 0 {
		return resultStateNames[s]
	}
	return "unknown"
}

// ParseResultState returns the state whose name is s.
func ParseResultState(s string) (ResultState, bool) {
	for i, name := range resultStateNames {
		if i > 0 && name == s {
			return ResultState(i), true
		}
	}
	return 0, false
}

// ResultRecord is a key's record as a store keeps it.
type ResultRecord struct {
	ResultKey
	Digest string
	State  ResultState
	// ExecutionID is the execution holding the key, or that held it last.
	ExecutionID string
	// ReconcileOf is, when ExecutionID claimed an in-doubt record to
	// reconcile it, the execution that had held it.
	ReconcileOf string
	WriteLike   bool
	ClaimedAt   time.Time
	// LeaseUntil is when a claim without a result turns in doubt
	// (write-like) or is released (read).
	LeaseUntil time.Time
	Retention  time.Duration
	// DoneAt is when the record turned done or in doubt (for a write-like
	// claim past its lease, LeaseUntil); zero while in flight.
	DoneAt time.Time
	// ExpiresAt is when the record is gone: DoneAt + Retention once done
	// or in doubt; while in flight, LeaseUntil (+ Retention for a
	// write-like claim, which turns in doubt then).
	ExpiresAt time.Time
	// Result is the stored result of a done record.
	Result Result
}

// The sentinel errors of the result store.
var (
	// ErrResultNotFound: Get found no record of the key (or it is gone).
	ErrResultNotFound = errors.New("agentsafe: no stored result for this key")
	// ErrNotHeld: the key is not held by the execution that writes it (its
	// claim was released, lapsed, or taken over to reconcile).
	ErrNotHeld = errors.New("agentsafe: the key is not held by this execution")
)

// ValidResultKey reports whether s has the form of a result key: "idk_"
// and 32 lowercase hex digits. Stores may refuse other keys.
func ValidResultKey(s string) bool { return ids.Valid("idk_", s) }
