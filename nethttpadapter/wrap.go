package nethttpadapter

import (
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// Wrap governs h as procedure: the name under which the engine's registry
// (or a protobuf method option) holds its capability. The capability must be
// registered before the engine is built ([middleware.New] reads the registry
// once).
//
// Wrap panics at start-up if the engine governs no such procedure, in strict
// mode ([middleware.WithStrict]) too, as [http.ServeMux.Handle] does for a
// bad pattern: a typo in the name must not leave the route served without
// its capability. Register the capability, or serve the handler without
// Wrap. (Routes a [WrapMux] serves may be ungoverned: a mux holds ungoverned
// routes too.)
//
// A capability with Streaming set runs in stream mode (see the package
// documentation); every other governed route is buffered. Wrap panics if
// eng or h is nil.
func Wrap(eng *middleware.Engine, procedure string, h http.Handler, opts ...Option) http.Handler {
	if eng == nil || h == nil {
		panic("nethttpadapter: Wrap needs an engine and a handler")
	}
	// Capability, not Governed: in strict mode the engine "governs" every
	// name, typos included, by refusing it at call time.
	rt := adapter.Resolve(eng, procedure)
	c, ok := rt.Capability()
	if !ok {
		panic(fmt.Sprintf("nethttpadapter: Wrap(%q): the engine governs no procedure %q; register its capability in the registry given to middleware.New, or do not Wrap the handler", procedure, procedure))
	}
	return &route{rt: rt, h: h, cfg: newConfig(opts), stream: c.Streaming}
}

// WrapMux governs every route of mux whose pattern names a capability: the
// procedure of a request is the pattern it matched, exactly as registered
// (for example "POST /refunds/{id}"). Requests that match no pattern, or a
// pattern the engine does not govern, go to mux untouched: a path no pattern
// routes is the mux's own 404 (or 405), without an envelope. In strict mode
// ([middleware.WithStrict]) a matched pattern without a capability is
// refused instead, with 404 CAPABILITY_NOT_FOUND and a JSON envelope. It is
// the one-line adoption for a whole ServeMux:
//
//	http.ListenAndServe(addr, nethttpadapter.WrapMux(eng, mux))
//
// A request whose path a pattern hidden from its caller matches (a policy
// hides it, or its capability is not exposed on http) is answered, before
// anything of it is read, as the mux would with the hidden patterns
// removed: a 405's Allow names only the methods of visible patterns, and
// is a 404 when none is left; a pattern without a method that would serve
// a hidden pattern's request once it is gone does not (the request gets
// the 404).
//
// WrapMux decides before the engine runs. A path the mux would redirect to
// a governed pattern — an unclean path such as "//refund" or "/a/../refund",
// or a subtree pattern's path without its trailing slash — is refused with
// 400 and a JSON envelope (INVALID_ARGUMENT, the message names the
// canonical path), as an execution that never ran, with an id and an audit
// trail: following the redirect is the caller's decision, and were the engine to
// run, its one attempt would be the mux's redirect, the handler would not
// run, and an approval would be spent on it. Nothing runs and nothing is
// consumed; the same call at the canonical path proceeds as usual. A
// redirect to an ungoverned pattern, and a governed route whose own handler
// redirects, are served as the mux serves them.
//
// WrapMux panics if eng or mux is nil.
func WrapMux(eng *middleware.Engine, mux *http.ServeMux, opts ...Option) http.Handler {
	if eng == nil || mux == nil {
		panic("nethttpadapter: WrapMux needs an engine and a ServeMux")
	}
	return &muxRoute{eng: eng, mux: mux, cfg: newConfig(opts)}
}

type route struct {
	rt     adapter.Route
	h      http.Handler
	cfg    config
	stream bool
}

func (rt *route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt.rt.Absent(r.Context(), adapter.SurfaceHTTP) {
		http.NotFound(w, r) // what a mux answers for a path it routes nowhere
		return
	}
	serve(rt.rt, rt.stream, rt.h, &rt.cfg, w, r)
}

type muxRoute struct {
	eng *middleware.Engine
	mux *http.ServeMux
	cfg config
}

func (m *muxRoute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.RequestURI == "*" { // the mux answers "OPTIONS *" itself, unrouted
		m.mux.ServeHTTP(w, r)
		return
	}
	var rt adapter.Route // the zero Route governs nothing
	h, pattern := m.mux.Handler(r)
	if pattern != "" {
		rt = adapter.Resolve(m.eng, pattern)
	}
	switch {
	case rt.Absent(r.Context(), adapter.SurfaceHTTP):
		// Hidden, before anything of the request is read: the mux's
		// answer with the hidden patterns removed.
		m.withoutHidden(w, r, nil)
		return
	case pattern == "":
		// No pattern routes it: the mux's 404, or its 405, whose Allow
		// must not name a hidden pattern's method.
		m.withoutHidden(w, r, h)
		return
	case !rt.Governed():
		m.mux.ServeHTTP(w, r)
		return
	}
	if canonical, ok := m.redirect(h, r); ok {
		refuse(rt, w, r, 0, middleware.NewError(middleware.CodeInvalidArgument, fmt.Sprintf(
			"the path %q is not canonical (the mux would redirect it, and a governed route does not follow redirects); send the call to %q",
			r.URL.EscapedPath(), canonical)))
		return
	}
	// Each attempt is routed again by the mux, on its own request copy, so
	// the handler sees its pattern and path values as usual.
	c, _ := rt.Capability()
	serve(rt, c.Streaming, m.mux, &m.cfg, w, r)
}

// redirect reports whether h, what the mux's Handler returned for r, is the
// redirect the mux makes itself for a path that is not canonical (unclean,
// or a subtree pattern's missing trailing slash), and where it points. The
// pattern Handler returns with such a redirect is the one that would match
// after it: were the engine to run, its one "attempt" would be the mux's
// 301/307, the handler would never run, and an approval would be spent.
//
// The mux makes a fresh http.RedirectHandler for each such lookup, while a
// route registered with one returns the same handler every time; asking
// twice tells them apart without guessing at the mux's rules. Running the
// mux's redirect handler only writes the redirect into a recorder.
func (m *muxRoute) redirect(h http.Handler, r *http.Request) (canonical string, ok bool) {
	if reflect.TypeOf(h) != redirectHandlerType {
		return "", false
	}
	if again, _ := m.mux.Handler(r); again == h {
		return "", false
	}
	rec := &redirectRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	loc := rec.header.Get("Location")
	if u, err := url.Parse(loc); err == nil {
		return u.EscapedPath(), true
	}
	return loc, true
}

var redirectHandlerType = reflect.TypeOf(http.RedirectHandler("/", http.StatusTemporaryRedirect))

// probeMethod is a method no pattern names: the mux routes a request of
// it only to a pattern without a method, and otherwise answers with the
// methods every pattern matching its path allows.
const probeMethod = "AGENTSAFE-PROBE"

// withoutHidden answers r as the mux would with the patterns hidden from
// r's caller removed. unrouted is what the mux's Handler returned for r
// when no pattern routes r (its 404 or 405 handler), or nil when r
// matched a hidden pattern: then the path is looked up again, for the
// patterns with other methods. A 405 lists in Allow the methods of the
// visible patterns only, and is a 404 when none is left. One difference
// remains, documented: a pattern without a method (a catch-all) that
// would route a hidden pattern's request once it is gone does not; the
// request gets the 404.
func (m *muxRoute) withoutHidden(w http.ResponseWriter, r *http.Request, unrouted http.Handler) {
	if unrouted == nil {
		probe := *r
		probe.Method = probeMethod
		var pattern string
		if unrouted, pattern = m.mux.Handler(&probe); pattern != "" {
			http.NotFound(w, r)
			return
		}
	}
	allow := allowed(unrouted, r)
	if len(allow) == 0 {
		unrouted.ServeHTTP(w, r) // the mux's own 404
		return
	}
	visible := slices.DeleteFunc(slices.Clone(allow), func(method string) bool {
		probe := *r
		probe.Method = method
		_, pattern := m.mux.Handler(&probe)
		return pattern != "" && adapter.Resolve(m.eng, pattern).Hides(r.Context(), adapter.SurfaceHTTP)
	})
	switch {
	case len(visible) == 0:
		http.NotFound(w, r)
	case len(visible) == len(allow) && r.Method != probeMethod:
		unrouted.ServeHTTP(w, r) // nothing hidden: the mux's own 405
	default:
		w.Header().Set("Allow", strings.Join(visible, ", "))
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
	}
}

// allowed is the Allow of the mux's answer h to r: its 405 lists the
// methods of the patterns matching r's path; its 404 none.
func allowed(h http.Handler, r *http.Request) []string {
	rec := &redirectRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	allow := rec.header.Get("Allow")
	if allow == "" {
		return nil
	}
	return strings.Split(allow, ", ")
}

// redirectRecorder keeps the headers of the mux's redirect and discards the
// rest. (Not httptest.ResponseRecorder: a library should not link test
// support into the programs that import it.)
type redirectRecorder struct{ header http.Header }

func (r *redirectRecorder) Header() http.Header         { return r.header }
func (r *redirectRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (r *redirectRecorder) WriteHeader(int)             {}
