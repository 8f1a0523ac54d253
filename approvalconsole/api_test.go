package approvalconsole_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

func TestListShowsThePendingApprovalsOfTheApproversTenant(t *testing.T) {
	e := newEnv(t)
	id := e.requested(agent, "42")
	_ = e.requested(other, "43") // another tenant's request
	decided := e.requested(agent, "44")
	if r := e.decide("s-bob", decided, false, "no"); r.status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}

	r := e.do(req{method: "GET", path: "/api/approvals", session: "s-bob"})
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/approvals: %d %s", r.status, r.header.Get("Content-Type"))
	}
	var list struct{ Approvals []approvalconsole.Approval }
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Approvals) != 1 || list.Approvals[0].ID != id {
		t.Fatalf("bob sees %+v, want only the pending approval of his tenant, %s", list.Approvals, id)
	}
	a := list.Approvals[0]
	rec := e.record(id)
	if a.Procedure != procRefund || a.Requester.ID != agent.ID || a.Requester.OnBehalfOf[0] != "alice" || a.Type != "manager" ||
		a.Risk != "high" || a.Effect != "external" || a.Status != "pending" || len(a.Reasons) != 1 || a.Reasons[0] == "" ||
		!a.Expires.Equal(rec.ExpiresAt) || a.SelfRequested {
		t.Errorf("listed approval %+v", a)
	}
	if a.View != "refund order 42: 120 EUR (card ••••)" {
		t.Errorf("view %q, want the application's redacted view", a.View)
	}
	if strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), "sha256:") || strings.Contains(string(r.body), rec.RequestedBy) {
		t.Errorf("the API shows more than the approver needs (input, digest or execution id): %s", r.body)
	}
}

func TestGetShowsOneApproval(t *testing.T) {
	e := newEnv(t)
	id := e.requested(agent, "42")
	foreign := e.requested(other, "43")
	for _, tc := range []struct {
		name, session, id string
		status            int
	}{
		{"pending, to a manager of the tenant", "s-bob", id, http.StatusOK},
		{"another tenant's", "s-bob", foreign, http.StatusNotFound},
		{"unknown", "s-bob", store.NewApprovalID(), http.StatusNotFound},
		{"malformed", "s-bob", "apr_nope", http.StatusNotFound},
		{"unauthorized", "", id, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(req{method: "GET", path: "/api/approvals/" + tc.id, session: tc.session})
			if r.status != tc.status {
				t.Fatalf("GET: %d %s, want %d", r.status, r.body, tc.status)
			}
		})
	}
	r := e.do(req{method: "GET", path: "/api/approvals/" + id, session: "s-alice"})
	var a approvalconsole.Approval
	_ = json.Unmarshal(r.body, &a)
	if !a.SelfRequested {
		t.Errorf("alice, on whose behalf the agent asked, must see selfRequested: %s", r.body)
	}
}

func TestApproveThroughTheAPIThenTheAgentResumesOnce(t *testing.T) {
	e := newEnv(t)
	asked, err := e.call(agent, "42", "")
	if middleware.CodeOf(err) != middleware.CodeApprovalRequired {
		t.Fatalf("the agent's call: %v, want APPROVAL_REQUIRED", err)
	}
	id := asked.ApprovalID
	e.advance(2 * time.Minute)

	r := e.decide("s-bob", id, true, "customer called")
	if r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	var a approvalconsole.Approval
	_ = json.Unmarshal(r.body, &a)
	if a.Status != "approved" || a.Approver == nil || a.Approver.ID != bob.ID || a.Comment != "customer called" || a.Decided == nil {
		t.Errorf("decision reply %s", r.body)
	}
	rec := e.record(id)
	if rec.Status != store.ApprovalApproved || rec.Approver.ID != bob.ID || rec.Comment != "customer called" {
		t.Fatalf("record after approving: %+v", rec)
	}
	// Sinks deliver asynchronously: wait for the decision's event, which
	// carries the id of the execution that asked.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	evs, err := e.rec.Wait(ctx, asked.ExecutionID, func(evs []middleware.Event) bool {
		return len(evs) > 0 && evs[len(evs)-1].Type == middleware.EventApproved
	})
	if err != nil || evs[len(evs)-1].Duration != 2*time.Minute {
		t.Errorf("the decision went around the engine: %v; events %+v", err, evs)
	}

	if _, err := e.call(agent, "42", id); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := e.call(agent, "42", id); middleware.CodeOf(err) != middleware.CodeApprovalConsumed {
		t.Fatalf("second resume: %v, want APPROVAL_CONSUMED", err)
	}
	if n := e.runs.Load(); n != 1 {
		t.Fatalf("the refund ran %d times, want once", n)
	}
}

func TestRejectThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	id := e.requested(agent, "42")
	if r := e.decide("s-bob", id, false, "amount too high"); r.status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	if rec := e.record(id); rec.Status != store.ApprovalRejected {
		t.Fatalf("record %s, want rejected", rec.Status)
	}
	if _, err := e.call(agent, "42", id); middleware.CodeOf(err) != middleware.CodeApprovalRejected || e.runs.Load() != 0 {
		t.Fatalf("resume after rejection: %v, %d runs", err, e.runs.Load())
	}
}

// TestRefusalsChangeNothing: each refusal is clear, and the record stays
// pending with no decision event.
func TestRefusalsChangeNothing(t *testing.T) {
	e := newEnv(t)
	id := e.requested(agent, "42")
	path := "/api/approvals/" + id + "/decision"
	approve := `{"approve":true,"comment":"sure"}`
	sameOrigin := map[string]string{"Sec-Fetch-Site": "same-origin"}
	for _, tc := range []struct {
		name   string
		r      req
		status int
		code   string
	}{
		{"no session", req{method: "POST", path: path, contentType: "application/json", body: approve}, http.StatusUnauthorized, "unauthorized"},
		{"unknown session", req{method: "POST", path: path, session: "s-mallory", token: e.token("s-bob"), contentType: "application/json", body: approve}, http.StatusUnauthorized, "unauthorized"},
		{"no token", req{method: "POST", path: path, session: "s-bob", contentType: "application/json", body: approve, header: sameOrigin}, http.StatusForbidden, "csrf_token"},
		{"forged token", req{method: "POST", path: path, session: "s-bob", token: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", contentType: "application/json", body: approve, header: sameOrigin}, http.StatusForbidden, "csrf_token"},
		{"another approver's token", req{method: "POST", path: path, session: "s-bob", token: e.token("s-carol"), contentType: "application/json", body: approve, header: sameOrigin}, http.StatusForbidden, "csrf_token"},
		{"cross-site, even with the token", req{method: "POST", path: path, session: "s-bob", token: e.token("s-bob"), contentType: "application/json", body: approve, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, http.StatusForbidden, "cross_origin"},
		{"foreign Origin, even with the token", req{method: "POST", path: path, session: "s-bob", token: e.token("s-bob"), contentType: "application/json", body: approve, header: map[string]string{"Origin": "https://evil.example"}}, http.StatusForbidden, "cross_origin"},
		{"a form post", req{method: "POST", path: path, session: "s-bob", token: e.token("s-bob"), contentType: "application/x-www-form-urlencoded", body: "approve=true"}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"no verdict", req{method: "POST", path: path, session: "s-bob", token: e.token("s-bob"), contentType: "application/json", body: `{"comment":"hm"}`}, http.StatusBadRequest, "bad_request"},
		{"unknown field", req{method: "POST", path: path, session: "s-bob", token: e.token("s-bob"), contentType: "application/json", body: `{"approve":true,"approver":"bob"}`}, http.StatusBadRequest, "bad_request"},
		{"self-approval by the requester", req{method: "POST", path: path, session: "s-agent", token: e.token("s-agent"), contentType: "application/json", body: approve, header: sameOrigin}, http.StatusForbidden, "self_approval"},
		{"self-approval by whom the agent acts for", req{method: "POST", path: path, session: "s-alice", token: e.token("s-alice"), contentType: "application/json", body: approve, header: sameOrigin}, http.StatusForbidden, "self_approval"},
		{"another tenant's manager", req{method: "POST", path: path, session: "s-dave", token: e.token("s-dave"), contentType: "application/json", body: approve, header: sameOrigin}, http.StatusNotFound, "not_found"},
		{"by GET", req{method: "GET", path: path, session: "s-bob"}, http.StatusMethodNotAllowed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.r)
			if r.status != tc.status || r.errorCode() != tc.code {
				t.Fatalf("%d %s, want %d with code %q", r.status, r.body, tc.status, tc.code)
			}
			if tc.code == "self_approval" && !strings.Contains(string(r.body), "self-approval") {
				t.Errorf("the refusal must name the rule: %s", r.body)
			}
			if rec := e.record(id); rec.Status != store.ApprovalPending || !rec.DecidedAt.IsZero() || rec.Comment != "" {
				t.Fatalf("a refused decision changed the record: %+v", rec)
			}
			if n := e.decisions(); n != 0 {
				t.Fatalf("a refused decision emitted %d decision events", n)
			}
		})
	}
	if e.runs.Load() != 0 {
		t.Fatal("deciding executed the refund")
	}
}

func TestDecidedOnceOnly(t *testing.T) {
	e := newEnv(t)
	id := e.requested(agent, "42")
	if r := e.decide("s-bob", id, true, "ok"); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if r := e.decide("s-bob", id, true, "ok"); r.status != http.StatusOK {
		t.Errorf("the same decision again by the same approver is a no-op, not an error: %d %s", r.status, r.body)
	}
	r := e.decide("s-carol", id, false, "no")
	if r.status != http.StatusConflict || r.errorCode() != "not_pending" {
		t.Errorf("a second, different decision: %d %s, want 409 not_pending", r.status, r.body)
	}
	if rec := e.record(id); rec.Status != store.ApprovalApproved || rec.Approver.ID != bob.ID {
		t.Errorf("record after a refused second decision: %+v", rec)
	}
}

func TestExpiredCannotBeDecided(t *testing.T) {
	e := newEnv(t)
	id := e.requested(agent, "42")
	e.advance(16 * time.Minute)
	r := e.decide("s-bob", id, true, "late")
	if r.status != http.StatusConflict || r.errorCode() != "expired" {
		t.Fatalf("deciding an expired approval: %d %s, want 409 expired", r.status, r.body)
	}
	if rec := e.record(id); rec.Status != store.ApprovalExpired || !rec.DecidedAt.IsZero() {
		t.Fatalf("record %+v", rec)
	}
}

func TestRedactionOption(t *testing.T) {
	e := newEnv(t, approvalconsole.WithRedaction(func(rec store.ApprovalRecord) string {
		return "a " + rec.Risk + "-risk refund"
	}))
	id := e.requested(agent, "42")
	r := e.do(req{method: "GET", path: "/api/approvals/" + id, session: "s-bob"})
	var a approvalconsole.Approval
	_ = json.Unmarshal(r.body, &a)
	if a.View != "a high-risk refund" {
		t.Errorf("view %q, want the redaction function's", a.View)
	}
}

func TestTokensAreBoundToKeyIdentityAndSession(t *testing.T) {
	key := []byte("a key the instances share")
	a := newEnv(t, approvalconsole.WithCSRFKey(key))
	b := newEnv(t, approvalconsole.WithCSRFKey(key))
	c := newEnv(t)
	if a.token("s-bob") != b.token("s-bob") {
		t.Error("two instances with one key must hand out the same token")
	}
	if a.token("s-bob") == c.token("s-bob") || a.token("s-bob") == a.token("s-carol") {
		t.Error("tokens must differ across keys and approvers")
	}

	sid := "1"
	s := newEnv(t, approvalconsole.WithSession(func(*http.Request) string { return sid }))
	old := s.token("s-bob")
	sid = "2"
	if s.token("s-bob") == old {
		t.Fatal("with WithSession, a new session must get a new token")
	}
	id := s.requested(agent, "42")
	r := s.do(req{method: "POST", path: "/api/approvals/" + id + "/decision", session: "s-bob", token: old, contentType: "application/json", body: `{"approve":true}`})
	if r.status != http.StatusForbidden || r.errorCode() != "csrf_token" {
		t.Errorf("a token of an ended session: %d %s, want 403 csrf_token", r.status, r.body)
	}
}

func TestPageAndHeaders(t *testing.T) {
	e := newEnv(t)
	for path, ctype := range map[string]string{"/": "text/html", "/console.js": "text/javascript", "/console.css": "text/css"} {
		r := e.do(req{method: "GET", path: path})
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %s, want 200 %s", path, r.status, r.header.Get("Content-Type"), ctype)
		}
		if r.header.Get("X-Frame-Options") != "DENY" || !strings.Contains(r.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") ||
			strings.Contains(r.header.Get("Content-Security-Policy"), "unsafe-inline") {
			t.Errorf("GET %s: framing or inline script must be refused, got CSP %q", path, r.header.Get("Content-Security-Policy"))
		}
	}
	if r := e.do(req{method: "GET", path: "/api/session"}); r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "sign in") {
		t.Errorf("GET /api/session without a session: %d %s", r.status, r.body)
	}
}

