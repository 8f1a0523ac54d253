package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentsafe/agentsafe/internal/ids"
)

// BudgetStore is the seam between the engine and where the reservations
// of budgets live (middleware.Budget): what a capability's calls have
// spent over a rolling window, for one budget key, across every instance.
// Implementations are in package budgetstore (memory, Redis) and
// agentsafepg; package conformance checks any implementation against this
// contract (RunBudgetStore).
//
// A budget key holds reservations {execution id, amount, time,
// overdraft}. A reservation counts while its age is under the window:
// from its time t up to, not including, t + Window.
//
// The contract, for every method:
//   - Time is the store's own clock (Redis: TIME inside the script; a
//     database's clock), never the caller's: reservations are stamped
//     and aged by it.
//   - Every method is one atomic step: Reserve checks and adds in the
//     same step, so in no window, on any number of instances, do the
//     reservations of a key exceed its limit, except overdrafts, which
//     are recorded as such.
//   - Every method is safe to repeat after a lost reply: Reserve is
//     idempotent per execution id (a repeat answers as the first
//     reservation did, adding nothing), Release repeated is a no-op.
//   - Any error is a store failure: the engine answers
//     BUDGET_UNAVAILABLE, and nothing runs.
type BudgetStore interface {
	// Reserve adds the reservation {req.ExecutionID, req.Amount, now} to
	// req.Key when the amounts of the key's reservations younger than
	// req.Window, plus req.Amount, are at most req.Limit — or, with
	// req.Overdraft, whatever they come to, the reservation then marked
	// an overdraft when it takes the key past the limit. Otherwise nothing
	// changes, and the answer says how much is spent and when enough will
	// have aged out of the window for req.Amount to fit.
	//
	// A key that already holds a reservation of req.ExecutionID within the
	// window answers Reserved, as the first Reserve did, and adds nothing.
	// Reservations older than the window may be removed by any step.
	Reserve(ctx context.Context, req BudgetRequest) (BudgetReservation, error)
	// Release removes the reservation req.ExecutionID holds on req.Key,
	// in one atomic step, so that what it held is free again at once.
	// req is the request the reservation was made with (a store may find
	// the reservation by its amount too; Limit, Window and Overdraft do
	// not matter). For any other (no reservation of req.ExecutionID on
	// req.Key, another execution's reservations) it is a no-op that
	// returns nil: a release never takes away what another execution
	// holds.
	Release(ctx context.Context, req BudgetRequest) error
	// Read returns what the reservations of key younger than window add up
	// to, as of the store's clock. It changes nothing the engine could
	// see; it is for Engine.Budget, operators and tests.
	Read(ctx context.Context, key string, window time.Duration) (BudgetUsage, error)
}

// BudgetRequest is one reservation the engine asks for.
type BudgetRequest struct {
	// Key is the budget key: "bgt_" and 32 hex digits, derived by the
	// engine from the audience, the budget's name and who spends under
	// its Per ([ValidBudgetKey]).
	Key         string
	ExecutionID string
	// Amount is what the call spends: 0 or more.
	Amount int64
	// Limit is what the reservations of one window may add up to: more
	// than 0.
	Limit int64
	// Window is the length of the rolling window: more than 0.
	Window time.Duration
	// Overdraft reserves past the limit if need be: an approved resume of
	// a call that a require_approval budget escalated.
	Overdraft bool
}

// BudgetReservation is the answer of [BudgetStore.Reserve].
type BudgetReservation struct {
	// Reserved reports that the key holds the execution's reservation.
	Reserved bool
	// Overdraft marks a reservation that took the key past its limit.
	Overdraft bool
	// Spent is what the reservations within the window add up to as of
	// the step: with this execution's when Reserved, without it when not.
	Spent int64
	// RetryAfter is, when not Reserved, how long until enough of the
	// window's reservations have aged out for the amount to fit; zero
	// when it never will (the amount is over the limit).
	RetryAfter time.Duration
}

// BudgetUsage is what [BudgetStore.Read] finds on a key.
type BudgetUsage struct {
	// Spent is what the reservations within the window add up to,
	// overdrafts included.
	Spent int64
	// Reservations is how many there are.
	Reservations int
	// Overdrafts is how many of them are overdrafts, and Overdrawn what
	// those add up to.
	Overdrafts int
	Overdrawn  int64
}

// ValidBudgetKey reports whether s has the form of a budget key: "bgt_"
// and 32 lowercase hex digits. Stores may refuse other keys.
func ValidBudgetKey(s string) bool { return ids.Valid(BudgetKeyPrefix, s) }

// BudgetKeyPrefix begins every budget key.
const BudgetKeyPrefix = "bgt_"

// ErrBudgetRequest is what a store answers a malformed [BudgetRequest]
// with (see [CheckBudgetRequest]); the engine never sends one.
var ErrBudgetRequest = errors.New("agentsafe: malformed budget request")

// CheckBudgetRequest refuses a request no store may act on: a malformed
// key, no execution id, a negative amount, a limit or window that is not
// positive. Every store checks it first, so that all refuse alike.
func CheckBudgetRequest(req BudgetRequest) error {
	switch {
	case !ValidBudgetKey(req.Key):
		return fmt.Errorf("%w: key %q: want %q and 32 lowercase hex digits", ErrBudgetRequest, req.Key, BudgetKeyPrefix)
	case req.ExecutionID == "":
		return fmt.Errorf("%w: no execution id", ErrBudgetRequest)
	case req.Amount < 0:
		return fmt.Errorf("%w: negative amount %d", ErrBudgetRequest, req.Amount)
	case req.Limit <= 0:
		return fmt.Errorf("%w: limit %d: want more than 0", ErrBudgetRequest, req.Limit)
	case req.Window <= 0:
		return fmt.Errorf("%w: window %s: want more than 0", ErrBudgetRequest, req.Window)
	}
	return nil
}

// BudgetRetryAfter is the rule every store computes RetryAfter by: given
// the ages-out of the window's reservations, oldest first (ends[i] is
// when reservation i stops counting, amounts[i] its amount), how long
// from now until spent + amount ≤ limit. Zero when amount alone is over
// limit (it never fits) or it fits now.
func BudgetRetryAfter(now time.Time, ends []time.Time, amounts []int64, spent, amount, limit int64) time.Duration {
	if amount > limit {
		return 0
	}
	need := spent + amount - limit
	for i := range ends {
		if need <= 0 {
			break
		}
		need -= amounts[i]
		if need <= 0 {
			return ends[i].Sub(now)
		}
	}
	return 0
}
