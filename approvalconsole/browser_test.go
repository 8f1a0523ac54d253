package approvalconsole_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium with a fresh profile (the allocator
// makes a temporary user-data-dir and removes it when the browser stops),
// bounded by one minute for the whole test. Without Chromium the test is
// skipped, unless AGENTSAFE_REQUIRE_BROWSER=1 (CI) makes that a failure.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("AGENTSAFE_REQUIRE_BROWSER") == "1" {
			t.Fatalf("AGENTSAFE_REQUIRE_BROWSER=1 but there is no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
		}
		t.Skipf("skipped: no Chromium at %s (apt-get install chromium); set AGENTSAFE_REQUIRE_BROWSER=1 to fail instead", chromiumPath)
	}
	ctx, cancelTimeout := context.WithTimeout(t.Context(), time.Minute)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox, // as root, Chromium refuses to start sandboxed
		chromedp.DisableGPU,
		chromedp.WindowSize(1100, 860),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser to exit
		cancelTimeout()
	})
	return tabCtx
}

func signIn(url, session string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, network.SetCookie, network.SetCookieParams{Name: "session", Value: session, URL: url})
		return chromedp.Void{}, err
	}
}

// screenshot writes a PNG of the page to dir (AGENTSAFE_SCREENSHOT_DIR to
// keep it, a test temp dir otherwise) and checks it is one.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	dir := os.Getenv("AGENTSAFE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBrowserApproverApprovesAndTheAgentResumesOnce(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t)
	id := e.requested(agent, "42")

	// Mounted the way an application would.
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(e.eng, authorize)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	card := `.approval[data-id="` + id + `"]`
	err := chromedp.Do(ctx,
		signIn(srv.URL, "s-bob"),
		chromedp.Navigate(srv.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(card)),
	)
	if err != nil {
		t.Fatalf("the pending approval did not appear: %v", err)
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Signed in as bob", procRefund, "agent-7 (agent) on behalf of alice", "the capability always requires approval",
		"refund order 42: 120 EUR (card ••••)", "risk: high", "needs: manager", "Expires"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not show %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, secret) || strings.Contains(page, "sha256:") {
		t.Errorf("the page shows the raw input or its digest:\n%s", page)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(card+" textarea.comment"), "customer called, refund ok")); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "console-pending.png")

	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(card+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(card+" .status.approved")),
	)
	if err != nil {
		t.Fatalf("approving in the browser: %v", err)
	}
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card+" .status")))
	if err != nil {
		t.Fatal(err)
	}
	if status != "approved by bob: customer called, refund ok" {
		t.Errorf("status line %q", status)
	}
	screenshot(t, ctx, "console-approved.png")

	rec := e.record(id)
	if rec.Status != store.ApprovalApproved || rec.Approver.ID != bob.ID || rec.Comment != "customer called, refund ok" {
		t.Fatalf("the record after the click: %+v", rec)
	}
	if e.runs.Load() != 0 {
		t.Fatal("approving ran the refund; only the agent's resume may")
	}
	if _, err := e.call(agent, "42", id); err != nil {
		t.Fatalf("the agent's resume: %v", err)
	}
	if _, err := e.call(agent, "42", id); middleware.CodeOf(err) != middleware.CodeApprovalConsumed {
		t.Fatalf("a second resume: %v, want APPROVAL_CONSUMED", err)
	}
	if n := e.runs.Load(); n != 1 {
		t.Fatalf("the refund ran %d times, want exactly once", n)
	}

	// Alice, for whom the agent acts, may not approve its next request: the
	// page says why, and nothing changes.
	next := e.requested(agent, "43")
	card = `.approval[data-id="` + next + `"]`
	err = chromedp.Do(ctx,
		signIn(srv.URL, "s-alice"),
		chromedp.Navigate(srv.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(card+" .self")),
		chromedp.Click(chromedp.CSS(card+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(card+" .status.error")),
	)
	if err != nil {
		t.Fatalf("self-approval in the browser: %v", err)
	}
	refusal, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card+" .status")))
	if !strings.Contains(refusal, "self-approval is refused") {
		t.Errorf("the page's refusal %q does not name the rule", refusal)
	}
	if rec := e.record(next); rec.Status != store.ApprovalPending {
		t.Errorf("a refused self-approval changed the record: %s", rec.Status)
	}
}

