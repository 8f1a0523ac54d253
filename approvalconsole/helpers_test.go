package approvalconsole_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

const procRefund = "/orders.v1.Orders/Refund"

// The people of the tests. The agent acts for alice; bob and carol are
// managers of her tenant; dave is a manager elsewhere.
var (
	agent = middleware.Actor{ID: "agent-7", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"alice"}}
	alice = middleware.Actor{ID: "alice", Tenant: "acme", Kind: "user"}
	bob   = middleware.Actor{ID: "bob", Tenant: "acme", Kind: "user"}
	carol = middleware.Actor{ID: "carol", Tenant: "acme", Kind: "user"}
	dave  = middleware.Actor{ID: "dave", Tenant: "globex", Kind: "user"}
	other = middleware.Actor{ID: "agent-9", Tenant: "globex", Kind: "agent"}
)

// sessions maps a session cookie to its approver, the way an application's
// own login would.
var sessions = map[string]middleware.Actor{"s-alice": alice, "s-bob": bob, "s-carol": carol, "s-dave": dave, "s-agent": agent,
	"s-carols-assistant": carolsAssistant}

// carolsAssistant approves on carol's behalf.
var carolsAssistant = middleware.Actor{ID: "assistant-3", Tenant: "acme", Kind: "agent", OnBehalfOf: []string{"carol"}}

func authorize(r *http.Request) (middleware.Actor, error) {
	c, err := r.Cookie("session")
	if err != nil {
		return middleware.Actor{}, errors.New("no session")
	}
	a, ok := sessions[c.Value]
	if !ok {
		return middleware.Actor{}, errors.New("unknown session")
	}
	return a, nil
}

type actorKey struct{}

func as(ctx context.Context, a middleware.Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

func actorOf(ctx context.Context) (middleware.Actor, error) {
	a, _ := ctx.Value(actorKey{}).(middleware.Actor)
	return a, nil
}

// secret is in the refund input; approvers never see it.
const secret = "4111-1111-1111-1111"

func refundInput(order string) adapter.Input {
	return adapter.JSONInput([]byte(`{"order":"` + order + `","amount":120,"card":"` + secret + `"}`))
}

// redactedView shows the order and amount and hides the card, as an
// application's WithApprovalView would.
func redactedView(_ context.Context, _ string, in []byte) (string, error) {
	var v struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	}
	if err := json.Unmarshal(in, &v); err != nil {
		return "", err
	}
	return "refund order " + v.Order + ": " + strconv.Itoa(v.Amount) + " EUR (card ••••)", nil
}

// env is an engine with a gated refund, a memory store with a settable
// clock, the console served by httptest, and the refund's run count.
type env struct {
	t     *testing.T
	eng   *middleware.Engine
	store *approvalstore.Memory
	rec   *agentsafetest.Recorder
	srv   *httptest.Server
	runs  atomic.Int32
	mu    sync.Mutex
	now   time.Time
}

func newEnv(t *testing.T, opts ...approvalconsole.Option) *env {
	t.Helper()
	return newEnvFor(t, "", nil, opts...)
}

// newEnvFor is newEnv for an engine of audience, on shared's store and
// clock when shared is not nil: two deployments sharing one store.
func newEnvFor(t *testing.T, audience string, shared *env, opts ...approvalconsole.Option) *env {
	t.Helper()
	return newEnvQuorum(t, audience, shared, 1, opts...)
}

// newEnvQuorum is newEnvFor with a refund that quorum distinct approvers
// must approve.
func newEnvQuorum(t *testing.T, audience string, shared *env, quorum int, opts ...approvalconsole.Option) *env {
	t.Helper()
	return newEnvPreview(t, audience, shared, quorum, nil, opts...)
}

// newEnvPreview is newEnvQuorum with a refund whose capability has
// preview (nil for none).
func newEnvPreview(t *testing.T, audience string, shared *env, quorum int, preview func(context.Context, middleware.PreviewInput) (middleware.Preview, error), opts ...approvalconsole.Option) *env {
	t.Helper()
	return newEnvWith(t, middleware.Capability{
		SideEffect: middleware.SideEffectExternal, Risk: middleware.RiskHigh, Description: "refund an order",
		Approval: middleware.Approval{Required: true, Type: "manager", ExpiresIn: 15 * time.Minute, Quorum: quorum},
		Preview:  preview,
	}, audience, shared, nil, opts...)
}

