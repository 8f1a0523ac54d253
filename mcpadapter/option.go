package mcpadapter

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Option configures a [Bridge].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	files           *protoregistry.Files
	headers         func(ctx context.Context, req *mcp.CallToolRequest) (http.Header, error)
	responseHeaders []string
	approvalWait    time.Duration
	trustedOrigins  []string
}

func defaultConfig() config {
	return config{
		files:        protoregistry.GlobalFiles,
		headers:      forwardAuthorization,
		approvalWait: defaultApprovalWait,
	}
}

// WithProtoFiles makes the bridge look up the services it exposes, and
// their messages, in files instead of protoregistry.GlobalFiles (where
// generated code registers itself). Give the engine the same files with
// middleware.WithProtoFiles. Nil keeps the default.
func WithProtoFiles(files *protoregistry.Files) Option {
	return optionFunc(func(c *config) {
		if files != nil {
			c.files = files
		}
	})
}

// WithHeaders sets how a tool call's identity reaches the procedure: f
// returns the request headers of the in-process call, which the service's
// own interceptors (its authentication) and then the engine's actor function
// see exactly as they would for any other caller. An error from f fails the
// tool call as UNAUTHENTICATED before anything runs.
//
// The default forwards the Authorization header of the MCP HTTP request
// that carried the call (req.Extra.Header), so the bearer token the MCP
// client presented is the one the service authenticates. Calls over
// transports without HTTP headers (the in-memory transport, stdio) then
// carry no credentials: give those a function that says who they are for.
//
// Whatever f returns, the Agentsafe-Approval-Id header is the bridge's: it
// is set from the "_approval_id" argument and from nowhere else. Nil keeps
// the default.
func WithHeaders(f func(ctx context.Context, req *mcp.CallToolRequest) (http.Header, error)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.headers = f
		}
	})
}

// WithResponseHeaders names response headers of the procedures that tool
// results expose in their _meta (under "agentsafe/headers"), next to the
// envelope's Agentsafe-* headers, which are always exposed. By default no
// other header is: a
// service's headers were written for its own clients, not necessarily for
// a model.
func WithResponseHeaders(names ...string) Option {
	return optionFunc(func(c *config) {
		for _, n := range names {
			n = http.CanonicalHeaderKey(n)
			if !slices.Contains(c.responseHeaders, n) {
				c.responseHeaders = append(c.responseHeaders, n)
			}
		}
	})
}

// forwardAuthorization is the default of [WithHeaders].
func forwardAuthorization(_ context.Context, req *mcp.CallToolRequest) (http.Header, error) {
	h := make(http.Header)
	if req.Extra != nil {
		if v := req.Extra.Header.Values("Authorization"); len(v) > 0 {
			h["Authorization"] = slices.Clone(v)
		}
	}
	return h, nil
}

// defaultApprovalWait is how long the answering round of an approval waits
// for the decision by default.
const defaultApprovalWait = 60 * time.Second

// WithApprovalWait sets how long the round that answers the bridge's
// request for a decision (a URL-mode elicitation) waits for the person to
// decide before it gives the call's result, or, still undecided, the
// approval's URL to come back to: at most d, never past the approval's
// expiry, and never after the client cancels the request. By default 60
// seconds; d <= 0 keeps the default.
func WithApprovalWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.approvalWait = d
		}
	})
}

// WithTrustedOrigins names origins ("https://console.example.com", scheme,
// host and port if not the scheme's default, no path) whose web pages may
// call [Bridge.Handler] through their user's browser, besides the server's
// own origin. By default none: a request carrying any other Origin is
// refused, 403, on every method; a request without Origin is never
// refused by this check. Origins compare without case and with the
// default port written or not. New fails on a value that is not an
// origin, naming it.
func WithTrustedOrigins(origins ...string) Option {
	return optionFunc(func(c *config) {
		c.trustedOrigins = append(c.trustedOrigins, origins...)
	})
}