// basicAuth is a login the way the demo's is: a browser is challenged for
// basic-auth credentials before it reaches the console, and the console's
// Authorizer reads them (user name = password, for the test).
func basicAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="approval console"`)
			http.Error(w, "sign in", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func authorizeBasic(r *http.Request) (middleware.Actor, error) {
	user, pass, ok := r.BasicAuth()
	if a, known := sessions["s-"+user]; ok && known && pass == user {
		return a, nil
	}
	return middleware.Actor{}, errors.New("unknown user")
}

// TestBrowserWorksWithCredentialsInTheURL: opened at
// http://bob:bob@host/console/, the page's API calls must not inherit the
// credentials from its URL (fetch refuses a URL with userinfo), and bob
// can decide.
func TestBrowserWorksWithCredentialsInTheURL(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t)
	id := e.requested(agent, "42")
	mux := http.NewServeMux()
	mux.Handle("/console/", basicAuth(http.StripPrefix("/console", approvalconsole.New(e.eng, authorizeBasic))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	card := `.approval[data-id="` + id + `"]`
	withCredentials := strings.Replace(srv.URL, "http://", "http://bob:bob@", 1) + "/console/"
	err := chromedp.Do(ctx,
		chromedp.Navigate(withCredentials),
		chromedp.WaitVisible(chromedp.CSS(card+`, #notice:not([hidden])`)),
	)
	if err != nil {
		t.Fatalf("the page at %s showed neither the approval nor a notice: %v", withCredentials, err)
	}
	if notice, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#notice").hidden ? "" : document.querySelector("#notice").textContent`)); notice != "" {
		t.Fatalf("the page at a URL with credentials says: %s", notice)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(card+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(card+" .status.approved, "+card+" .status.error")),
	)
	if err != nil {
		t.Fatalf("approving at a URL with credentials: %v", err)
	}
	if status, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card+" .status"))); status != "approved by bob" {
		t.Fatalf("status line %q, want approved by bob", status)
	}
	if rec := e.record(id); rec.Status != store.ApprovalApproved || rec.Approver.ID != bob.ID {
		t.Fatalf("the record after the click: %+v", rec)
	}
}

// statuses counts the responses of each status code next serves.
type statuses struct {
	next        http.Handler
	notModified chan struct{} // one value per 304, dropped when nobody waits
}

func (s *statuses) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusWriter{ResponseWriter: w}
	s.next.ServeHTTP(rec, r)
	if rec.status == http.StatusNotModified {
		select {
		case s.notModified <- struct{}{}:
		default:
		}
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// appears waits, without reloading the page, until selector matches.
func appears(selector string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`document.querySelector(`+strconv.Quote(selector)+`) !== null`,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))
}

