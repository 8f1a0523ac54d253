package middleware

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentsafe/agentsafe/middleware/store"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Option configures an [Engine].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	defaultTimeout time.Duration
	defaultBackoff time.Duration
	maxBackoff     time.Duration
	jitter         time.Duration
	defaultExpiry  time.Duration
	sinkTimeout    time.Duration
	maxAbandoned   int
	strict         bool
	actor          func(context.Context) (Actor, error)
	classify       func(error) bool
	redact         func(error) string
	sinks          []EventSink
	tracer         Tracer
	now            func() time.Time
	digestKey      []byte
	store          store.ApprovalStore
	audience       string
	view           func(ctx context.Context, procedure string, input []byte) (string, error)
	condition      func(ctx context.Context, q ApprovalQuery) (bool, string, error)
	files          *protoregistry.Files
	filesSet       bool
	problems       []string
	logger         *slog.Logger
}

func defaultConfig() config {
	return config{
		defaultTimeout: 30 * time.Second,
		defaultBackoff: 250 * time.Millisecond,
		maxBackoff:     30 * time.Second,
		defaultExpiry:  15 * time.Minute,
		sinkTimeout:    250 * time.Millisecond,
		maxAbandoned:   100,
		classify:       DefaultClassifier,
		redact:         func(err error) string { return err.Error() },
		now:            time.Now,
		logger:         slog.Default(),
	}
}

// WithLogger sets where the engine logs what no caller sees: the start-up
// warnings about legal but risky configurations (each once), and later
// trouble such as dropped events. The default is slog.Default() as of
// [New]; nil keeps it.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// Defaults are the engine-wide defaults and limits that capabilities do
// not set themselves. A zero field keeps the default named on it;
// negative values are invalid.
type Defaults struct {
	// Timeout is the per-attempt timeout of capabilities that set none: 30s.
	Timeout time.Duration
	// Backoff is the backoff base of capabilities that set none: 250ms.
	Backoff time.Duration
	// MaxBackoff caps every backoff: 30s.
	MaxBackoff time.Duration
	// Jitter adds a random ±Jitter to every backoff: none.
	Jitter time.Duration
	// ApprovalExpiry is the lifetime of approval records whose capability
	// sets none: 15m.
	ApprovalExpiry time.Duration
	// MaxAbandoned caps, per capability, the attempts abandoned at their
	// deadline that have not returned yet; over it new calls fail with
	// RESOURCE_EXHAUSTED: 100.
	MaxAbandoned int
}

// WithDefaults sets the engine-wide defaults and limits (see [Defaults]);
// zero fields keep theirs.
func WithDefaults(d Defaults) Option {
	return optionFunc(func(c *config) {
		set := func(name string, v time.Duration, to *time.Duration) {
			switch {
			case v < 0:
				c.problems = append(c.problems, fmt.Sprintf("Defaults.%s must not be negative (got %s)", name, v))
			case v > 0:
				*to = v
			}
		}
		set("Timeout", d.Timeout, &c.defaultTimeout)
		set("Backoff", d.Backoff, &c.defaultBackoff)
		set("MaxBackoff", d.MaxBackoff, &c.maxBackoff)
		set("Jitter", d.Jitter, &c.jitter)
		set("ApprovalExpiry", d.ApprovalExpiry, &c.defaultExpiry)
		switch {
		case d.MaxAbandoned < 0:
			c.problems = append(c.problems, fmt.Sprintf("Defaults.MaxAbandoned must not be negative (got %d)", d.MaxAbandoned))
		case d.MaxAbandoned > 0:
			c.maxAbandoned = d.MaxAbandoned
		}
	})
}

// WithStrict makes a call to a procedure without metadata fail with
// CodeCapabilityNotFound instead of passing through. gRPC health checks and
// reflection are always exempt. By default ungoverned procedures pass
// through untouched, so a service can adopt agentsafe one method at a time.
func WithStrict() Option {
	return optionFunc(func(c *config) { c.strict = true })
}

// WithActor sets the function that says who a call is for, from the context
// the application's authentication prepared. Its error fails the call with
// CodeUnauthenticated. Without it every call has the zero Actor, which is
// enough unless a capability needs an approval.
func WithActor(f func(ctx context.Context) (Actor, error)) Option {
	return optionFunc(func(c *config) { c.actor = f })
}

// WithClassifier replaces [DefaultClassifier], which decides whether a
// handler's error is worth a runtime retry. Nil keeps the default.
func WithClassifier(f func(err error) (retryable bool)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.classify = f
		}
	})
}

// WithRedactor sets how an error's text is rendered into events. The
// default is err.Error(); redact secrets that your errors may carry. Nil
// keeps the default.
func WithRedactor(f func(error) string) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.redact = f
		}
	})
}

// WithEventSink adds a sink; sinks are called in the order added. Nil is
// ignored. Without sinks no event is even built.
func WithEventSink(s EventSink) Option {
	return optionFunc(func(c *config) {
		if s != nil {
			c.sinks = append(c.sinks, s)
		}
	})
}

// WithSinkTimeout bounds how long the engine waits for one sink call before
// it moves on and drops that sink's events until the call returns. The
// default is 250ms.
func WithSinkTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.problems = append(c.problems, fmt.Sprintf("WithSinkTimeout must be positive (got %s)", d))
			return
		}
		c.sinkTimeout = d
	})
}

// WithClock sets the clock that stamps events and measures durations; the
// default is time.Now. Timers (attempt timeouts, backoff) always run on the
// runtime's clock, which testing/synctest fakes.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.now = now
		}
	})
}

// WithDigestKey makes the input digest on events an HMAC-SHA256 under key,
// so a small input cannot be guessed back from its digest. Approval binding
// always uses the plain digest. By default events carry the plain digest.
func WithDigestKey(key []byte) Option {
	return optionFunc(func(c *config) { c.digestKey = append([]byte(nil), key...) })
}

// WithApprovalStore sets where approvals live (see package approvalstore:
// an in-memory store for one process, Redis for many). Without a store,
// [New] refuses capabilities that require an approval and
// [WithApprovalCondition].
func WithApprovalStore(s store.ApprovalStore) Option {
	return optionFunc(func(c *config) { c.store = s })
}

// WithAudience names the deployment approvals are for, so that services
// sharing one store never consume each other's approvals. The default is "".
func WithAudience(audience string) Option {
	return optionFunc(func(c *config) { c.audience = audience })
}

// WithApprovalView sets how a gated call's input is shown to approvers: the
// function receives the input as JSON (see [Input]) and returns a redacted,
// human-readable view, which the approval record keeps. Its error fails the
// call closed. By default approvers see no view of the input, only its
// digest: show what your approvers need and nothing more.
func WithApprovalView(view func(ctx context.Context, procedure string, input []byte) (string, error)) Option {
	return optionFunc(func(c *config) { c.view = view })
}

// WithApprovalCondition makes approval conditional per call, for
// capabilities that do not always require one: cond returns whether this
// call needs an approval and why (the reason is shown to approvers). An
// error fails the call closed with CodeApprovalUnavailable. By default only
// Approval.Required gates a call.
func WithApprovalCondition(cond func(ctx context.Context, q ApprovalQuery) (required bool, reason string, err error)) Option {
	return optionFunc(func(c *config) { c.condition = cond })
}