func TestEngineWithoutStore(t *testing.T) {
	eng, err := middleware.New(nil, middleware.WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(approvalconsole.New(eng, authorize))
	defer srv.Close()
	hr, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/api/approvals", nil)
	hr.AddCookie(&http.Cookie{Name: "session", Value: "s-bob"})
	res, err := srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("an engine without a store: %d, want 503", res.StatusCode)
	}
}

func TestNewPanicsWithoutEngineOrAuthorizer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil, nil) must panic")
		}
	}()
	approvalconsole.New(nil, nil)
}

func TestTrustedOriginMayDecide(t *testing.T) {
	e := newEnv(t, approvalconsole.WithTrustedOrigin("https://admin.example"))
	id := e.requested(agent, "42")
	path := "/api/approvals/" + id + "/decision"
	r := e.do(req{method: "POST", path: path, session: "s-bob", token: e.token("s-bob"), contentType: "application/json", body: `{"approve":true}`,
		header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://elsewhere.example"}})
	if r.status != http.StatusForbidden || r.errorCode() != "cross_origin" {
		t.Fatalf("an untrusted origin: %d %s, want 403 cross_origin", r.status, r.body)
	}
	r = e.do(req{method: "POST", path: path, session: "s-bob", token: e.token("s-bob"), contentType: "application/json", body: `{"approve":true}`,
		header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://admin.example"}})
	if r.status != http.StatusOK {
		t.Fatalf("the trusted origin: %d %s, want 200", r.status, r.body)
	}
}

// TestTokenHeaderIsAgentsafeCsrfToken: the decision token travels in
// Agentsafe-Csrf-Token, as every agentsafe header is named, not X-….
func TestTokenHeaderIsAgentsafeCsrfToken(t *testing.T) {
	const name = "Agentsafe-Csrf-Token"
	if approvalconsole.TokenHeader != name {
		t.Fatalf("TokenHeader is %q, want %q", approvalconsole.TokenHeader, name)
	}
	e := newEnv(t)
	r := e.do(req{method: "GET", path: "/api/session", session: "s-bob"})
	var s approvalconsole.Session
	if err := json.Unmarshal(r.body, &s); err != nil || s.TokenHeader != name {
		t.Fatalf("the session tells the page to send the token in %q (%v), want %q", s.TokenHeader, err, name)
	}
	id := e.requested(agent, "42")
	path := "/api/approvals/" + id + "/decision"
	r = e.do(req{method: "POST", path: path, session: "s-bob", contentType: "application/json", body: `{"approve":true}`,
		header: map[string]string{"X-Agentsafe-Csrf-Token": s.Token, "Sec-Fetch-Site": "same-origin"}})
	if r.status != http.StatusForbidden || r.errorCode() != "csrf_token" {
		t.Fatalf("the token in the old X- header: %d %s, want 403 csrf_token", r.status, r.body)
	}
	if rec := e.record(id); rec.Status != store.ApprovalPending {
		t.Fatalf("a refused decision changed the record: %s", rec.Status)
	}
	r = e.do(req{method: "POST", path: path, session: "s-bob", contentType: "application/json", body: `{"approve":true}`,
		header: map[string]string{name: s.Token, "Sec-Fetch-Site": "same-origin"}})
	if r.status != http.StatusOK {
		t.Fatalf("the token in %s: %d %s, want 200", name, r.status, r.body)
	}
}

// TestListAnswers304WhileItsETagMatches: the pending list carries a strong
// ETag over what it returns; If-None-Match with it gets 304 and no body
// until the list changes (a new request, a decision, an expiry), and each
// approver's list has its own.
func TestListAnswers304WhileItsETagMatches(t *testing.T) {
	e := newEnv(t)
	first := e.requested(agent, "42")
	list := func(session, ifNoneMatch string) resp {
		t.Helper()
		r := req{method: "GET", path: "/api/approvals", session: session}
		if ifNoneMatch != "" {
			r.header = map[string]string{"If-None-Match": ifNoneMatch}
		}
		return e.do(r)
	}
	fresh := func(session, ifNoneMatch, why string) string {
		t.Helper()
		r := list(session, ifNoneMatch)
		tag := r.header.Get("ETag")
		if r.status != http.StatusOK || len(r.body) == 0 {
			t.Fatalf("%s: %d %q, want 200 with the list", why, r.status, r.body)
		}
		if !strings.HasPrefix(tag, `"`) || !strings.HasSuffix(tag, `"`) || len(tag) < 3 {
			t.Fatalf("%s: ETag %q, want a strong (quoted, not W/) entity tag", why, tag)
		}
		if tag == ifNoneMatch {
			t.Fatalf("%s: the ETag did not change", why)
		}
		return tag
	}
	unchanged := func(session, tag, ifNoneMatch, why string) {
		t.Helper()
		r := list(session, ifNoneMatch)
		if r.status != http.StatusNotModified || len(r.body) != 0 || r.header.Get("ETag") != tag {
			t.Fatalf("%s: %d %q ETag %q, want 304 with no body and the same ETag", why, r.status, r.body, r.header.Get("ETag"))
		}
	}

	tag := fresh("s-bob", "", "the first list")
	unchanged("s-bob", tag, tag, "nothing changed")
	unchanged("s-bob", tag, `"other", `+tag, "one of several tags")
	unchanged("s-bob", tag, "W/"+tag, "the weak form (If-None-Match compares weakly)")
	if r := list("s-bob", `"something else"`); r.status != http.StatusOK {
		t.Fatalf("another tag: %d, want 200", r.status)
	}
	if r := list("", tag); r.status != http.StatusUnauthorized {
		t.Fatalf("without a session, even with the tag: %d, want 401", r.status)
	}
	if alices := fresh("s-alice", "", "alice's list"); alices == tag {
		t.Fatal("alice's list (selfRequested) has bob's ETag")
	}

	second := e.requested(agent, "43")
	tag = fresh("s-bob", tag, "after a new request")
	_ = e.requested(other, "44")
	unchanged("s-bob", tag, tag, "after another tenant's request")
	if r := e.decide("s-carol", first, true, "ok"); r.status != http.StatusOK {
		t.Fatalf("carol approves: %d %s", r.status, r.body)
	}
	tag = fresh("s-bob", tag, "after a decision")
	e.advance(16 * time.Minute)
	tag = fresh("s-bob", tag, "after the last pending request expired")
	if got := e.listed("s-bob"); len(got) != 0 {
		t.Fatalf("bob lists %v after %s expired", got, second)
	}
	unchanged("s-bob", tag, tag, "an empty list, unchanged")
}

// TestSessionTellsThePageHowOftenToPoll: every 5 s by default.
func TestSessionTellsThePageHowOftenToPoll(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []approvalconsole.Option
		want int64
	}{
		{"default", nil, 5000},
		{"WithPollInterval", []approvalconsole.Option{approvalconsole.WithPollInterval(250 * time.Millisecond)}, 250},
		{"not positive", []approvalconsole.Option{approvalconsole.WithPollInterval(0)}, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts...)
			var s approvalconsole.Session
			if err := json.Unmarshal(e.do(req{method: "GET", path: "/api/session", session: "s-bob"}).body, &s); err != nil || s.PollMillis != tc.want {
				t.Fatalf("pollMillis %d (%v), want %d", s.PollMillis, err, tc.want)
			}
		})
	}
}

// TestTheAPIShowsThePreview: the list and one approval carry the
// preview's text, first; a capability without one has none.
func TestTheAPIShowsThePreview(t *testing.T) {
	const text = "refund 120.00 EUR of order 42 to card ****1234"
	e := newEnvPreview(t, "", nil, 1, func(context.Context, middleware.PreviewInput) (middleware.Preview, error) {
		return middleware.Preview{Text: text, State: []byte("v1")}, nil
	})
	id := e.requested(agent, "42")
	for _, path := range []string{"/api/approvals", "/api/approvals/" + id} {
		r := e.do(req{method: "GET", path: path, session: "s-bob"})
		if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"id":"`+id+`","preview":"`+text+`"`)) {
			t.Errorf("GET %s must show the preview right after the id: %d %s", path, r.status, r.body)
		}
	}
	plain := newEnv(t)
	other := plain.requested(agent, "43")
	if r := plain.do(req{method: "GET", path: "/api/approvals/" + other, session: "s-bob"}); bytes.Contains(r.body, []byte(`"preview"`)) {
		t.Errorf("an approval without a preview shows none: %s", r.body)
	}
}
