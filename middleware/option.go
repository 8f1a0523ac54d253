package middleware

import (
	"context"
	"fmt"
	"github.com/agentsafe/agentsafe/middleware/store"
	"log/slog"
	"time"

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
	actor          ActorFunc
	classify       Classifier
	redact         func(error) string
	sinks          []EventSink
	tracer         Tracer
	now            func() time.Time
	newID          func(prefix string) string
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

func (c *config) positive(name string, d time.Duration) bool {
	if d <= 0 {
		c.problems = append(c.problems, fmt.Sprintf("%s must be positive (got %s)", name, d))
		return false
	}
	return true
}

// WithDefaultTimeout sets the per-attempt timeout of capabilities that do not
// set one. The default is 30 seconds.
func WithDefaultTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if c.positive("WithDefaultTimeout", d) {
			c.defaultTimeout = d
		}
	})
}

// WithDefaultBackoff sets the backoff base of capabilities that do not set
// one. The default is 250ms.
func WithDefaultBackoff(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if c.positive("WithDefaultBackoff", d) {
			c.defaultBackoff = d
		}
	})
}

// WithBackoffLimits caps every backoff at max (default 30s) and adds a
// random ±jitter to it (default none; zero turns it off).
func WithBackoffLimits(max, jitter time.Duration) Option {
	return optionFunc(func(c *config) {
		if c.positive("WithBackoffLimits max", max) {
			c.maxBackoff = max
		}
		if jitter < 0 {
			c.problems = append(c.problems, fmt.Sprintf("WithBackoffLimits jitter must not be negative (got %s)", jitter))
			return
		}
		c.jitter = jitter
	})
}

// WithDefaultApprovalExpiry sets the lifetime of approval records whose
// capability does not set one. The default is 15 minutes.
func WithDefaultApprovalExpiry(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if c.positive("WithDefaultApprovalExpiry", d) {
			c.defaultExpiry = d
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
func WithActor(f ActorFunc) Option {
	return optionFunc(func(c *config) { c.actor = f })
}

// WithClassifier replaces [DefaultClassifier], which decides whether a
// handler's error is worth a runtime retry. Nil keeps the default.
func WithClassifier(f Classifier) Option {
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
		if c.positive("WithSinkTimeout", d) {
			c.sinkTimeout = d
		}
	})
}

// WithMaxAbandoned caps the attempts per capability that were abandoned at
// their deadline and have not returned yet; over it new calls fail with
// CodeResourceExhausted. The default is 100.
func WithMaxAbandoned(n int) Option {
	return optionFunc(func(c *config) {
		if n <= 0 {
			c.problems = append(c.problems, fmt.Sprintf("WithMaxAbandoned must be positive (got %d)", n))
			return
		}
		c.maxAbandoned = n
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

// WithIDGenerator replaces how execution ids and idempotency keys are made;
// gen receives the prefix ("exe_" or "idk_") and must return unique values.
// The default uses 128 bits from crypto/rand. Nil keeps the default.
func WithIDGenerator(gen func(prefix string) string) Option {
	return optionFunc(func(c *config) {
		if gen != nil {
			c.newID = gen
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
