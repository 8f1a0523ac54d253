package approvalconsole_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/middleware/store"
)

func TestLinkIsTheDeepLinkTheConsoleServes(t *testing.T) {
	link := approvalconsole.Link("https://ops.example.com/console/")
	if got, want := link("apr_0123"), "https://ops.example.com/console/approvals/apr_0123"; got != want {
		t.Errorf("Link(...)(apr_0123) = %q, want %q", got, want)
	}
	if got := link("a/b?c"); got != "https://ops.example.com/console/approvals/a%2Fb%3Fc" {
		t.Errorf("an id is one escaped path segment: %q", got)
	}
}

// TestDeepLinkChecksAsTheListDoes: the page of one approval is served only
// to a signed-in approver of the record's tenant, for a record of the
// console's audience; everyone else gets the API's refusals.
func TestDeepLinkChecksAsTheListDoes(t *testing.T) {
	prod := newEnvFor(t, "prod", nil)
	staging := newEnvFor(t, "staging", prod)
	id := prod.requested(agent, "42")
	page := "/approvals/" + id

	r := prod.do(req{method: "GET", path: page, session: "s-bob"})
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || !strings.Contains(string(r.body), `data-page="approval"`) {
		t.Fatalf("the approval's page for bob: %d %s %.80s", r.status, r.header.Get("Content-Type"), r.body)
	}
	if r.header.Get("X-Frame-Options") != "DENY" || !strings.Contains(r.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("the page of one approval must not be framed either: %v", r.header)
	}
	for _, c := range []struct {
		name    string
		e       *env
		session string
		status  int
		code    string
	}{
		{"signed out", prod, "", http.StatusUnauthorized, "unauthorized"},
		{"another tenant's approver", prod, "s-dave", http.StatusNotFound, "not_found"},
		{"another audience's console", staging, "s-bob", http.StatusNotFound, "not_found"},
	} {
		if r := c.e.do(req{method: "GET", path: page, session: c.session}); r.status != c.status || r.errorCode() != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
	}
	if r := prod.do(req{method: "GET", path: "/approvals/apr_unknown", session: "s-bob"}); r.status != http.StatusNotFound {
		t.Errorf("an unknown approval's page: %d, want 404", r.status)
	}
}

// TestApprovalShowsVotesSoFar: with a quorum, the API shows how many
// approvals are needed and the votes counted so far.
func TestApprovalShowsVotesSoFar(t *testing.T) {
	e := newEnvQuorum(t, "", nil, 2)
	id := e.requested(agent, "42")
	if r := e.decide("s-carol", id, true, "looks right"); r.status != http.StatusOK {
		t.Fatalf("carol's vote: %d %s", r.status, r.body)
	}
	r := e.do(req{method: "GET", path: "/api/approvals/" + id, session: "s-bob"})
	var a approvalconsole.Approval
	if err := json.Unmarshal(r.body, &a); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET the approval: %d %s", r.status, r.body)
	}
	if a.Status != "pending" || a.Quorum != 2 || len(a.Votes) != 1 || a.Votes[0].Approver.ID != carol.ID || !a.Votes[0].Approve || a.Votes[0].Comment != "looks right" {
		t.Fatalf("after one of two votes: status %s, quorum %d, votes %+v", a.Status, a.Quorum, a.Votes)
	}
	// carol's assistant is carol again: told so, and not counted.
	if r := e.decide("s-carols-assistant", id, true, ""); r.status != http.StatusConflict || r.errorCode() != "already_voted" || !strings.Contains(string(r.body), "counts once") {
		t.Fatalf("carol's assistant after carol: %d %s, want 409 already_voted", r.status, r.body)
	}
	if rec := e.record(id); rec.Status != store.ApprovalPending || len(rec.Votes) != 1 {
		t.Fatalf("a second vote of carol's counted: %s, %d votes", rec.Status, len(rec.Votes))
	}
	if r := e.decide("s-bob", id, true, ""); r.status != http.StatusOK {
		t.Fatalf("bob's vote: %d %s", r.status, r.body)
	}
	if rec := e.record(id); rec.Status != store.ApprovalApproved || len(rec.Votes) != 2 {
		t.Fatalf("after two of two votes: %s, %d votes", rec.Status, len(rec.Votes))
	}
}
