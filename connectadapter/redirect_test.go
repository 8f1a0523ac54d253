package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// inExecution runs f inside a governed execution, as a handler would run
// its downstream calls, and returns the execution's idempotency key.
func inExecution(t *testing.T, f func(ctx context.Context)) string {
	t.Helper()
	eng, err := middleware.New(middleware.NewRegistry().Register("relay", middleware.Capability{SideEffect: middleware.SideEffectRead}), middleware.WithProtoFiles(nil))
	if err != nil {
		t.Fatal(err)
	}
	var key string
	_, _, err = adapter.Execute(t.Context(), adapter.Resolve(eng, "relay"), adapter.Call[struct{}]{}, func(ctx context.Context) (struct{}, error) {
		x, _ := middleware.ExecutionFromContext(ctx)
		key = x.IdempotencyKey
		f(ctx)
		return struct{}{}, nil
	})
	if err != nil || key == "" {
		t.Fatalf("the execution: %v", err)
	}
	return key
}

// redirector answers every request with a 307 to target, the same path,
// and records the Idempotency-Key it was sent.
type redirector struct {
	target string
	mu     sync.Mutex
	keys   []string
}

func (r *redirector) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.keys = append(r.keys, req.Header.Get(adapter.HeaderIdempotencyKey))
	r.mu.Unlock()
	http.Redirect(w, req, r.target+req.URL.RequestURI(), http.StatusTemporaryRedirect)
}

func (r *redirector) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

func hostOf(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// The client interceptor cannot see redirects, and Go's http.Client copies
// headers onto a 307 to any host: the key set for a listed host must not
// follow the call to a host the application did not list. KeyHTTPClient
// strips it there, and keeps it on redirects between listed hosts.
func TestTheIdempotencyKeyDoesNotFollowARedirectToAnUnlistedHost(t *testing.T) {
	unlisted := newServer(t, serverConfig{bare: true})
	alsoListed := newServer(t, serverConfig{bare: true})
	for _, tc := range []struct {
		name    string
		to      *server
		listed  bool // whether the redirect's target is listed
		wantKey bool
	}{
		{"to an unlisted host", unlisted, false, false},
		{"to a listed host", alsoListed, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := &redirector{target: tc.to.url}
			fromURL := serve(t, from)
			hosts := []string{hostOf(t, fromURL)}
			if tc.listed {
				hosts = append(hosts, hostOf(t, tc.to.url))
			}
			client := testv1connect.NewTestServiceClient(
				connectadapter.KeyHTTPClient(httpClient(t, false), hosts...), fromURL,
				connect.WithInterceptors(connectadapter.NewClientInterceptor(hosts...)))
			before := len(tc.to.received())
			key := inExecution(t, func(ctx context.Context) {
				if _, err := client.Write(ctx, request(&testv1.Request{})); err != nil {
					t.Errorf("the redirected call: %v", err)
				}
			})
			if got := from.got(); len(got) != 1 || got[0] != key {
				t.Errorf("the listed host got keys %q, want [%s]", got, key)
			}
			got := tc.to.received()[before:]
			want := ""
			if tc.wantKey {
				want = key
			}
			if len(got) != 1 || got[0].key != want {
				t.Errorf("after the redirect %s, the target got %q, want one call with key %q", tc.name, got, want)
			}
		})
	}
}

// KeyHTTPClient returns a copy: the client given is not changed, its own
// CheckRedirect still decides, and without one Go's default limit of 10
// redirects holds.
func TestKeyHTTPClientKeepsTheClientsRedirectPolicy(t *testing.T) {
	var loop string
	loopURL := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, loop+"/again", http.StatusFound)
	}))
	loop = loopURL
	get := func(c *http.Client) (*http.Response, error) {
		resp, err := c.Get(loopURL)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}

	if _, err := get(connectadapter.KeyHTTPClient(nil)); err == nil || !strings.Contains(err.Error(), "stopped after 10 redirects") {
		t.Errorf("KeyHTTPClient(nil) following a redirect loop: %v, want Go's default limit of 10", err)
	}

	base := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	keyed := connectadapter.KeyHTTPClient(base, "127.0.0.1")
	if resp, err := get(keyed); err != nil || resp.StatusCode != http.StatusFound {
		t.Errorf("the client's own CheckRedirect was not kept: %v %v", resp, err)
	}
	if keyed == base || base.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Error("KeyHTTPClient changed the client it was given")
	}

	stop := errors.New("no redirects to there")
	limited := connectadapter.KeyHTTPClient(&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return stop }})
	if _, err := get(limited); !errors.Is(err, stop) {
		t.Errorf("the client's CheckRedirect error was lost: %v", err)
	}
}
