package approvalconsole

import (
	"crypto/rand"
	"embed"
	"io/fs"
	"net/http"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
)

//go:embed assets
var assets embed.FS

// Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	redact  func(store.ApprovalRecord) string
	key     []byte
	session func(*http.Request) string
	origins []string
	poll    time.Duration
}

// defaultPoll is how often the page asks for the pending list again.
const defaultPoll = 5 * time.Second

// WithRedaction sets what approvers see of a record's input: redact
// receives the record and returns the text to show. By default the console
// shows the record's View as stored, which the engine's
// middleware.WithApprovalView already rendered and redacted; the raw input
// is never available to the console, only that view.
func WithRedaction(redact func(rec store.ApprovalRecord) string) Option {
	return optionFunc(func(c *config) { c.redact = redact })
}

// WithCSRFKey sets the secret the decision tokens are computed with (see
// the package doc). By default New draws 32 random bytes, which is right for
// one instance; instances behind one load balancer must share a key, or a
// token one of them handed out is refused by the others.
func WithCSRFKey(key []byte) Option {
	return optionFunc(func(c *config) { c.key = append([]byte(nil), key...) })
}

// WithSession binds decision tokens to the approver's session as well as to
// their identity: session returns a value that identifies it (for example
// the session's id, never a secret the page can read), so a token dies with
// the session. By default tokens are bound to the approver's identity only
// and live as long as the key.
func WithSession(session func(*http.Request) string) Option {
	return optionFunc(func(c *config) { c.session = session })
}

// WithTrustedOrigin lets decisions come from a page served by another
// origin ("https://admin.example.com"), which the same-origin check refuses
// by default. The token is still required.
func WithTrustedOrigin(origin string) Option {
	return optionFunc(func(c *config) { c.origins = append(c.origins, origin) })
}

// WithPollInterval sets how often the page asks for the pending list
// again, so that new requests appear without a reload; it also asks
// whenever its window gets the focus. Each poll sends the list's last ETag
// in If-None-Match, so an unchanged list costs a 304 with no body. By
// default (or when d is not positive) the page polls every 5 seconds.
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.poll = d })
}

// Authorizer returns the approver a request is from, from the application's
// own authentication (a session cookie, an SSO header set by a trusted
// proxy): never from the request body. An error, or an actor without an
// ID, refuses the request with 401 Unauthorized.
type Authorizer func(r *http.Request) (middleware.Actor, error)

// console is the handler New returns.
type console struct {
	eng       *middleware.Engine
	authorize Authorizer
	cfg       config
	cop       *http.CrossOriginProtection
	mux       *http.ServeMux
}

// New returns the approval console for eng's approval store: the JSON API
// and the page on top of it (see the package doc for the routes). Mount it
// under a path ending in a slash with the prefix stripped:
//
//	mux.Handle("/console/", http.StripPrefix("/console", approvalconsole.New(eng, authorize)))
//
// New panics when eng or authorize is nil, or a trusted origin is malformed:
// those are programming errors.
func New(eng *middleware.Engine, authorize Authorizer, opts ...Option) http.Handler {
	if eng == nil || authorize == nil {
		panic("approvalconsole: New needs an engine and an authorize function")
	}
	c := &console{eng: eng, authorize: authorize, cop: http.NewCrossOriginProtection()}
	for _, o := range opts {
		if o != nil {
			o.apply(&c.cfg)
		}
	}
	if c.cfg.poll <= 0 {
		c.cfg.poll = defaultPoll
	}
	if len(c.cfg.key) == 0 {
		c.cfg.key = make([]byte, 32)
		_, _ = rand.Read(c.cfg.key) // crypto/rand.Read never fails
	}
	for _, o := range c.cfg.origins {
		if err := c.cop.AddTrustedOrigin(o); err != nil {
			panic("approvalconsole: " + err.Error())
		}
	}
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	c.mux = http.NewServeMux()
	c.mux.Handle("GET /{$}", files)
	c.mux.Handle("GET /console.js", files)
	c.mux.Handle("GET /console.css", files)
	c.mux.HandleFunc("GET /api/session", c.session)
	c.mux.HandleFunc("GET /api/approvals", c.list)
	c.mux.HandleFunc("GET /api/approvals/{id}", c.get)
	c.mux.HandleFunc("POST /api/approvals/{id}/decision", c.decide)
	return c
}

// ServeHTTP sets the headers every response carries, then routes.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY") // approve buttons must never be framed
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}
