package approvalconsole_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// listed returns the ids GET /api/approvals shows session's approver.
func (e *env) listed(session string) []string {
	e.t.Helper()
	r := e.do(req{method: "GET", path: "/api/approvals", session: session})
	var list struct{ Approvals []approvalconsole.Approval }
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != http.StatusOK {
		e.t.Fatalf("GET /api/approvals as %s: %d %s", session, r.status, r.body)
	}
	ids := make([]string, 0, len(list.Approvals))
	for _, a := range list.Approvals {
		ids = append(ids, a.ID)
	}
	return ids
}

// TestEveryViewSeesOnlyTheEnginesAudience: two deployments share one store;
// each console lists, opens and decides only its own engine's records.
func TestEveryViewSeesOnlyTheEnginesAudience(t *testing.T) {
	prod := newEnvFor(t, "prod", nil)
	staging := newEnvFor(t, "staging", prod)
	id := prod.requested(agent, "42")
	own := staging.requested(agent, "43")

	if got := staging.listed("s-bob"); !slices.Equal(got, []string{own}) {
		t.Errorf("staging's console lists %v, want only its own %s", got, own)
	}
	if r := staging.do(req{method: "GET", path: "/api/approvals/" + id, session: "s-bob"}); r.status != http.StatusNotFound || r.errorCode() != "not_found" {
		t.Errorf("staging's console opens prod's record: %d %s, want 404 not_found", r.status, r.body)
	}
	if r := staging.decide("s-bob", id, true, "staging says yes"); r.status != http.StatusNotFound || r.errorCode() != "not_found" {
		t.Errorf("staging's console decides prod's record: %d %s, want 404 not_found", r.status, r.body)
	}
	if rec := prod.record(id); rec.Status != store.ApprovalPending || !rec.DecidedAt.IsZero() || rec.Comment != "" {
		t.Fatalf("staging's refused decision changed prod's record: %+v", rec)
	}
	if n := staging.decisions() + prod.decisions(); n != 0 {
		t.Fatalf("staging's refused decision emitted %d decision events", n)
	}
	if _, err := prod.call(agent, "42", id); middleware.CodeOf(err) != middleware.CodeApprovalPending || prod.runs.Load() != 0 {
		t.Fatalf("prod's resume after staging's attempt: %v, %d runs; want APPROVAL_PENDING and nothing run", err, prod.runs.Load())
	}

	// Prod's own console can.
	if got := prod.listed("s-bob"); !slices.Equal(got, []string{id}) {
		t.Errorf("prod's console lists %v, want %s", got, id)
	}
	if r := prod.do(req{method: "GET", path: "/api/approvals/" + id, session: "s-bob"}); r.status != http.StatusOK {
		t.Errorf("prod's console opens its record: %d %s", r.status, r.body)
	}
	if r := prod.do(req{method: "GET", path: "/api/approvals/" + own, session: "s-bob"}); r.status != http.StatusNotFound {
		t.Errorf("prod's console opens staging's record: %d %s, want 404", r.status, r.body)
	}
	if r := prod.decide("s-bob", id, true, "ok"); r.status != http.StatusOK {
		t.Fatalf("prod's console decides its record: %d %s", r.status, r.body)
	}
	if _, err := prod.call(agent, "42", id); err != nil || prod.runs.Load() != 1 {
		t.Fatalf("prod's resume after prod's approval: %v, %d runs", err, prod.runs.Load())
	}
}

// TestListFiltersByTenantBeforeTheLimit: another tenant's 100 older pending
// requests, a full page, do not hide the approver's own 3.
func TestListFiltersByTenantBeforeTheLimit(t *testing.T) {
	e := newEnv(t)
	for i := range 100 { // 5 agents, as the store caps each one's pending requests at 20
		a := other
		a.ID += "-" + strconv.Itoa(i%5)
		e.requested(a, "g"+strconv.Itoa(i))
	}
	e.advance(time.Second) // bob's tenant's requests are the newest
	var want []string
	for i := range 3 {
		want = append(want, e.requested(agent, "a"+strconv.Itoa(i)))
	}
	got := e.listed("s-bob")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("bob's console lists %d approvals %v, want his tenant's 3 %v", len(got), got, want)
	}
}
