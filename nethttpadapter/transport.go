package nethttpadapter

import (
	"net/http"

	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// IdempotencyKeyTransport returns a RoundTripper that puts the execution's
// idempotency key on outgoing requests to the listed hosts, as the
// Idempotency-Key header, then sends them with next (http.DefaultTransport
// when nil). Use it for the clients a governed handler calls the systems
// where its effects live with, passing the handler's request context:
//
//	client := &http.Client{Transport: nethttpadapter.IdempotencyKeyTransport(nil, "api.payments.example")}
//	req, _ := http.NewRequestWithContext(r.Context(), "POST", url, body)
//
// The key is [adapter.OutgoingKey]: the same across runtime
// retries of one execution, and a stable sub-key per label set with
// [middleware.WithKeyLabel], so two different downstream calls of one
// execution carry two keys.
//
// A host entry matches a request's host name, or its host:port when the
// entry has a port; case does not matter. With no hosts, no request gets a
// key: keys go only where the application says. Requests outside a governed
// execution, and requests that already carry an Idempotency-Key, are sent
// unchanged. The caller's request is never modified (it is cloned first).
//
// Redirects are decided per hop: http.Client sends each redirected request
// through the transport again, built from the caller's headers, so the key
// the transport sets reaches a redirect's target only if that host is
// listed too. An Idempotency-Key the application set on the request itself
// is one of the caller's headers, and http.Client copies it onto redirects
// to any host.
func IdempotencyKeyTransport(next http.RoundTripper, hosts ...string) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &keyTransport{next: next, hosts: adapter.NewKeyHosts(hosts...)}
}

type keyTransport struct {
	next  http.RoundTripper
	hosts adapter.KeyHosts
}

func (t *keyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.Header.Get(adapter.HeaderIdempotencyKey) != "" {
		return t.next.RoundTrip(req)
	}
	key, ok := t.hosts.Key(req.Context(), req.URL.Host)
	if !ok {
		return t.next.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	out.Header.Set(adapter.HeaderIdempotencyKey, key)
	return t.next.RoundTrip(out)
}