// TestBrowserPendingListRefreshesItself: a request made after the page
// loaded appears without a reload, a request decided elsewhere says so,
// a comment being typed survives, and an unchanged list costs a 304.
func TestBrowserPendingListRefreshesItself(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t)
	first := e.requested(agent, "42")
	counted := &statuses{notModified: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(e.eng, authorize, approvalconsole.WithPollInterval(200*time.Millisecond))))
	counted.next = mux
	srv := httptest.NewServer(counted)
	defer srv.Close()

	firstCard := `.approval[data-id="` + first + `"]`
	err := chromedp.Do(ctx,
		signIn(srv.URL, "s-bob"),
		chromedp.Navigate(srv.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(firstCard)),
		chromedp.SendKeys(chromedp.CSS(firstCard+" textarea.comment"), "checking with the customer"),
	)
	if err != nil {
		t.Fatalf("the first approval: %v", err)
	}

	next := e.requested(agent, "43")
	if err := chromedp.Do(ctx, appears(`.approval[data-id="`+next+`"]`)); err != nil {
		t.Fatalf("a request made after the page loaded did not appear without a reload: %v", err)
	}
	comment, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(firstCard+" textarea.comment")+`).value`))
	if err != nil || comment != "checking with the customer" {
		t.Fatalf("the comment being typed is %q after a poll (%v), want it kept", comment, err)
	}
	select {
	case <-counted.notModified:
	case <-ctx.Done():
		t.Fatal("the page never polled with If-None-Match, or never got a 304 for an unchanged list")
	}

	if r := e.decide("s-carol", first, false, "duplicate"); r.status != http.StatusOK {
		t.Fatalf("carol rejects: %d %s", r.status, r.body)
	}
	if err := chromedp.Do(ctx, appears(firstCard+" .status.rejected")); err != nil {
		t.Fatalf("a request decided elsewhere still looks pending: %v", err)
	}
	status, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(firstCard+" .status")))
	if status != "rejected by carol: duplicate" {
		t.Errorf("status line %q, want carol's rejection", status)
	}
	disabled, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector(`+strconv.Quote(firstCard+" button.approve")+`).disabled`))
	if !disabled {
		t.Error("the approve button of a rejected request is still enabled")
	}
}

// TestBrowserPendingListRefreshesOnFocus: with a poll interval far away,
// the window getting the focus asks for the list.
func TestBrowserPendingListRefreshesOnFocus(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t)
	first := e.requested(agent, "42")
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(e.eng, authorize, approvalconsole.WithPollInterval(time.Hour))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	err := chromedp.Do(ctx,
		signIn(srv.URL, "s-bob"),
		chromedp.Navigate(srv.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(`.approval[data-id="`+first+`"]`)),
	)
	if err != nil {
		t.Fatalf("the first approval: %v", err)
	}
	next := e.requested(agent, "43")
	err = chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`window.dispatchEvent(new FocusEvent("focus"))`),
		appears(`.approval[data-id="`+next+`"]`),
	)
	if err != nil {
		t.Fatalf("a request made after the page loaded did not appear on focus: %v", err)
	}
}

// TestBrowserShowsServerTextAsTextNeverHTML: markup in what the server
// sends (the input's view, a requester's id, another approver's comment,
// read by a poll) is shown as text; no element is made of it.
func TestBrowserShowsServerTextAsTextNeverHTML(t *testing.T) {
	const probe = `<img src="x" class="xss" onerror="window.xss=1">`
	ctx := browser(t)
	e := newEnv(t)
	requester := agent
	requester.ID = "agent " + probe
	id := e.requested(requester, "42")
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(e.eng, authorize,
		approvalconsole.WithRedaction(func(store.ApprovalRecord) string { return "view " + probe }),
		approvalconsole.WithPollInterval(100*time.Millisecond))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	card := `.approval[data-id="` + id + `"]`
	err := chromedp.Do(ctx,
		signIn(srv.URL, "s-bob"),
		chromedp.Navigate(srv.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS(card)),
	)
	if err != nil {
		t.Fatalf("the approval did not appear: %v", err)
	}
	if r := e.decide("s-carol", id, false, "comment "+probe); r.status != http.StatusOK {
		t.Fatalf("carol rejects: %d %s", r.status, r.body)
	}
	if err := chromedp.Do(ctx, appears(card+" .status.rejected")); err != nil {
		t.Fatalf("the rejection did not show: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"view " + probe, "agent " + probe, "comment " + probe} {
		if !strings.Contains(text, want) {
			t.Errorf("the card does not show %q as text:\n%s", want, text)
		}
	}
	made, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("img, .xss") !== null || window.xss === 1`))
	if err != nil || made {
		t.Fatalf("markup from the server became an element (%v)", err)
	}
}

