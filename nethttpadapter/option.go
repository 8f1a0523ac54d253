package nethttpadapter

import (
	"fmt"
	"net/http"
)

// The defaults of the options.
const (
	// DefaultMaxBodyBytes bounds the request body of a governed route: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxResponseBytes bounds the response one attempt may buffer: 8 MiB.
	DefaultMaxResponseBytes = 8 << 20
)

// Option configures [Wrap] and [WrapMux].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	maxBody     int64
	maxResponse int64
	bound       []string
}

func newConfig(opts []Option) config {
	c := config{maxBody: DefaultMaxBodyBytes, maxResponse: DefaultMaxResponseBytes}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// WithMaxBodyBytes bounds the request body a governed route reads, once,
// before anything runs. A larger body is refused with 413 and a JSON
// envelope (code INVALID_ARGUMENT, the message names the limit); the
// handler never runs. The default is [DefaultMaxBodyBytes]. n must be
// positive: WithMaxBodyBytes panics otherwise, at start-up.
func WithMaxBodyBytes(n int64) Option {
	if n <= 0 {
		panic(fmt.Sprintf("nethttpadapter: WithMaxBodyBytes must be positive (got %d)", n))
	}
	return optionFunc(func(c *config) { c.maxBody = n })
}

// WithMaxResponseBytes bounds the response body one attempt may buffer.
// An attempt that writes more fails: its Write returns an error and the
// execution ends in a concealed EXECUTION_FAILED (500), never retried,
// because a response that big cannot be held back until the execution is
// final. Routes with large or unbounded responses belong in stream mode
// (see the package documentation). The default is
// [DefaultMaxResponseBytes]. n must be positive: WithMaxResponseBytes
// panics otherwise, at start-up.
func WithMaxResponseBytes(n int64) Option {
	if n <= 0 {
		panic(fmt.Sprintf("nethttpadapter: WithMaxResponseBytes must be positive (got %d)", n))
	}
	return optionFunc(func(c *config) { c.maxResponse = n })
}

// WithBoundHeaders names request headers that are part of the call's input:
// they are bound into the input digest (events, approvals) next to the
// method, cleaned path, sorted query and body. By default no header is
// bound. Names are canonicalized.
func WithBoundHeaders(names ...string) Option {
	canonical := make([]string, len(names))
	for i, n := range names {
		canonical[i] = http.CanonicalHeaderKey(n)
	}
	return optionFunc(func(c *config) { c.bound = append(c.bound, canonical...) })
}
