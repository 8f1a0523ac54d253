package digest

import (
	"mime"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"slices"
	"strings"
)

// HTTPRequest is what [HTTP] binds of a net/http request.
type HTTPRequest struct {
	// Procedure is the name the route was wrapped with.
	Procedure string
	// Method is bound as sent: HTTP methods are case-sensitive. Empty means
	// GET, as in net/http.
	Method string
	// Path is the request path, cleaned as http.ServeMux cleans it before
	// binding: [path.Clean], rooted at "/", keeping a trailing slash (the
	// mux routes "/a/" and "/a" apart). Pass r.URL.EscapedPath(): it keeps
	// "/a%2Fb" apart from "/a/b", which the mux also routes differently.
	Path string
	// Query is bound by key in byte order, the values of one key in the
	// order given. Pass r.URL.Query().
	Query url.Values
	// Header is the request header. Only the names in BoundHeaders are bound,
	// except that Content-Type always chooses the body kind.
	Header http.Header
	// BoundHeaders names the headers the route declares as part of its
	// input, in any case and order. A declared header that is absent is
	// bound as absent, which differs from present and empty. net/http keeps
	// Host in r.Host, not in Header: declaring it binds nothing unless the
	// caller copies it into Header.
	BoundHeaders []string
	// Body is the complete request body.
	Body []byte
}

// HTTP returns the digest of a net/http request. A body whose Content-Type
// is a JSON media type (application/json, or any type with the +json suffix)
// is checked and canonicalized as by [JSON]; any other body, and an empty
// one, is bound byte for byte. Errors wrap [ErrUnbindable].
func HTTP(r HTTPRequest) (string, error) {
	var body *canonicalizer // nil: the body is bound raw
	if len(r.Body) > 0 && IsJSON(r.Header.Get("Content-Type")) {
		c, err := checkJSON(r.Body, checked)
		if err != nil {
			return "", err
		}
		body = c
	}

	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	w := newWriter(r.Procedure, formHTTP)
	w.str(method)
	w.str(cleanPath(r.Path))

	keys := make([]string, 0, len(r.Query))
	for k := range r.Query {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.count(len(keys))
	for _, k := range keys {
		w.str(k)
		w.strs(r.Query[k])
	}

	names := make([]string, 0, len(r.BoundHeaders))
	for _, name := range r.BoundHeaders {
		names = append(names, textproto.CanonicalMIMEHeaderKey(name))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	w.count(len(names))
	for _, name := range names {
		w.str(name)
		w.strs(r.Header.Values(name))
	}

	if body == nil {
		w.body(kindRaw, r.Body)
	} else if err := w.canonical(body); err != nil {
		return "", err
	}
	return w.sum(), nil
}

// cleanPath is net/http's cleanPath: path.Clean rooted at "/", keeping a
// trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

func (w *writer) strs(values []string) {
	w.count(len(values))
	for _, v := range values {
		w.str(v)
	}
}

// IsJSON reports whether contentType names JSON (RFC 8259 §11,
// RFC 6839 §3.1). Parameters such as charset are ignored; an unparseable
// Content-Type is not JSON.
func IsJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}