// TestBrowserDeepLinkShowsVotesAndDecides: the deep link an envelope
// carries opens that one approval, with the votes so far; the approver's
// vote completes the quorum there, and only then may the agent resume.
func TestBrowserDeepLinkShowsVotesAndDecides(t *testing.T) {
	ctx := browser(t)
	e := newEnvQuorum(t, "", nil, 2)
	id := e.requested(agent, "42")
	if _, err := e.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: carol, Comment: "checked the order"}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(e.eng, authorize)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	card := `.approval[data-id="` + id + `"]`
	err := chromedp.Do(ctx,
		signIn(srv.URL, "s-bob"),
		chromedp.Navigate(approvalconsole.Link(srv.URL+"/console")(id)),
		chromedp.WaitVisible(chromedp.CSS(card+" .votes li")),
	)
	if err != nil {
		t.Fatalf("the deep link did not show the approval: %v", err)
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Signed in as bob", procRefund, "refund order 42: 120 EUR (card ••••)", "1 of 2 approvals", "approved by carol: checked the order"} {
		if !strings.Contains(page, want) {
			t.Errorf("the approval's page does not show %q:\n%s", want, page)
		}
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(".approval").length`)); n != 1 {
		t.Errorf("the deep link shows %d approvals, want just its own", n)
	}
	if _, err := e.call(agent, "42", id); middleware.CodeOf(err) != middleware.CodeApprovalPending {
		t.Fatalf("a resume after one of two votes: %v, want APPROVAL_PENDING", err)
	}
	screenshot(t, ctx, "console-deep-link.png")
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(card+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(card+" .status.approved")),
	)
	if err != nil {
		t.Fatalf("approving on the deep link: %v", err)
	}
	tally, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card+" .tally")))
	if tally != "2 of 2 approvals" {
		t.Errorf("the tally after bob's vote: %q", tally)
	}
	if rec := e.record(id); rec.Status != store.ApprovalApproved || rec.Approver.ID != bob.ID {
		t.Fatalf("the record after the click: %+v", rec)
	}
	if _, err := e.call(agent, "42", id); err != nil || e.runs.Load() != 1 {
		t.Fatalf("the agent's resume: %v, %d runs", err, e.runs.Load())
	}
}

// holdOne holds back the response to the next GET of path, once armed:
// it is made when the request comes (so it says what was true then) and
// sent only once released.
type holdOne struct {
	next     http.Handler
	path     string
	armed    chan struct{} // closed to arm
	captured chan struct{} // closed once the response is made
	release  chan struct{} // closed to send it
	sent     chan struct{} // closed once it is sent
	taken    atomic.Bool
}

func (h *holdOne) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-h.armed:
	default:
		h.next.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != h.path || !h.taken.CompareAndSwap(false, true) {
		h.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	h.next.ServeHTTP(rec, r)
	close(h.captured)
	<-h.release
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
	close(h.sent)
}

// TestBrowserAStaleRefreshDoesNotUndoAVote: a refresh of the deep link
// whose answer left the server before the approver's vote, and arrives
// after it, must not take the page back: the tally stays at the votes the
// decision showed (votes only grow, and a decided approval stays decided).
func TestBrowserAStaleRefreshDoesNotUndoAVote(t *testing.T) {
	ctx := browser(t)
	e := newEnvQuorum(t, "", nil, 2)
	id := e.requested(agent, "42")
	if _, err := e.eng.Decide(t.Context(), id, store.Decision{Approve: true, Approver: carol}); err != nil {
		t.Fatal(err)
	}
	hold := &holdOne{path: "/console/api/approvals/" + id, armed: make(chan struct{}), captured: make(chan struct{}),
		release: make(chan struct{}), sent: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(e.eng, authorize, approvalconsole.WithPollInterval(time.Hour))))
	hold.next = mux
	srv := httptest.NewServer(hold)
	defer srv.Close()
	defer func() {
		select {
		case <-hold.release:
		default:
			close(hold.release)
		}
	}()

	card := `.approval[data-id="` + id + `"]`
	if err := chromedp.Do(ctx,
		signIn(srv.URL, "s-bob"),
		chromedp.Navigate(approvalconsole.Link(srv.URL+"/console")(id)),
		chromedp.WaitVisible(chromedp.CSS(card+" .votes li")),
	); err != nil {
		t.Fatalf("the deep link did not show the approval: %v", err)
	}
	close(hold.armed)
	// A refresh (as a focus event starts one) whose answer, 1 of 2, is
	// held back until after the vote.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.dispatchEvent(new Event("focus"))`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.captured:
	case <-time.After(10 * time.Second):
		t.Fatal("the focus event started no refresh of the approval")
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(card+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(card+" .status.approved")),
	); err != nil {
		t.Fatalf("approving on the deep link: %v", err)
	}
	close(hold.release)
	<-hold.sent
	// Let the page take in the stale answer: a round trip through the
	// page's event loop after its fetch settled.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`new Promise((ok) => setTimeout(() => ok(true), 200))`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	tally, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card+" .tally")))
	status, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card+" .status")))
	if tally != "2 of 2 approvals" || !strings.HasPrefix(status, "approved") {
		t.Errorf("after a stale refresh arrived: tally %q, status %q; want the vote's 2 of 2, approved", tally, status)
	}
}

