package agentsafepg

import "time"

// WithClockSkew adds skew() to the database clock in every statement of
// the approval store, so tests can move its clock forward (conformance's
// Advance).
func WithClockSkew(skew func() time.Duration) ApprovalOption {
	return approvalOption(func(c *approvalConfig) { c.skew = skew })
}

// WithResultClockSkew has s add skew() to the database clock in every
// statement, so tests can move its clock forward (conformance's Advance).
func WithResultClockSkew(s *ResultStore, skew func() time.Duration) *ResultStore {
	s.skew = skew
	return s
}

// WithBudgetClock has s decide at now() instead of the database clock, so
// tests can check a window's edges to the microsecond.
func WithBudgetClock(s *BudgetStore, now func() time.Time) *BudgetStore {
	s.now = now
	return s
}

// WithBudgetClockSkew has s add skew() to the database clock in every
// statement, so tests can move it forward.
func WithBudgetClockSkew(s *BudgetStore, skew func() time.Duration) *BudgetStore {
	s.skew = skew
	return s
}
