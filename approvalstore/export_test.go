package approvalstore

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// WithClockOffset adds offset() to Redis TIME in every script of the Redis
// store, so tests can move its clock forward (conformance's Advance).
func WithClockOffset(offset func() time.Duration) Option {
	return optionFunc(func(c *config) { c.clockOffset = offset })
}

// RecordKey is the key of record id in s.
func RecordKey(s *Redis, id string) string { return s.recordKey(id) }

// PendingKey is the key of a requester's pending index in s.
func PendingKey(s *Redis, audience string, a store.Actor) string {
	return s.pendingKey(audience, a)
}

// SeedApproved writes n approved records for req with fresh ids, as Create
// and Decide by approver would leave them (stamped with this process's
// clock), in pipelines: benchmarks need many records fast.
func SeedApproved(ctx context.Context, s *Redis, req store.ApprovalRequest, approver store.Actor, n int) ([]string, error) {
	ids := make([]string, n)
	now := time.Now()
	stamp := func(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }
	vote, _ := json.Marshal(storedVote{ID: approver.ID, Tenant: approver.Tenant, Kind: approver.Kind, OnBehalfOf: approver.OnBehalfOf, Approve: true, At: now.UnixMicro()})
	votes := "[" + string(vote) + "]"
	const batch = 1000
	for start := 0; start < n; start += batch {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < min(start+batch, n); i++ {
				req.ID = store.NewApprovalID()
				ids[i] = req.ID
				fields := append(requestFields(req),
					"status", store.ApprovalApproved.String(),
					"requested_at", stamp(now), "expires_at", stamp(now.Add(req.ExpiresIn)),
					"approver_id", approver.ID, "approver_tenant", approver.Tenant, "approver_kind", approver.Kind,
					"approver_on_behalf_of", jsonList(approver.OnBehalfOf), "comment", "", "decided_at", stamp(now),
					"votes", votes)
				p.HSet(ctx, s.recordKey(req.ID), fields...)
				p.PExpire(ctx, s.recordKey(req.ID), req.ExpiresIn+s.cfg.retention)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// RecordFields are the fields the scripts read back.
var RecordFields = recordFields
