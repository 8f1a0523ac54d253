package approvalconsole

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// Approval is one approval record as the API shows it: what an approver
// needs to decide, and the decision once made. It carries no input other
// than the redacted view, and no digest.
type Approval struct {
	ID string `json:"id"`
	// Preview is the effect the call would have, as the server computed
	// it from its state when the approval was requested (the capability's
	// Preview): plain text, shown first and as text. The approval runs
	// only while the state is what it was computed from. Empty for a
	// capability without a preview.
	Preview   string    `json:"preview,omitempty"`
	Procedure string    `json:"procedure"`
	Type      string    `json:"type,omitempty"`
	Requester Person    `json:"requester"`
	Reasons   []string  `json:"reasons"`
	View      string    `json:"view"`
	Effect    string    `json:"sideEffect"`
	Risk      string    `json:"risk"`
	Status    string    `json:"status"`
	Requested time.Time `json:"requestedAt"`
	Expires   time.Time `json:"expiresAt"`
	// SelfRequested says the approver asking made the request or is in its
	// OnBehalfOf chain: the store refuses their decision (unless it allows
	// self-approval), and the page says so up front.
	SelfRequested bool `json:"selfRequested"`
	// Quorum is how many distinct approvers must approve (1 unless the
	// capability asks for more).
	Quorum int `json:"quorum"`
	// Votes are the votes counted so far, oldest first: the approvals, and
	// the rejection that ended the record, if any.
	Votes    []VoteView `json:"votes"`
	Approver *Person    `json:"approver,omitempty"`
	Comment  string     `json:"comment,omitempty"`
	Decided  *time.Time `json:"decidedAt,omitempty"`
}

// Person is an actor as the API shows it.
type Person struct {
	ID         string   `json:"id"`
	Tenant     string   `json:"tenant,omitempty"`
	Kind       string   `json:"kind,omitempty"`
	OnBehalfOf []string `json:"onBehalfOf,omitempty"`
}

// VoteView is one approver's vote as the API shows it.
type VoteView struct {
	Approver Person    `json:"approver"`
	Approve  bool      `json:"approve"`
	Comment  string    `json:"comment,omitempty"`
	At       time.Time `json:"at"`
}

func person(a middleware.Actor) Person {
	return Person{ID: a.ID, Tenant: a.Tenant, Kind: a.Kind, OnBehalfOf: a.OnBehalfOf}
}

// Session is what GET /api/session returns: who the console takes the
// caller for, the token their decisions must carry in TokenHeader, and
// how often the page polls the pending list (see [WithPollInterval]).
type Session struct {
	Approver    Person `json:"approver"`
	Token       string `json:"csrfToken"`
	TokenHeader string `json:"csrfHeader"`
	// PollMillis is the page's poll interval in milliseconds.
	PollMillis int64 `json:"pollMillis"`
}

// DecisionRequest is the body of POST /api/approvals/{id}/decision.
type DecisionRequest struct {
	// Approve is required: true approves, false rejects.
	Approve *bool  `json:"approve"`
	Comment string `json:"comment"`
}

// ErrorBody is every refusal's JSON body.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

const (
	maxBody    = 16 << 10
	maxComment = 2000
)

func (c *console) view(rec store.ApprovalRecord) string {
	if c.cfg.redact != nil {
		return c.cfg.redact(rec)
	}
	return rec.View
}

func (c *console) approval(rec store.ApprovalRecord, approver middleware.Actor) Approval {
	a := Approval{
		ID: rec.ID, Preview: rec.PreviewText, Procedure: rec.Procedure, Type: rec.Type, Requester: person(rec.Requester),
		Reasons: rec.Reasons, View: c.view(rec), Effect: rec.SideEffect, Risk: rec.Risk,
		Status: rec.Status.String(), Requested: rec.RequestedAt, Expires: rec.ExpiresAt,
		SelfRequested: errors.Is(store.CheckApprover(rec.Requester, approver, false), store.ErrSelfApproval),
		Quorum:        max(rec.Quorum, 1), Votes: make([]VoteView, 0, len(rec.Votes)),
	}
	if a.Reasons == nil {
		a.Reasons = []string{}
	}
	for _, v := range rec.Votes {
		a.Votes = append(a.Votes, VoteView{Approver: person(v.Approver), Approve: v.Approve, Comment: v.Comment, At: v.At})
	}
	if !rec.DecidedAt.IsZero() {
		p, at := person(rec.Approver), rec.DecidedAt
		a.Approver, a.Comment, a.Decided = &p, rec.Comment, &at
	}
	return a
}

// approver authorizes the request, or answers 401.
func (c *console) approver(w http.ResponseWriter, r *http.Request) (middleware.Actor, bool) {
	a, err := c.authorize(r)
	if err != nil || a.ID == "" {
		msg := "sign in as an approver to use the approval console"
		if err != nil {
			msg += ": " + err.Error()
		}
		fail(w, http.StatusUnauthorized, "unauthorized", msg)
		return middleware.Actor{}, false
	}
	return a, true
}

func (c *console) session(w http.ResponseWriter, r *http.Request) {
	a, ok := c.approver(w, r)
	if !ok {
		return
	}
	reply(w, http.StatusOK, Session{Approver: person(a), Token: c.token(r, a), TokenHeader: TokenHeader, PollMillis: max(c.cfg.poll.Milliseconds(), 1)})
}