// newEnvWith is newEnvFor with the refund's capability c, and engine
// options of its own.
func newEnvWith(t *testing.T, c middleware.Capability, audience string, shared *env, engine []middleware.Option, opts ...approvalconsole.Option) *env {
	t.Helper()
	e := &env{t: t, rec: &agentsafetest.Recorder{}, now: time.Now().Truncate(time.Second)}
	e.store = approvalstore.NewMemory(approvalstore.WithClock(e.clock))
	if shared != nil {
		e.store = shared.store
	}
	reg := middleware.NewRegistry().Register(procRefund, c)
	var err error
	e.eng, err = middleware.New(reg, append([]middleware.Option{middleware.WithApprovalStore(e.store), middleware.WithActor(actorOf),
		middleware.WithApprovalView(redactedView), middleware.WithEventSink(e.rec), middleware.WithProtoFiles(nil),
		middleware.WithAudience(audience)}, engine...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(approvalconsole.New(e.eng, authorize, opts...))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) clock() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now }

func (e *env) advance(d time.Duration) { e.mu.Lock(); e.now = e.now.Add(d); e.mu.Unlock() }

// call is the agent's refund, with an approval id on resume, as an
// adapter hands it to the engine.
func (e *env) call(actor middleware.Actor, order, approvalID string) (middleware.Envelope, error) {
	route := adapter.Resolve(e.eng, procRefund)
	_, envl, err := adapter.Execute(as(e.t.Context(), actor), route, adapter.Call[string]{Input: refundInput(order), ApprovalID: approvalID}, func(context.Context) (string, error) {
		e.runs.Add(1)
		return "refunded", nil
	})
	return envl, err
}

// requested has actor ask for a refund and returns the approval id.
func (e *env) requested(actor middleware.Actor, order string) string {
	e.t.Helper()
	envl, err := e.call(actor, order, "")
	if middleware.CodeOf(err) != middleware.CodeApprovalRequired {
		e.t.Fatalf("the agent's call: %v, want APPROVAL_REQUIRED", err)
	}
	return envl.ApprovalID
}

func (e *env) record(id string) store.ApprovalRecord {
	e.t.Helper()
	rec, err := e.store.Get(context.Background(), id)
	if err != nil {
		e.t.Fatalf("Get %s: %v", id, err)
	}
	return rec
}

// decisions counts the approved and rejected events so far.
func (e *env) decisions() int {
	n := 0
	for _, ev := range e.rec.Events() {
		if ev.Type == middleware.EventApproved || ev.Type == middleware.EventRejected {
			n++
		}
	}
	return n
}

// req describes one HTTP request to the console.
type req struct {
	method, path, session, token, contentType, body string
	header                                          map[string]string
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) errorCode() string {
	var b approvalconsole.ErrorBody
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Code
}

func (e *env) do(r req) resp {
	e.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr, err := http.NewRequestWithContext(e.t.Context(), r.method, e.srv.URL+r.path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.session != "" {
		hr.AddCookie(&http.Cookie{Name: "session", Value: r.session})
	}
	if r.token != "" {
		hr.Header.Set(approvalconsole.TokenHeader, r.token)
	}
	if r.contentType != "" {
		hr.Header.Set("Content-Type", r.contentType)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}
}

// session returns the decision token the console hands session's approver.
func (e *env) token(session string) string {
	e.t.Helper()
	r := e.do(req{method: "GET", path: "/api/session", session: session})
	var s approvalconsole.Session
	if err := json.Unmarshal(r.body, &s); err != nil || r.status != http.StatusOK || s.Token == "" {
		e.t.Fatalf("GET /api/session as %s: %d %s", session, r.status, r.body)
	}
	return s.Token
}

// decide posts a decision the way the page does.
func (e *env) decide(session, id string, approve bool, comment string) resp {
	e.t.Helper()
	body, _ := json.Marshal(map[string]any{"approve": approve, "comment": comment})
	return e.do(req{method: "POST", path: "/api/approvals/" + id + "/decision", session: session, token: e.token(session),
		contentType: "application/json", body: string(bytes.TrimSpace(body)), header: map[string]string{"Sec-Fetch-Site": "same-origin"}})
}
