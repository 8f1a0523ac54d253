package agentsafepg

import (
	"context"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
)

const (
	defaultListLimit  = 100
	defaultMaxPending = 20
	defaultRetention  = 24 * time.Hour
)

// ApprovalOption configures [NewApprovalStore].
type ApprovalOption interface{ applyApproval(*approvalConfig) }

type approvalOption func(*approvalConfig)

func (f approvalOption) applyApproval(c *approvalConfig) { f(c) }

type approvalConfig struct {
	allowSelf  bool
	policy     func(ctx context.Context, rec store.ApprovalRecord, approver store.Actor) error
	maxPending int
	retention  time.Duration
	// skew is added to the database clock in every statement: zero
	// outside this package's tests, which move the clock forward.
	skew func() time.Duration
}

func defaultApprovalConfig() approvalConfig {
	return approvalConfig{maxPending: defaultMaxPending, retention: defaultRetention}
}

// clockSkew is the skew statements add to the database clock.
func (c *approvalConfig) clockSkew() time.Duration {
	if c.skew == nil {
		return 0
	}
	return c.skew()
}

// checkApprover applies the approver rule and the application's policy.
func (c *approvalConfig) checkApprover(ctx context.Context, rec store.ApprovalRecord, approver store.Actor) error {
	if err := store.CheckApprover(rec.Requester, approver, c.allowSelf); err != nil {
		return err
	}
	if c.policy != nil {
		return c.policy(ctx, rec, approver)
	}
	return nil
}

// WithSelfApproval lets requesters approve their own requests. By default
// the approver must not be the requester or anyone in its OnBehalfOf chain.
func WithSelfApproval() ApprovalOption {
	return approvalOption(func(c *approvalConfig) { c.allowSelf = true })
}

// WithApproverPolicy runs policy inside Decide, after the self-approval and
// tenant checks: return an error wrapping store.ErrApproverNotAllowed to
// refuse (for example when the approver's role does not match the record's
// approval type). By default any other actor of the tenant may decide.
func WithApproverPolicy(policy func(ctx context.Context, rec store.ApprovalRecord, approver store.Actor) error) ApprovalOption {
	return approvalOption(func(c *approvalConfig) { c.policy = policy })
}

// WithMaxPendingPerActor caps the pending records of one requester; over it
// Create fails with store.ErrTooManyPending (RESOURCE_EXHAUSTED). The
// default is 20; zero or less keeps it.
func WithMaxPendingPerActor(n int) ApprovalOption {
	return approvalOption(func(c *approvalConfig) {
		if n > 0 {
			c.maxPending = n
		}
	})
}

// WithRetention sets how long a record is kept after it stopped mattering
// (its expiry, or its lease once consumed); Create deletes a few records
// past it each time. The default is 24 hours; zero or less keeps it. It
// collects garbage and decides nothing.
func WithRetention(d time.Duration) ApprovalOption {
	return approvalOption(func(c *approvalConfig) {
		if d > 0 {
			c.retention = d
		}
	})
}
