package approvalstore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
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
//	quorum                                                      approvers needed (0 means 1)
//	preview_text, preview_digest                                strings, if the capability has a preview
//	payload                                                     opaque bytes, if any
//	status                                                      pending, approved, rejected,
//	                                                            consumed, completed, failed
//	                                                            or in_doubt (recorded so)
//	requested_at, expires_at                                    unix microseconds (Redis TIME)
//	votes                                                       JSON list of votes, oldest first
//	approver_id, approver_tenant, approver_kind, comment        strings, of the deciding vote
//	approver_on_behalf_of                                       JSON list
//	decided_at                                                  unix microseconds
//	consumed_by, consumed_at, lease_until                       once consumed
//	outcome, outcome_late, outcome_at                           code name ("OK"), "1" or "0",
//	                                                            unix microseconds, once recorded
//
// expired, and in_doubt past a lease, are never stored: they are read from
// the time.

// recordFields are all the fields of a record, in the order the scripts
// return their values.
var recordFields = []string{
	"id", "audience", "procedure", "type", "requested_by", "digest", "view",
	"requester_id", "requester_tenant", "requester_kind", "requester_on_behalf_of", "reasons",
	"side_effect", "risk", "expires_in", "quorum", "status", "requested_at", "expires_at", "votes",
	"approver_id", "approver_tenant", "approver_kind", "approver_on_behalf_of", "comment", "decided_at",
	"consumed_by", "consumed_at", "lease_until", "outcome", "outcome_late", "outcome_at",
	"preview_text", "preview_digest", "payload",
}

// listFields are the fields List reads: all but the payload.
var listFields = slices.DeleteFunc(slices.Clone(recordFields), func(f string) bool { return f == "payload" })

// requestFields returns the hash fields of a new record, as the create
// script's field/value arguments. The script adds status and the times.
func requestFields(req store.ApprovalRequest) []any {
	f := []any{
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
		"side_effect", req.SideEffect,
		"risk", req.Risk,
		"expires_in", strconv.FormatInt(req.ExpiresIn.Microseconds(), 10),
		"quorum", strconv.Itoa(req.Quorum),
	}
	if req.PreviewDigest != "" {
		f = append(f, "preview_text", req.PreviewText, "preview_digest", req.PreviewDigest)
	}
	if len(req.Payload) > 0 {
		f = append(f, "payload", req.Payload)
	}
	return f
}

// storedVote is a vote as the votes field holds it. Go encodes it without
// its time; the decide script adds "at" from Redis TIME.
type storedVote struct {
	ID         string   `json:"id"`
	Tenant     string   `json:"tenant,omitempty"`
	Kind       string   `json:"kind,omitempty"`
	OnBehalfOf []string `json:"on_behalf_of,omitempty"`
	Approve    bool     `json:"approve"`
	Comment    string   `json:"comment,omitempty"`
	At         int64    `json:"at,omitempty"` // unix microseconds
}

// voteJSON encodes d as the decide script takes it: a JSON object without
// "at".
func voteJSON(d store.Decision) string {
	a := d.Approver
	b, _ := json.Marshal(storedVote{ID: a.ID, Tenant: a.Tenant, Kind: a.Kind, OnBehalfOf: a.OnBehalfOf, Approve: d.Approve, Comment: d.Comment}) // always marshals
	return string(b)
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
func decodeRecord(fields map[string]string) (store.ApprovalRecord, error) {
	var r store.ApprovalRecord
	d := recordDecoder{f: fields}
	r.ID = d.f["id"]
	r.Audience = d.f["audience"]
	r.Procedure = d.f["procedure"]
	r.Type = d.f["type"]
	r.Requester = d.actor("requester")
	r.RequestedBy = d.f["requested_by"]
	r.Digest = d.f["digest"]
	r.View = d.f["view"]
	r.PreviewText = d.f["preview_text"]
	r.PreviewDigest = d.f["preview_digest"]
	r.Reasons = d.list("reasons")
	r.SideEffect = d.f["side_effect"]
	r.Risk = d.f["risk"]
	r.ExpiresIn = time.Duration(d.int("expires_in")) * time.Microsecond
	r.Quorum = int(d.int("quorum"))
	if p, ok := d.f["payload"]; ok {
		r.Payload = []byte(p)
	}
	r.Votes = d.votes("votes")
	r.RequestedAt = d.time("requested_at")
	r.ExpiresAt = d.time("expires_at")
	r.DecidedAt = d.time("decided_at")
	r.ConsumedAt = d.time("consumed_at")
	r.LeaseUntil = d.time("lease_until")
	if _, decided := d.f["decided_at"]; decided {
		r.Approver = d.actor("approver")
	}
	r.Comment = d.f["comment"]
	r.ConsumedBy = d.f["consumed_by"]
	status, ok := store.ParseApprovalStatus(d.f["status"])
	if !ok {
		d.fail("status", d.f["status"])
	}
	r.Status = status
	if code, ok := d.f["outcome"]; ok {
		if code == "" {
			d.fail("outcome", code)
		}
		// The record's stored status is the outcome's.
		r.Outcome = store.Outcome{Status: status, Code: code, Late: d.f["outcome_late"] == "1", At: d.time("outcome_at")}
	}
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

// votes reads a JSON list of stored votes.
func (d *recordDecoder) votes(field string) []store.Vote {
	s := d.f[field]
	if s == "" {
		return nil
	}
	var stored []storedVote
	if err := json.Unmarshal([]byte(s), &stored); err != nil {
		d.fail(field, s)
		return nil
	}
	votes := make([]store.Vote, len(stored))
	for i, v := range stored {
		a := store.Actor{ID: v.ID, Tenant: v.Tenant, Kind: v.Kind, OnBehalfOf: v.OnBehalfOf}
		votes[i] = store.Vote{Approver: a, Approve: v.Approve, Comment: v.Comment, At: time.UnixMicro(v.At)}
	}
	return votes
}

func (d *recordDecoder) actor(prefix string) store.Actor {
	return store.Actor{
		ID:         d.f[prefix+"_id"],
		Tenant:     d.f[prefix+"_tenant"],
		Kind:       d.f[prefix+"_kind"],
		OnBehalfOf: d.list(prefix + "_on_behalf_of"),
	}
}