// TestBrowserShowsThePreviewFirstAsText: a capability's preview, the
// effect as the server computed it, is the first thing a card shows, on
// the pending list and on the deep link, and markup in it is shown as
// text: no element is made of it.
func TestBrowserShowsThePreviewFirstAsText(t *testing.T) {
	const text = `refund 120.00 EUR of order 42 to card ****1234 <b>now</b> <img src="x" class="xss" onerror="window.xss=1">`
	ctx := browser(t)
	e := newEnvPreview(t, "", nil, 1, func(context.Context, middleware.PreviewInput) (middleware.Preview, error) {
		return middleware.Preview{Text: text, State: []byte("order 42 v1")}, nil
	})
	id := e.requested(agent, "42")
	mux := http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(e.eng, authorize)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	card := `.approval[data-id="` + id + `"]`
	for _, page := range []struct{ name, url string }{
		{"the pending list", srv.URL + "/console/"},
		{"the deep link", approvalconsole.Link(srv.URL + "/console")(id)},
	} {
		err := chromedp.Do(ctx,
			signIn(srv.URL, "s-bob"),
			chromedp.Navigate(page.url),
			chromedp.WaitVisible(chromedp.CSS(card+" pre.preview")),
		)
		if err != nil {
			t.Fatalf("%s: the preview did not show: %v", page.name, err)
		}
		shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(card+" pre.preview")))
		if err != nil || shown != text {
			t.Errorf("%s: the preview reads %q (%v), want the server's text as it is: %q", page.name, shown, err, text)
		}
		first, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+card+` dl').firstElementChild.textContent + " | " + document.querySelector('`+card+` dl > dd').innerText`))
		if err != nil || first != "What will happen | "+text {
			t.Errorf("%s: the card must show the preview first, got %q (%v)", page.name, first, err)
		}
		made, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector(".approval b, .approval img, .xss") !== null || window.xss === 1`))
		if err != nil || made {
			t.Fatalf("%s: markup in the preview became an element (%v)", page.name, err)
		}
		screenshot(t, ctx, "console-preview-"+strings.ReplaceAll(page.name, " ", "-")+".png")
	}

	// A capability without a preview shows no empty preview line.
	plain := newEnv(t)
	other := plain.requested(agent, "43")
	mux = http.NewServeMux()
	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(plain.eng, authorize)))
	srv2 := httptest.NewServer(mux)
	defer srv2.Close()
	card = `.approval[data-id="` + other + `"]`
	err := chromedp.Do(ctx, signIn(srv2.URL, "s-bob"), chromedp.Navigate(srv2.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS(card)))
	if err != nil {
		t.Fatal(err)
	}
	if visible, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('`+card+` pre.preview').offsetParent !== null`)); visible {
		t.Error("a card without a preview shows an empty preview")
	}
}
