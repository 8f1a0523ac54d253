package approvalstore

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// A record is one Redis hash of explicit fields, so that status and
// consumer live and vanish together (eviction can only make a record
// unknown, which fails closed), and so that redis-cli shows what it holds:
//
//	id, audience, procedure, type, requested_by, digest, view   strings
//	requester_id, requester_tenant, requester_kind              strings
//	requester_on_behalf_of, reasons                             JSON lists
//	side_effect, risk                                           names ("write", "high")
//	expires_in                                                  microseconds
//	status                                                      pending, approved, rejected,
//	                                                            consumed, completed or failed
//	requested_at, expires_at                                    unix microseconds (Redis TIME)
//	approver_id, approver_tenant, approver_kind, comment        strings, once decided
//	approver_on_behalf_of                                       JSON list
//	decided_at                                                  unix microseconds
//	consumed_by, consumed_at, lease_until                       once consumed
//	outcome, outcome_at                                         code name ("OK"), once recorded
//
// expired and in_doubt are never stored: they are read from the time.

// recordFields are all the fields of a record, in the order the scripts
// return their values.
var recordFields = []string{
	"id", "audience", "procedure", "type", "requested_by", "digest", "view",
	"requester_id", "requester_tenant", "requester_kind", "requester_on_behalf_of", "reasons",
	"side_effect", "risk", "expires_in", "status", "requested_at", "expires_at",
	"approver_id", "approver_tenant", "approver_kind", "approver_on_behalf_of", "comment", "decided_at",
	"consumed_by", "consumed_at", "lease_until", "outcome", "outcome_at",
}

// requestFields returns the hash fields of a new record, as the create
// script's field/value arguments. The script adds status and the times.
func requestFields(req middleware.ApprovalRequest) []any {
	return []any{
		"id", req.ID,
		"audience", req.Audience,
		"procedure", req.Procedure,
		"type", req.Type,
		"requester_id", req.Requester.ID,
		"requester_tenant", req.Requester.Tenant,
		"requester_kind", req.Requester.Kind,
		"requester_on_behalf_of", jsonList(req.Requester.OnBehalfOf),
		"requested_by", req.RequestedBy,
		"digest", req.Digest,
		"view", req.View,
		"reasons", jsonList(req.Reasons),
		"side_effect", req.SideEffect.String(),
		"risk", req.Risk.String(),
		"expires_in", strconv.FormatInt(req.ExpiresIn.Microseconds(), 10),
	}
}

// jsonList encodes a list of strings; nil and empty give "".
func jsonList(l []string) string {
	if len(l) == 0 {
		return ""
	}
	b, _ := json.Marshal(l) // a []string always marshals
	return string(b)
}

// decodeRecord builds a record from a hash's fields. A record that cannot
// be read is an error, never a guess: the caller fails closed.
func decodeRecord(fields map[string]string) (middleware.ApprovalRecord, error) {
	var r middleware.ApprovalRecord
	d := recordDecoder{f: fields}
	r.ID = d.f["id"]
	r.Audience = d.f["audience"]
	r.Procedure = d.f["procedure"]
	r.Type = d.f["type"]
	r.Requester = d.actor("requester")
	r.RequestedBy = d.f["requested_by"]
	r.Digest = d.f["digest"]
	r.View = d.f["view"]
	r.Reasons = d.list("reasons")
	r.SideEffect = middleware.SideEffect(d.enum("side_effect", func(i int) string { return middleware.SideEffect(i).String() }))
	r.Risk = middleware.Risk(d.enum("risk", func(i int) string { return middleware.Risk(i).String() }))
	r.ExpiresIn = time.Duration(d.int("expires_in")) * time.Microsecond
	r.RequestedAt = d.time("requested_at")
	r.ExpiresAt = d.time("expires_at")
	r.DecidedAt = d.time("decided_at")
	r.ConsumedAt = d.time("consumed_at")
	r.LeaseUntil = d.time("lease_until")
	r.OutcomeAt = d.time("outcome_at")
	if _, decided := d.f["decided_at"]; decided {
		r.Approver = d.actor("approver")
	}
	r.Comment = d.f["comment"]
	r.ConsumedBy = d.f["consumed_by"]
	if s, ok := d.f["outcome"]; ok {
		code, known := middleware.ParseCode(s)
		if !known {
			d.fail("outcome", s)
		}
		r.Outcome = code
	}
	status, ok := middleware.ParseApprovalStatus(d.f["status"])
	if !ok {
		d.fail("status", d.f["status"])
	}
	r.Status = status
	if r.ID == "" {
		d.fail("id", "")
	}
	return r, d.err
}

// recordDecoder reads typed fields, keeping the first error.
type recordDecoder struct {
	f   map[string]string
	err error
}

func (d *recordDecoder) fail(field, value string) {
	if d.err == nil {
		d.err = fmt.Errorf("approvalstore: record field %s has an unreadable value %q", field, value)
	}
}

func (d *recordDecoder) int(field string) int64 {
	s, ok := d.f[field]
	if !ok || s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		d.fail(field, s)
	}
	return n
}

func (d *recordDecoder) time(field string) time.Time {
	if n := d.int(field); n != 0 {
		return time.UnixMicro(n)
	}
	return time.Time{}
}

func (d *recordDecoder) list(field string) []string {
	s := d.f[field]
	if s == "" {
		return nil
	}
	var l []string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		d.fail(field, s)
	}
	return l
}

func (d *recordDecoder) actor(prefix string) middleware.Actor {
	return middleware.Actor{
		ID:         d.f[prefix+"_id"],
		Tenant:     d.f[prefix+"_tenant"],
		Kind:       d.f[prefix+"_kind"],
		OnBehalfOf: d.list(prefix + "_on_behalf_of"),
	}
}

// enum finds the value whose name is the field's: the middleware's enums
// name themselves but have no parser.
func (d *recordDecoder) enum(field string, name func(int) string) uint8 {
	s := d.f[field]
	for i := range 256 {
		if name(i) == s {
			return uint8(i)
		}
	}
	d.fail(field, s)
	return 0
}
