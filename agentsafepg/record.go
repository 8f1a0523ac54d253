package agentsafepg

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// clock is the database clock of a read, as a FROM item: its first
// parameter is the skew (zero outside tests).
const clock = "(SELECT clock_timestamp() + $1::interval AS t) c"

// statusAsOf is a record's status as of the clock of the read.
const statusAsOf = "agentsafe.approval_status(a.status, a.expires_at, a.consumed_at + a.lease, c.t)"

// recordColumns is the select list of a record (of the table, or of a
// function returning its rows, as a), with status as the status column;
// the payload is selected separately, since List never reads it.
func recordColumns(status string) string {
	return `a.id, a.audience, a.procedure, a.approval_type, a.quorum,
		a.requester_id, a.requester_tenant, a.requester_kind, a.requester_on_behalf_of,
		a.requested_by, a.digest, a.view_text, a.reasons, a.side_effect, a.risk, a.expires_in, ` +
		status + `, a.requested_at, a.expires_at, a.votes,
		a.approver_id, a.approver_tenant, a.approver_kind, a.approver_on_behalf_of, a.comment, a.decided_at,
		a.consumed_by, a.consumed_at, a.consumed_at + a.lease,
		a.outcome_status, a.outcome_code, a.outcome_late, a.outcome_at, a.preview_text, a.preview_digest`
}

// pgtimestamptz is a nullable timestamp; NULL reads as the zero time.
type pgtimestamptz = pgtype.Timestamptz

func timeOf(t pgtimestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

// collect scans the records of rows, with the payload as the last
// column when withPayload.
func collect(rows pgx.Rows, withPayload bool) ([]store.ApprovalRecord, error) {
	defer rows.Close()
	var out []store.ApprovalRecord
	for rows.Next() {
		var (
			r                                      store.ApprovalRecord
			status, outcomeStatus                  string
			votes                                  []byte
			decidedAt, consumedAt, leaseUntil, oAt pgtimestamptz
			payload                                []byte
		)
		dest := []any{&r.ID, &r.Audience, &r.Procedure, &r.Type, &r.Quorum,
			&r.Requester.ID, &r.Requester.Tenant, &r.Requester.Kind, &r.Requester.OnBehalfOf,
			&r.RequestedBy, &r.Digest, &r.View, &r.Reasons, &r.SideEffect, &r.Risk, &r.ExpiresIn,
			&status, &r.RequestedAt, &r.ExpiresAt, &votes,
			&r.Approver.ID, &r.Approver.Tenant, &r.Approver.Kind, &r.Approver.OnBehalfOf, &r.Comment, &decidedAt,
			&r.ConsumedBy, &consumedAt, &leaseUntil,
			&outcomeStatus, &r.Outcome.Code, &r.Outcome.Late, &oAt, &r.PreviewText, &r.PreviewDigest}
		if withPayload {
			dest = append(dest, &payload)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		var ok bool
		if r.Status, ok = store.ParseApprovalStatus(status); !ok {
			return nil, fmt.Errorf("agentsafepg: record %s has the status %q", r.ID, status)
		}
		if outcomeStatus != "" {
			if r.Outcome.Status, ok = store.ParseApprovalStatus(outcomeStatus); !ok {
				return nil, fmt.Errorf("agentsafepg: record %s has the outcome %q", r.ID, outcomeStatus)
			}
		}
		var err error
		if r.Votes, err = decodeVotes(votes); err != nil {
			return nil, fmt.Errorf("agentsafepg: record %s: %w", r.ID, err)
		}
		r.DecidedAt, r.ConsumedAt, r.LeaseUntil, r.Outcome.At = timeOf(decidedAt), timeOf(consumedAt), timeOf(leaseUntil), timeOf(oAt)
		r.Requester.OnBehalfOf, r.Approver.OnBehalfOf, r.Reasons = orNil(r.Requester.OnBehalfOf), orNil(r.Approver.OnBehalfOf), orNil(r.Reasons)
		if len(payload) > 0 {
			r.Payload = payload
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// storedVote is a vote as agentsafe.approval_vote writes it.
type storedVote struct {
	ID         string   `json:"id"`
	Tenant     string   `json:"tenant"`
	Kind       string   `json:"kind"`
	OnBehalfOf []string `json:"obo"`
	Approve    bool     `json:"approve"`
	Comment    string   `json:"comment"`
	At         int64    `json:"at"` // µs since the epoch
}

func decodeVotes(b []byte) ([]store.Vote, error) {
	var stored []storedVote
	if err := json.Unmarshal(b, &stored); err != nil {
		return nil, fmt.Errorf("votes: %w", err)
	}
	var out []store.Vote
	for _, v := range stored {
		out = append(out, store.Vote{
			Approver: store.Actor{ID: v.ID, Tenant: v.Tenant, Kind: v.Kind, OnBehalfOf: orNil(v.OnBehalfOf)},
			Approve:  v.Approve, Comment: v.Comment, At: time.UnixMicro(v.At),
		})
	}
	return out, nil
}

// list is s as a text[] parameter: never NULL.
func list(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// orNil is s, or nil when it is empty: what was stored as nil reads nil.
func orNil(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// payload is p as a bytea parameter: NULL when empty.
func payload(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return p
}
