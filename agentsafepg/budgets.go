package agentsafepg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// BudgetStore keeps the reservations of budgets in PostgreSQL, so that a
// budget holds across every server instance that shares the database. It
// implements [store.BudgetStore].
//
// A budget key is one row of agentsafe.budgets, its reservations rows of
// agentsafe.budget_reservations. Reserve is one call of a SQL function
// whose first statement locks the key's row (an INSERT that finds it
// locks it too): under READ COMMITTED, a sum and an insert that did not
// would let two instances both fit under the limit. It trims what aged
// out of the window, sums, checks and adds under that lock, by the
// database's clock (clock_timestamp()), never an instance's. Release is
// one DELETE of the releasing execution's row; Read one SELECT. Each is one
// round trip, and safe to repeat after a lost reply. Keys whose every
// reservation stopped counting are deleted by later reservations of other
// keys, a few at a time.
type BudgetStore struct {
	pool *pgxpool.Pool
	// now pins the clock in every statement, skew moves it: nil (the
	// database's clock) outside this package's tests.
	now  func() time.Time
	skew func() time.Duration
}

var _ store.BudgetStore = (*BudgetStore)(nil)

// NewBudgetStore returns a budget store on pool. It fails when the
// database cannot be reached or lacks the schema ([Migrate] creates it).
// The store never closes pool.
func NewBudgetStore(pool *pgxpool.Pool) (*BudgetStore, error) {
	if pool == nil {
		return nil, errors.New("agentsafepg: NewBudgetStore needs a pool")
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := checkSchema(ctx, pool, schemaVersion); err != nil {
		return nil, err
	}
	return &BudgetStore{pool: pool}, nil
}

// clock is the time statements decide at, and the skew added to the
// database's clock otherwise: nil and zero outside tests.
func (s *BudgetStore) clock() (*time.Time, time.Duration) {
	var skew time.Duration
	if s.skew != nil {
		skew = s.skew()
	}
	if s.now == nil {
		return nil, skew
	}
	t := s.now()
	return &t, skew
}

// Reserve implements [store.BudgetStore]: one call of
// agentsafe.budget_reserve, under the key's row lock.
func (s *BudgetStore) Reserve(ctx context.Context, req store.BudgetRequest) (store.BudgetReservation, error) {
	if err := store.CheckBudgetRequest(req); err != nil {
		return store.BudgetReservation{}, err
	}
	var (
		res   store.BudgetReservation
		after int64
	)
	now, skew := s.clock()
	err := s.pool.QueryRow(ctx, "SELECT * FROM agentsafe.budget_reserve($1, $2, $3, $4, $5, $6, $7::timestamptz, $8)",
		req.Key, req.ExecutionID, req.Amount, req.Limit, req.Window, req.Overdraft, now, skew).
		Scan(&res.Reserved, &res.Overdraft, &res.Spent, &after)
	if err != nil {
		return store.BudgetReservation{}, err
	}
	res.RetryAfter = time.Duration(after) * time.Microsecond
	return res, nil
}

// Release implements [store.BudgetStore]: one DELETE of the execution's
// own reservation.
func (s *BudgetStore) Release(ctx context.Context, req store.BudgetRequest) error {
	_, err := s.pool.Exec(ctx, "DELETE FROM agentsafe.budget_reservations WHERE key = $1 AND execution_id = $2", req.Key, req.ExecutionID)
	return err
}

// Read implements [store.BudgetStore].
func (s *BudgetStore) Read(ctx context.Context, key string, window time.Duration) (store.BudgetUsage, error) {
	if window <= 0 {
		return store.BudgetUsage{}, fmt.Errorf("agentsafepg: read of key %q over window %s: want a positive window", key, window)
	}
	var u store.BudgetUsage
	now, skew := s.clock()
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(amount), 0)::bigint, count(*), count(*) FILTER (WHERE overdraft),
			coalesce(sum(amount) FILTER (WHERE overdraft), 0)::bigint
		FROM agentsafe.budget_reservations WHERE key = $1 AND reserved_at > coalesce($3::timestamptz, clock_timestamp() + $4::interval) - $2::interval`,
		key, window, now, skew).Scan(&u.Spent, &u.Reservations, &u.Overdrafts, &u.Overdrawn)
	return u, err
}