func (c *console) list(w http.ResponseWriter, r *http.Request) {
	a, ok := c.approver(w, r)
	if !ok {
		return
	}
	// The engine's List sees only its audience, and the store filters by
	// tenant before its limit: another tenant's records never take a place.
	recs, err := c.eng.List(r.Context(), store.ApprovalFilter{Tenant: a.Tenant, Status: store.ApprovalPending})
	if err != nil {
		unavailable(w)
		return
	}
	out := make([]Approval, 0, len(recs))
	for _, rec := range recs {
		if rec.Requester.Tenant == a.Tenant { // should a store ignore the tenant, it still leaks nothing
			out = append(out, c.approval(rec, a))
		}
	}
	tag := listETag(a, out)
	w.Header().Set("ETag", tag)
	if etagMatch(r.Header.Values("If-None-Match"), tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	reply(w, http.StatusOK, struct {
		Approvals []Approval `json:"approvals"`
	}{out})
}

// listETag is the strong validator of a pending list: a hash of whom it
// is for (selfRequested depends on the approver and whom they act for)
// and of the id, status and decision time of each approval in it, in
// order. Everything else an Approval shows is fixed when the request is
// made.
func listETag(approver middleware.Actor, list []Approval) string {
	h := sha256.New()
	field := func(s string) {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(s))))
		h.Write([]byte(s))
	}
	field("agentsafe approval console list v1")
	field(approver.Tenant)
	field(approver.ID)
	field(strconv.Itoa(len(approver.OnBehalfOf)))
	for _, id := range approver.OnBehalfOf {
		field(id)
	}
	for _, a := range list {
		field(a.ID)
		field(a.Status)
		if a.Decided != nil {
			field(a.Decided.UTC().Format(time.RFC3339Nano))
		} else {
			field("")
		}
	}
	return `"` + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18]) + `"`
}

// etagMatch reports whether an If-None-Match header (all its lines) names
// tag, or is "*". If-None-Match compares weakly (RFC 9110, 13.1.2), so a
// W/ prefix does not matter.
func etagMatch(lines []string, tag string) bool {
	for _, line := range lines {
		for t := range strings.SplitSeq(line, ",") {
			t = strings.TrimSpace(t)
			if t == "*" || strings.TrimPrefix(t, "W/") == tag {
				return true
			}
		}
	}
	return false
}

func (c *console) get(w http.ResponseWriter, r *http.Request) {
	a, ok := c.approver(w, r)
	if !ok {
		return
	}
	rec, ok := c.record(w, r, a)
	if !ok {
		return
	}
	reply(w, http.StatusOK, c.approval(rec, a))
}

// record reads the record named in the path, as a's to see, or answers:
// through the engine, which sees only its audience (a record of another
// deployment sharing the store, like a malformed id, is not found), and
// only in a's tenant.
func (c *console) record(w http.ResponseWriter, r *http.Request, a middleware.Actor) (store.ApprovalRecord, bool) {
	rec, err := c.eng.Get(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, store.ErrApprovalNotFound) || err == nil && rec.Requester.Tenant != a.Tenant:
		fail(w, http.StatusNotFound, "not_found", "no such approval")
		return store.ApprovalRecord{}, false
	case err != nil:
		unavailable(w)
		return store.ApprovalRecord{}, false
	}
	return rec, true
}

// decide records a decision: authorized, same-origin, with the approver's
// token, through the engine (so the store applies its rules atomically and
// the decision event is emitted).
func (c *console) decide(w http.ResponseWriter, r *http.Request) {
	a, ok := c.approver(w, r)
	if !ok {
		return
	}
	if err := c.cop.Check(r); err != nil {
		fail(w, http.StatusForbidden, "cross_origin", "decisions are only accepted from the console's own origin: "+err.Error())
		return
	}
	if !c.validToken(r, a) {
		fail(w, http.StatusForbidden, "csrf_token", "missing or invalid "+TokenHeader+" header: reload the console and try again")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		fail(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "send the decision as application/json")
		return
	}
	var body DecisionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Approve == nil {
		fail(w, http.StatusBadRequest, "bad_request", `send {"approve": true|false, "comment": "..."}`)
		return
	}
	if len(body.Comment) > maxComment {
		fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("the comment is longer than %d bytes", maxComment))
		return
	}
	if _, ok := c.record(w, r, a); !ok {
		return
	}
	rec, err := c.eng.Decide(r.Context(), r.PathValue("id"), store.Decision{Approve: *body.Approve, Approver: a, Comment: body.Comment})
	if err != nil {
		decisionError(w, err)
		return
	}
	reply(w, http.StatusOK, c.approval(rec, a))
}

// decisionError answers a refused decision. Every refusal changed nothing:
// the store checks before it writes, in one step.
func decisionError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, store.ErrAlreadyVoted): // before ErrSelfApproval, which it is too
		fail(w, http.StatusConflict, "already_voted", "you, or someone you act for or who acts for you, has voted on this approval already: a person's vote counts once")
	case errors.Is(err, store.ErrSelfApproval):
		fail(w, http.StatusForbidden, "self_approval", "you may not decide a request you made or that was made on your behalf (self-approval is refused)")
	case errors.Is(err, store.ErrApproverNotAllowed):
		fail(w, http.StatusForbidden, "approver_not_allowed", "you are not allowed to decide this approval")
	case errors.Is(err, store.ErrApprovalNotFound):
		fail(w, http.StatusNotFound, "not_found", "no such approval")
	case errors.Is(err, store.ErrApprovalExpired):
		fail(w, http.StatusConflict, "expired", "the approval expired before it was decided")
	case errors.Is(err, store.ErrNotPending):
		fail(w, http.StatusConflict, "not_pending", "the approval is no longer pending: it was decided already")
	default:
		unavailable(w)
	}
}

func unavailable(w http.ResponseWriter) {
	fail(w, http.StatusServiceUnavailable, "unavailable", "the approval store is unavailable; nothing was decided")
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	var b ErrorBody
	b.Error.Code, b.Error.Message = code, msg
	reply(w, status, b)
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
