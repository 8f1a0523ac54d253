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
	maxAbandoned   int
	overrunGrace   time.Duration
	strict         bool
	actor          func(context.Context) (Actor, error)
	classify       func(error) bool
	redact         func(error) string
	sinks          []sinkConfig
	audit          *sinkConfig
	tracer         Tracer
	now            func() time.Time
	digestKey      []byte
	store          store.ApprovalStore
	results        store.ResultStore
	budgets        store.BudgetStore
	resultKeys     *keyring
	retention      time.Duration // of stored results; 0: 24h
	quota          store.ResultQuota
	audience       string
	view           func(ctx context.Context, procedure string, input []byte) (string, error)
	policies       []namedPolicy
	condition      bool                   // a WithApprovalCondition policy is among them
	approvalURL    func(id string) string // hints.go
	files          *protoregistry.Files
	filesSet       bool
	problems       []string
	previews       map[string]func(context.Context, PreviewInput) (Preview, error)
	logger         *slog.Logger
}

func defaultConfig() config {
	return config{
		defaultTimeout: 30 * time.Second,
		defaultBackoff: 250 * time.Millisecond,
		maxBackoff:     30 * time.Second,
		defaultExpiry:  15 * time.Minute,
		maxAbandoned:   100,
		overrunGrace:   100 * time.Millisecond,
		quota:          store.ResultQuota{Records: 1000, Bytes: 64 << 20},
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
	// ResultRetention is how long a result stored for a caller's
	// Idempotency-Key is replayed, and a key in doubt kept (see
	// [WithResultStore]): 24h. A dedup window keeps its own.
	ResultRetention time.Duration
	// OverrunGrace is how long after its context ended an attempt of an
	// Inline capability may return before the engine reports it with
	// [EventDeadlineOverrun] and a warning: 100ms.
	OverrunGrace time.Duration
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
		set("ResultRetention", d.ResultRetention, &c.retention)
		set("OverrunGrace", d.OverrunGrace, &c.overrunGrace)
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
// the application's authentication prepared. Its error, or a panic in it,
// fails the call with CodeUnauthenticated. Without it every call has the zero Actor, which is
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

// WithEventSink adds a sink; sinks receive events in the order added, each
// through a bounded queue of its own delivered by a worker of its own, so
// that a slow sink costs an execution one channel send and never another
// sink its events. Within one execution a sink receives the events in
// order. opts set the sink's bound on one call ([SinkTimeout], default
// 250ms) and its queue ([SinkQueue], default 1024 events). A call that
// overruns the bound abandons its worker (a fresh one takes the queue) and
// that execution's later events for the sink are dropped; a full queue
// drops the event. Every drop is counted ([Engine.Stats]) and logged,
// rate-limited. [SinkInline] calls a sink that never blocks on the
// execution's goroutine instead. Nil is ignored; without sinks no event is
// even built.
func WithEventSink(s EventSink, opts ...SinkOption) Option {
	return optionFunc(func(c *config) {
		if s == nil {
			return
		}
		sc := sinkConfig{call: func(ctx context.Context, e Event) error { s.HandleEvent(ctx, e); return nil },
			name: fmt.Sprintf("%d:%T", len(c.sinks), s), timeout: defaultSinkTimeout, queue: defaultSinkQueue}
		sc.apply(c, opts)
		if p := sc.inlineProblem(); p != "" {
			c.problems = append(c.problems, p)
		}
		c.sinks = append(c.sinks, sc)
	})
}

// AuditSink is a strict audit trail: the engine waits until Record has
// stored capability.requested and capability.started, and an error (a
// timeout included) means nothing runs: the call fails with
// AUDIT_UNAVAILABLE (retryable). Every other event reaches it through the
// same queue, in order. No record, no effect. A sink that also implements
// [BatchAuditSink] gets every record waiting for it in one call. A record
// Record cannot store because of its content must be reported as such
// (a [*BatchError] with Index 0, or an error in the data-exception class,
// see [BatchAuditSink]): it then fails only its own call, or is counted as
// dropped. Any other error is taken for an outage: a queued record is kept
// and tried again before the next one, so a record refused for ever with
// a plain error would fail every later call. The
// requested of a call answered as hidden (a policy hides it, or it came in
// on a surface its capability is not exposed on) goes through the queue
// too: nothing runs then, and the sink's failure must not tell the
// procedure exists.
type AuditSink interface {
	Record(ctx context.Context, e Event) error
}

// WithAuditSink makes s the engine's strict audit sink (see [AuditSink]);
// timeout bounds the wait for each synchronous record (default 1s), and
// is the deadline of each write. The sink's writes are made one at a
// time, in order, by a worker of the engine's; a [BatchAuditSink] gets
// everything waiting in each (group commit). What one record contains
// never fails another's call: a batch the sink refuses for one record's
// content is split until that record is alone, and only its own call
// fails (or, for a record nobody waits for, it is counted as dropped in
// [Engine.Stats]). A transient failure fails the calls waiting for that
// write; the other records are kept and written with the next record
// that comes, or, when none comes, tried again on their own for about a
// minute (after 1, 2, 4, ... 32 seconds). A record whose call stopped
// waiting (the timeout passed, or the caller's context ended: CANCELLED)
// is never written. When the records waiting would take more than half the timeout
// to write at the sink's recent pace, a new call is refused
// AUDIT_UNAVAILABLE at once rather than left to time out; a call refused
// so, or that gave up waiting for its capability.requested, leaves no
// record at all (its end is counted as dropped), so that refusals cost the
// sink nothing while it is behind. A failure at
// capability.started after an approval was consumed gives the approval
// back. The last WithAuditSink wins; nil removes it. By default there is
// none.
func WithAuditSink(s AuditSink, timeout ...time.Duration) Option {
	return optionFunc(func(c *config) {
		if s == nil {
			c.audit = nil
			return
		}
		sc := sinkConfig{call: s.Record, name: fmt.Sprintf("audit:%T", s), timeout: defaultAuditTimeout, queue: defaultSinkQueue, audit: s}
		for _, d := range timeout {
			if d <= 0 {
				c.problems = append(c.problems, fmt.Sprintf("WithAuditSink timeout must be positive (got %s)", d))
				continue
			}
			sc.timeout = d
		}
		c.audit = &sc
	})
}

// SinkOption configures one sink's delivery (see [WithEventSink]).
type SinkOption interface{ applySink(*sinkConfig, *config) }

type sinkOptionFunc func(*sinkConfig, *config)

func (f sinkOptionFunc) applySink(s *sinkConfig, c *config) { f(s, c) }

// SinkTimeout bounds one call of the sink; the default is 250ms.
func SinkTimeout(d time.Duration) SinkOption {
	return sinkOptionFunc(func(s *sinkConfig, c *config) {
		if d <= 0 {
			c.problems = append(c.problems, fmt.Sprintf("SinkTimeout must be positive (got %s)", d))
			return
		}
		s.timeout, s.queued = d, true
	})
}

// SinkQueue sets how many events may wait for the sink; the default is 1024.
func SinkQueue(n int) SinkOption {
	return sinkOptionFunc(func(s *sinkConfig, c *config) {
		if n <= 0 {
			c.problems = append(c.problems, fmt.Sprintf("SinkQueue must be positive (got %d)", n))
			return
		}
		s.queue, s.queued = n, true
	})
}

// sinkConfig is one sink as the options describe it.
type sinkConfig struct {
	call    func(context.Context, Event) error
	name    string
	timeout time.Duration
	queue   int
	audit   AuditSink // the strict audit sink's, or nil
	queued  bool      // SinkTimeout or SinkQueue was given
	inline  bool      // SinkInline: no worker, no queue
}

func (s *sinkConfig) apply(c *config, opts []SinkOption) {
	for _, o := range opts {
		if o != nil {
			o.applySink(s, c)
		}
	}
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
// call needs an approval and why (the reason is shown to approvers). It is
// a policy named "approval-condition" (see [WithPolicy]) that only ever
// requires approval, and the input it reads is bound before it is asked.
// An error fails the call closed with POLICY_UNAVAILABLE. By default only
// Approval.Required gates a call. Nil is ignored.
func WithApprovalCondition(cond func(ctx context.Context, q ApprovalQuery) (required bool, reason string, err error)) Option {
	return optionFunc(func(c *config) {
		if cond == nil {
			return
		}
		WithPolicy(condition(cond)).apply(c)
		c.condition = true
	})
}
