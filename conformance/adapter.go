package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// The suite's timings: short, so the suite runs in seconds over a real
// network, and far enough apart that scheduling noise cannot blur them.
const (
	attemptTimeout = 150 * time.Millisecond
	slowTimeout    = 100 * time.Millisecond
	// lateBy is how long a handler that ignores its context runs past its
	// deadline.
	lateBy = 3 * slowTimeout
	// patience bounds every wait for something the server does after the
	// client has its answer (an abandoned result, a final event).
	patience = 5 * time.Second
)

// secret is text a failing handler puts in its errors and panics; it must
// never reach a client.
const secret = "db-password-hunter2"

// failingAudit is a strict audit sink that cannot record anything.
type failingAudit struct{}

func (failingAudit) Record(context.Context, middleware.Event) error {
	return errors.New("conformance: the audit database is down")
}

// slowAudit records capability.started three attempt timeouts late.
type slowAudit struct{}

func (slowAudit) Record(_ context.Context, e middleware.Event) error {
	if e.Type == middleware.EventStarted {
		time.Sleep(3 * slowTimeout)
	}
	return nil
}

// relayedExecution is the execution id ModeRelay's handler copies from a
// pretend downstream response.
const relayedExecution = "exe_00000000000000000000000000000001"

// The actors of the suite: the engine authenticates every call as agent.
var (
	suiteAgent    = middleware.Actor{ID: "conformance-agent", Tenant: "conformance", Kind: "agent"}
	suiteApprover = middleware.Actor{ID: "conformance-manager", Tenant: "conformance", Kind: "user"}
)

func capabilities() map[Fixture]middleware.Capability {
	return map[Fixture]middleware.Capability{
		FixtureRead:  {SideEffect: middleware.SideEffectRead, Timeout: attemptTimeout, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}},
		FixtureWrite: {SideEffect: middleware.SideEffectWrite, Timeout: attemptTimeout},
		FixtureIdempotentWrite: {SideEffect: middleware.SideEffectWrite, Idempotent: true, Timeout: attemptTimeout,
			Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Millisecond}},
		FixtureSlow:  {SideEffect: middleware.SideEffectRead, Timeout: slowTimeout},
		FixtureGated: {SideEffect: middleware.SideEffectWrite, Timeout: time.Second, Approval: middleware.Approval{Required: true, Type: "manager"}},
		// Retries configured, so an adapter that retried a stream would show.
		FixtureStream: {SideEffect: middleware.SideEffectRead, Streaming: true, Retry: middleware.Retry{MaxRetries: 2, Backoff: time.Millisecond}},
	}
}

// RunAdapter checks that an adapter keeps the guarantees of the
// specification: one named subtest per rule an adapter can break, each
// against a server the harness starts. A failure message names the rule.
//
// The rules run twice: with the fixtures' capabilities as listed, and
// under "Inline/" with every one of them declared Inline
// ([middleware.Capability].Inline), whose attempts run on the serving
// goroutine. What Inline changes has rules of its own in place of those
// about abandoned attempts: a handler that ignores its context holds the
// call until it returns, its late result is discarded, recorded at once
// and reported as capability.deadline_overrun, and no abandoned_result
// follows.
//
// A harness that implements [InProcess] runs every rule inside a
// testing/synctest bubble, on a fake clock.
func RunAdapter(t *testing.T, h Harness) {
	t.Helper()
	inProcess := false
	if ip, ok := h.(InProcess); ok {
		inProcess = ip.InProcess()
	}
	rules := slices.Concat(adapterRules, policyRules, absentRules, keyRules, hintRules, outcomeRules, wireRules, inlineRules, []adapterRule{budgetRule})
	runRules(t, h, rules, inProcess, false)
	t.Run("Inline", func(t *testing.T) { runRules(t, h, rules, inProcess, true) })
}

func runRules(t *testing.T, h Harness, rules []adapterRule, inProcess, inline bool) {
	t.Helper()
	for _, r := range rules {
		if r.variant == inlineOnly && !inline || r.variant == notInline && inline {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			skip := ""
			rule := func(t *testing.T) {
				s := newSuite(t, h, r, inline)
				if skip = r.skip(s); skip != "" {
					return
				}
				r.check(s)
			}
			if inProcess {
				synctest.Test(t, func(t *testing.T) {
					// Time stops when the bubble's root returns: let the
					// engine's idle sink workers exit first.
					t.Cleanup(func() { time.Sleep(2 * time.Second) })
					rule(t)
				})
			} else {
				rule(t)
			}
			if skip != "" {
				t.Skip(skip)
			}
		})
	}
}

// suite is one server started through the harness, with everything the
// rules need to observe it.
type suite struct {
	*testing.T
	h       Harness
	eng     *middleware.Engine
	rec     *agentsafetest.Recorder
	client  Client
	streams StreamClient

	mu       sync.Mutex
	runs     map[string][]middleware.Execution // by request id
	started  map[string]chan struct{}
	returned map[string]chan struct{}
	ids      atomic.Int64
	reconcileState
	// version is the state a gated fixture's preview reads, for the rules
	// that give it one (previewed).
	version atomic.Int32
}

// previewed is the preview of a rule that gives the gated fixture one: the
// effect, and the state it depends on, s.version.
func (s *suite) previewed(_ context.Context, _ middleware.PreviewInput) (middleware.Preview, error) {
	v := s.version.Load()
	return middleware.Preview{Text: fmt.Sprintf("refund 120.00 EUR of order 42 (version %d)", v), State: fmt.Appendf(nil, "version %d", v)}, nil
}

func newSuite(t *testing.T, h Harness, r adapterRule, inline bool) *suite {
	s := &suite{T: t, h: h, runs: map[string][]middleware.Execution{}, started: map[string]chan struct{}{}, returned: map[string]chan struct{}{}}
	caps := capabilities()
	if r.capabilities != nil {
		r.capabilities(s, caps)
	}
	reg := middleware.NewRegistry()
	for f, c := range caps {
		c.Exposure = everywhere
		c.Inline = inline // a stream's too, which it must not change
		reg.Register(h.Procedure(f), c)
	}
	rec := &agentsafetest.Recorder{}
	eng, err := middleware.New(reg, append([]middleware.Option{
		middleware.WithEventSink(rec),
		middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return suiteAgent, nil }),
		middleware.WithProtoFiles(nil), // the suite's capabilities, exactly
		middleware.WithLogger(slog.New(slog.DiscardHandler)),
	}, r.options()...)...)
	if err != nil {
		t.Fatalf("conformance: building the engine: %v", err)
	}
	s.eng, s.rec = eng, rec
	s.client = h.Start(t, eng, s.handle, s.stream)
	s.streams, _ = s.client.(StreamClient)
	return s
}

// request returns a request with a fresh id whose start and return the
// suite can wait for.
func (s *suite) request(mode Mode) Request {
	id := "req-" + strconv.FormatInt(s.ids.Add(1), 10)
	s.mu.Lock()
	s.started[id] = make(chan struct{})
	s.returned[id] = make(chan struct{})
	s.mu.Unlock()
	return Request{ID: id, Mode: mode}
}

func (s *suite) handle(ctx context.Context, f Fixture, req Request, setHeader func(string, string)) (resp Response, err error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	s.mu.Lock()
	s.runs[req.ID] = append(s.runs[req.ID], x)
	n := len(s.runs[req.ID])
	started, returned := s.started[req.ID], s.returned[req.ID]
	s.mu.Unlock()
	if n == 1 && started != nil {
		close(started)
	}
	defer func() {
		if returned != nil && (req.Mode == ModeIgnore || req.Mode == ModeHang) {
			select {
			case <-returned:
			default:
				close(returned)
			}
		}
	}()
	resp = Response{ID: req.ID, Attempt: x.Attempt, ExecutionID: x.ID, IdempotencyKey: x.IdempotencyKey}
	switch req.Mode {
	case ModeFlaky:
		if n <= req.FailTimes {
			return Response{}, middleware.Retryable(errors.New("conformance: transient failure"))
		}
	case ModeFail:
		return Response{}, errors.New("conformance: query failed: " + secret)
	case ModeHang:
		<-ctx.Done()
		return Response{}, ctx.Err()
	case ModeIgnore:
		setHeader("X-Conformance-Late", "abandoned attempt")
		time.Sleep(slowTimeout + lateBy) // ignores its context on purpose
		return resp, nil
	case ModePanic:
		panic("conformance: handler bug " + secret)
	case ModeHeaders:
		setHeader("X-Conformance-Attempt", strconv.Itoa(x.Attempt))
		if x.Attempt == 1 {
			return Response{}, middleware.Retryable(errors.New("conformance: transient failure after writing a header"))
		}
	case ModeFrameworkDeadline:
		<-ctx.Done()
		return Response{}, &Status{Code: StatusDeadlineExceeded, Message: "conformance: deadline exceeded"}
	case ModeUnavailable:
		if n <= req.FailTimes {
			return Response{}, &Status{Code: StatusUnavailable, Message: "conformance: briefly unavailable"}
		}
	case ModeFrameworkError:
		return Response{}, &Status{Code: StatusUnimplemented, Message: FrameworkErrorMessage, Detail: FrameworkErrorDetail}
	case ModeMutate:
		if x.Attempt == 1 {
			return Response{}, middleware.Retryable(errors.New("conformance: transient failure after mutating the input"))
		}
	case ModeRelay:
		setHeader(adapter.HeaderExecutionID, relayedExecution)
		setHeader(adapter.HeaderAttempts, "9")
		setHeader(adapter.HeaderApprovalID, "apr_00000000000000000000000000000000")
		setHeader(adapter.HeaderCode, "TIMEOUT")
	}
	return resp, nil
}

func (s *suite) stream(ctx context.Context, req Request, setHeader func(string, string), send func(Response) error) error {
	x, _ := middleware.ExecutionFromContext(ctx)
	s.mu.Lock()
	s.runs[req.ID] = append(s.runs[req.ID], x)
	s.mu.Unlock()
	if req.Mode == ModeFlaky {
		return middleware.Retryable(errors.New("conformance: transient stream failure"))
	}
	for i := range req.Count {
		if err := send(Response{ID: req.ID, Attempt: i + 1, ExecutionID: x.ID, IdempotencyKey: x.IdempotencyKey}); err != nil {
			return err
		}
	}
	return nil
}

func (s *suite) call(f Fixture, req Request, approvalID string) Result {
	s.Helper()
	ctx, cancel := context.WithTimeout(s.Context(), patience)
	defer cancel()
	return s.client.Call(ctx, f, req, approvalID)
}

func (s *suite) runsOf(id string) []middleware.Execution {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.runs[id])
}

func (s *suite) wait(ch chan struct{}, what string) {
	s.Helper()
	select {
	case <-ch:
	case <-time.After(patience):
		s.Fatalf("conformance: gave up waiting %s for %s", patience, what)
	}
}

// final returns the final events of an execution, once there is one:
// the sinks are delivered asynchronously, so a rule that read the envelope
// waits for them here.
func (s *suite) final(executionID string) []middleware.Event {
	s.Helper()
	ctx, cancel := context.WithTimeout(s.Context(), patience)
	defer cancel()
	evs, err := s.rec.WaitFinal(ctx, executionID)
	if err != nil {
		s.Fatalf("conformance: the final event of %s did not arrive within %s: %v", executionID, patience, err)
	}
	var finals []middleware.Event
	for _, e := range evs {
		if e.Type.Final() {
			finals = append(finals, e)
		}
	}
	return finals
}

// waitEvent waits until the execution has emitted an event of type t.
func (s *suite) waitEvent(executionID string, t middleware.EventType) {
	s.Helper()
	ctx, cancel := context.WithTimeout(s.Context(), patience)
	defer cancel()
	_, err := s.rec.Wait(ctx, executionID, func(evs []middleware.Event) bool {
		return slices.ContainsFunc(evs, func(e middleware.Event) bool { return e.Type == t })
	})
	if err != nil {
		s.Fatalf("conformance: %s of %s did not arrive within %s: %v", t, executionID, patience, err)
	}
}

// finalCount counts the final events so far: the server emits a call's
// final event before it answers, so the count after a call includes it.
func (s *suite) finalCount() int {
	n := 0
	for _, e := range s.rec.Events() {
		if e.Type.Final() {
			n++
		}
	}
	return n
}

func code(env middleware.Envelope) middleware.Code {
	if env.Error == nil {
		return middleware.CodeOK
	}
	return env.Error.Code
}

// expect checks the envelope a client decoded: its code, and that it names
// an execution.
func (s *suite) expect(rule string, r Result, want middleware.Code) {
	s.Helper()
	if r.Envelope.ExecutionID == "" {
		s.Fatalf("%s: the client found no envelope on the wire (err: %v)", rule, r.Err)
	}
	if got := code(r.Envelope); got != want {
		s.Fatalf("%s: envelope code %s, want %s (err: %v)", rule, got, want, r.Err)
	}
	if want == middleware.CodeOK && (r.Response == nil || r.Err != nil) {
		s.Fatalf("%s: a completed call must deliver its response: %v", rule, r.Err)
	}
}

func (s *suite) wantRuns(rule, id string, n int) []middleware.Execution {
	s.Helper()
	runs := s.runsOf(id)
	if len(runs) != n {
		s.Fatalf("%s: the handler ran %d times, want %d", rule, len(runs), n)
	}
	return runs
}

type adapterRule struct {
	name   string
	stream bool
	check  func(s *suite)
	// engine is what the rule's engine needs beyond the suite's own.
	engine []middleware.Option
	// capabilities, when set, changes the suite's capabilities for the rule.
	capabilities func(s *suite, caps map[Fixture]middleware.Capability)
	// results gives the rule's engine a fresh result store, budgets a
	// fresh budget store.
	results, budgets bool
	// spelling marks a rule about how the Idempotency-Key header is spelt.
	spelling bool
	// variant says with which capabilities the rule runs: as listed,
	// Inline, or both (the zero value).
	variant variant
}

// variant is which of RunAdapter's runs a rule belongs to.
type variant uint8

const (
	bothVariants variant = iota
	// notInline: a rule about attempts abandoned at their deadline, which
	// Inline attempts never are.
	notInline
	// inlineOnly: a rule about what Inline changes.
	inlineOnly
)

// skip says why the rule does not apply to the harness, or "".
func (r adapterRule) skip(s *suite) string {
	switch {
	case r.stream && s.streams == nil:
		return "the harness does not govern streams"
	case r.spelling && keyArgument(s.client):
		return "the harness's keys travel as an argument, not in the Idempotency-Key header's spelling"
	}
	return ""
}

var adapterRules = []adapterRule{
	{name: "Retry/a read is retried after a transient failure in the same execution", check: func(s *suite) {
		const rule = "a read with retry configured must be retried in the same execution"
		req := s.request(ModeFlaky)
		req.FailTimes = 1
		r := s.call(FixtureRead, req, "")
		s.expect(rule, r, middleware.CodeOK)
		runs := s.wantRuns(rule, req.ID, 2)
		if runs[0].ID != runs[1].ID || runs[0].ID != r.Envelope.ExecutionID || r.Envelope.Attempts != 2 {
			s.Errorf("%s: attempts ran as executions %s and %s, envelope %s with %d attempts", rule, runs[0].ID, runs[1].ID, r.Envelope.ExecutionID, r.Envelope.Attempts)
		}
	}},
	{name: "Retry/an idempotent write with retry configured is retried", check: func(s *suite) {
		const rule = "a write declared idempotent with retry configured may be retried"
		req := s.request(ModeFlaky)
		req.FailTimes = 1
		s.expect(rule, s.call(FixtureIdempotentWrite, req, ""), middleware.CodeOK)
		s.wantRuns(rule, req.ID, 2)
	}},
	{name: "Retry/the adapter never retries a write on its own", check: func(s *suite) {
		const rule = "only the engine retries, and never a write without Idempotent and retry configured"
		req := s.request(ModeFlaky)
		req.FailTimes = 1
		r := s.call(FixtureWrite, req, "")
		s.expect(rule, r, middleware.CodeExecutionFailed)
		s.wantRuns(rule, req.ID, 1)
		if r.Envelope.Attempts != 1 || r.Envelope.Error.Retryable {
			s.Errorf("%s: envelope %+v: one attempt, and not retryable for the caller (a re-invocation would run it again)", rule, r.Envelope)
		}
	}},
	{name: "Retry/attempts are bounded by MaxRetries and counted", check: func(s *suite) {
		const rule = "MaxRetries counts re-attempts after the first run"
		req := s.request(ModeFlaky)
		req.FailTimes = 10
		r := s.call(FixtureRead, req, "")
		s.expect(rule, r, middleware.CodeExecutionFailed)
		s.wantRuns(rule, req.ID, 3)
		if r.Envelope.Attempts != 3 || r.Header.Get(adapter.HeaderAttempts) != "3" {
			s.Errorf("%s: envelope says %d attempts, header %q, want 3", rule, r.Envelope.Attempts, r.Header.Get(adapter.HeaderAttempts))
		}
	}},
	{name: "Timeout/an attempt's own timeout is TIMEOUT", check: func(s *suite) {
		const rule = "an attempt's own timer is TIMEOUT, runtime-retryable, reported to the caller"
		req := s.request(ModeHang)
		r := s.call(FixtureSlow, req, "")
		s.expect(rule, r, middleware.CodeTimeout)
		s.wantRuns(rule, req.ID, 1)
		if r.Envelope.Status != middleware.StatusCancelled || !r.Envelope.Error.Retryable {
			s.Errorf("%s: envelope %+v, want status cancelled and retryable for a read", rule, r.Envelope)
		}
	}},
	{name: "Timeout/a handler that ignores its context is reported at the deadline", variant: notInline, check: func(s *suite) {
		const rule = "bounded reporting: TIMEOUT at the deadline, the late result discarded"
		req := s.request(ModeIgnore)
		start := time.Now()
		r := s.call(FixtureSlow, req, "")
		took := time.Since(start)
		s.expect(rule, r, middleware.CodeTimeout)
		if took >= slowTimeout+lateBy {
			s.Errorf("%s: the call took %s, as long as the handler; it must return at the %s deadline", rule, took, slowTimeout)
		}
		if r.Response != nil {
			s.Errorf("%s: the late result reached the client: %+v", rule, r.Response)
		}
		s.wait(s.returned[req.ID], "the abandoned handler to return")
		s.waitEvent(r.Envelope.ExecutionID, middleware.EventAbandonedResult)
	}},
	{name: "Isolation/an abandoned attempt never writes to the client", check: func(s *suite) {
		const rule = "only the finalized attempt's headers reach the wire"
		req := s.request(ModeIgnore)
		r := s.call(FixtureSlow, req, "")
		s.expect(rule, r, middleware.CodeTimeout)
		s.wait(s.returned[req.ID], "the abandoned handler to return")
		if v := r.Header.Values("X-Conformance-Late"); len(v) > 0 {
			s.Errorf("%s: a header set by the abandoned attempt reached the client: %v", rule, v)
		}
	}},
	{name: "Isolation/only the finalized attempt's headers reach the wire", check: func(s *suite) {
		const rule = "each attempt writes its own headers; only the finalized attempt's reach the client"
		req := s.request(ModeHeaders)
		r := s.call(FixtureRead, req, "")
		s.expect(rule, r, middleware.CodeOK)
		if v := r.Header.Values("X-Conformance-Attempt"); !slices.Equal(v, []string{"2"}) {
			s.Errorf("%s: X-Conformance-Attempt on the wire = %v, want only the finalized attempt's [2]", rule, v)
		}
	}},
	{name: "Cancel/the caller's cancellation is CANCELLED and never retried", check: func(s *suite) {
		const rule = "the caller's cancellation is terminal: CANCELLED, never retried"
		req := s.request(ModeHang)
		ctx, cancel := context.WithCancel(s.Context())
		done := make(chan Result, 1)
		go func() { done <- s.client.Call(ctx, FixtureRead, req, "") }()
		s.wait(s.started[req.ID], "the handler to start")
		cancel()
		<-done
		runs := s.wantRuns(rule, req.ID, 1)
		finals := s.final(runs[0].ID)
		if finals[0].Code != middleware.CodeCancelled || finals[0].Type != middleware.EventCancelled {
			s.Errorf("%s: final event %s %s, want capability.cancelled CANCELLED", rule, finals[0].Type, finals[0].Code)
		}
		s.wantRuns(rule, req.ID, 1)
	}},
	{name: "Cancel/the caller's deadline is CANCELLED, not TIMEOUT", check: func(s *suite) {
		const rule = "the caller's own deadline is the caller leaving: CANCELLED"
		req := s.request(ModeHang)
		ctx, cancel := context.WithTimeout(s.Context(), attemptTimeout/3)
		defer cancel()
		r := s.client.Call(ctx, FixtureRead, req, "")
		runs := s.wantRuns(rule, req.ID, 1)
		if finals := s.final(runs[0].ID); finals[0].Code != middleware.CodeCancelled {
			s.Errorf("%s: final event code %s, want CANCELLED", rule, finals[0].Code)
		}
		// When the client read the server's answer before its own timer
		// fired, that answer is DeadlineExceeded, as every gRPC server
		// reports a caller's deadline.
		if r.Envelope.ExecutionID != "" && r.Status != nil && r.Status.Code != StatusDeadlineExceeded {
			s.Errorf("the caller's own deadline is written as DeadlineExceeded: the client read code %d", r.Status.Code)
		}
	}},
	{name: "Envelope/exactly one envelope and one final event per call", check: func(s *suite) {
		const rule = "one execution, one envelope, one final event that agrees with it"
		for _, tc := range []struct {
			f    Fixture
			mode Mode
			want middleware.Code
		}{{FixtureRead, ModeOK, middleware.CodeOK}, {FixtureWrite, ModeFail, middleware.CodeExecutionFailed}, {FixtureSlow, ModeHang, middleware.CodeTimeout}, {FixtureRead, ModePanic, middleware.CodeExecutionFailed}} {
			req := s.request(tc.mode)
			before := s.finalCount()
			r := s.call(tc.f, req, "")
			s.expect(rule, r, tc.want)
			finals := s.final(r.Envelope.ExecutionID)
			if n := s.finalCount() - before; n != 1 {
				s.Errorf("%s: serving one %s/%s call finalized %d executions", rule, tc.f, tc.mode, n)
			}
			if len(finals) != 1 {
				s.Errorf("%s: %s/%s produced %d final events", rule, tc.f, tc.mode, len(finals))
				continue
			}
			if finals[0].Code != tc.want || finals[0].Attempts != r.Envelope.Attempts {
				s.Errorf("%s: final event %s attempts %d, envelope %s attempts %d", rule, finals[0].Code, finals[0].Attempts, code(r.Envelope), r.Envelope.Attempts)
			}
			for _, x := range s.runsOf(req.ID) {
				if x.ID != r.Envelope.ExecutionID {
					s.Errorf("%s: one call ran in two executions (%s, %s)", rule, x.ID, r.Envelope.ExecutionID)
				}
			}
		}
	}},
	{name: "Envelope/ids reach the wire on success", check: func(s *suite) {
		const rule = "Agentsafe-Execution-Id and Agentsafe-Attempts are sent on success"
		req := s.request(ModeOK)
		r := s.call(FixtureRead, req, "")
		s.expect(rule, r, middleware.CodeOK)
		if r.Header.Get(adapter.HeaderExecutionID) != r.Response.ExecutionID || r.Header.Get(adapter.HeaderAttempts) != "1" {
			s.Errorf("%s: headers %v, handler ran in %s", rule, r.Header, r.Response.ExecutionID)
		}
	}},
	{name: "Idempotency/the key is stable across retries and unique across calls", check: func(s *suite) {
		const rule = "one idempotency key per execution, the same on every attempt"
		req := s.request(ModeFlaky)
		req.FailTimes = 2
		s.expect(rule, s.call(FixtureRead, req, ""), middleware.CodeOK)
		runs := s.wantRuns(rule, req.ID, 3)
		for _, x := range runs {
			if x.IdempotencyKey == "" || x.IdempotencyKey != runs[0].IdempotencyKey {
				s.Errorf("%s: attempt %d saw key %q, attempt 1 %q", rule, x.Attempt, x.IdempotencyKey, runs[0].IdempotencyKey)
			}
		}
		again := s.request(ModeOK)
		r := s.call(FixtureRead, again, "")
		s.expect(rule, r, middleware.CodeOK)
		if r.Response.IdempotencyKey == runs[0].IdempotencyKey || r.Envelope.ExecutionID == runs[0].ID {
			s.Errorf("%s: a re-invocation must be a new execution with a new key", rule)
		}
	}},
	{name: "Concealment/a plain error's text never reaches the caller", check: func(s *suite) {
		const rule = "plain Go errors are concealed"
		r := s.call(FixtureWrite, s.request(ModeFail), "")
		s.expect(rule, r, middleware.CodeExecutionFailed)
		s.concealed(rule, r)
		if !r.EngineDetail {
			s.Errorf("%s: a concealed error is the engine's outcome and carries its detail", rule)
		}
	}},
	{name: "Concealment/a panic is concealed and not retried", check: func(s *suite) {
		const rule = "a panicking handler is a concealed, non-retryable EXECUTION_FAILED"
		req := s.request(ModePanic)
		r := s.call(FixtureRead, req, "")
		s.expect(rule, r, middleware.CodeExecutionFailed)
		s.wantRuns(rule, req.ID, 1)
		s.concealed(rule, r)
	}},
	{name: "Approval/request, approve, resume and consume once", check: func(s *suite) {
		const rule = "a gated call runs only after approval, exactly once"
		req := s.request(ModeOK)
		r := s.call(FixtureGated, req, "")
		s.expect(rule, r, middleware.CodeApprovalRequired)
		s.wantRuns(rule, req.ID, 0)
		id := r.Envelope.ApprovalID
		if !store.ValidApprovalID(id) || r.Envelope.Status != middleware.StatusApprovalRequired {
			s.Fatalf("%s: the envelope must carry the new approval id: %+v", rule, r.Envelope)
		}
		s.expect(rule, s.call(FixtureGated, req, id), middleware.CodeApprovalPending)
		if _, err := s.eng.Decide(s.Context(), id, store.Decision{Approve: true, Approver: suiteApprover}); err != nil {
			s.Fatal(err)
		}
		r = s.call(FixtureGated, req, id)
		s.expect(rule, r, middleware.CodeOK)
		runs := s.wantRuns(rule, req.ID, 1)
		if r.Envelope.ApprovalID != id || runs[0].Approval == nil || runs[0].Approval.Approver.ID != suiteApprover.ID {
			s.Errorf("%s: the resumed execution must carry its approval: envelope %q, handler saw %+v", rule, r.Envelope.ApprovalID, runs[0].Approval)
		}
		r = s.call(FixtureGated, req, id)
		s.expect("a second resume is refused", r, middleware.CodeApprovalConsumed)
		s.wantRuns("a second resume must not run", req.ID, 1)
	}},
	{name: "Approval/a resume after the previewed state changed is APPROVAL_STALE and runs nothing", capabilities: func(s *suite, caps map[Fixture]middleware.Capability) {
		c := caps[FixtureGated]
		c.Preview = s.previewed
		caps[FixtureGated] = c
	}, check: func(s *suite) {
		const rule = "a resume whose capability's preview computes another state than the approved one is APPROVAL_STALE: nothing runs and nothing is consumed"
		s.version.Store(1)
		req := s.request(ModeOK)
		r := s.call(FixtureGated, req, "")
		s.expect(rule, r, middleware.CodeApprovalRequired)
		id := r.Envelope.ApprovalID
		if _, err := s.eng.Decide(s.Context(), id, store.Decision{Approve: true, Approver: suiteApprover}); err != nil {
			s.Fatal(err)
		}
		s.version.Store(2)
		r = s.call(FixtureGated, req, id)
		s.expect(rule, r, middleware.CodeApprovalStale)
		s.wantRuns(rule, req.ID, 0)
		if r.Envelope.Error.Retryable || r.Header.Get(adapter.HeaderCode) != middleware.CodeApprovalStale.String() || !r.EngineDetail {
			s.Errorf("%s: a stale resume is not retryable, says %s in %s and carries agentsafe's detail: envelope %+v, header %q, detail %t",
				rule, middleware.CodeApprovalStale, adapter.HeaderCode, r.Envelope.Error, r.Header.Get(adapter.HeaderCode), r.EngineDetail)
		}
		s.version.Store(1)
		r = s.call(FixtureGated, req, id)
		s.expect("once the state is as approved, the approval runs", r, middleware.CodeOK)
		if runs := s.wantRuns(rule, req.ID, 1); string(runs[0].ApprovedState) != "version 1" {
			s.Errorf("%s: the handler must see the approved state, got %q", rule, runs[0].ApprovedState)
		}
	}},
	{name: "Headers/a malformed Agentsafe-Approval-Id is INVALID_ARGUMENT", check: func(s *suite) {
		const rule = "a malformed agentsafe header is INVALID_ARGUMENT naming the header"
		req := s.request(ModeOK)
		r := s.call(FixtureRead, req, "apr_not-an-id")
		s.expect(rule, r, middleware.CodeInvalidArgument)
		s.wantRuns(rule, req.ID, 0)
		if !strings.Contains(r.Envelope.Error.Message, adapter.HeaderApprovalID) {
			s.Errorf("%s: message %q does not name the header", rule, r.Envelope.Error.Message)
		}
	}},
	{name: "Status/a framework deadline status after the attempt's deadline is TIMEOUT", check: func(s *suite) {
		const rule = "a framework cancel or deadline status after the context ended is the context's outcome"
		req := s.request(ModeFrameworkDeadline)
		r := s.call(FixtureSlow, req, "")
		s.expect(rule, r, middleware.CodeTimeout)
		s.wantRuns(rule, req.ID, 1)
		if !r.EngineDetail {
			s.Errorf("%s: TIMEOUT is the engine's outcome and carries its detail", rule)
		}
	}},
	{name: "Status/a framework Unavailable status is transient", check: func(s *suite) {
		const rule = "a framework's Unavailable is retried where the capability allows"
		req := s.request(ModeUnavailable)
		req.FailTimes = 1
		r := s.call(FixtureRead, req, "")
		s.expect(rule, r, middleware.CodeOK)
		s.wantRuns(rule, req.ID, 2)
	}},
	{name: "Status/a handler's framework error reaches the client unchanged", check: func(s *suite) {
		const rule = "a framework error the handler returned passes through unchanged: code, message, details; no agentsafe detail"
		req := s.request(ModeFrameworkError)
		r := s.call(FixtureWrite, req, "")
		s.expect(rule, r, middleware.CodeExecutionFailed)
		s.wantRuns(rule, req.ID, 1)
		want := Status{Code: StatusUnimplemented, Message: FrameworkErrorMessage, Detail: FrameworkErrorDetail}
		if r.Status == nil || *r.Status != want {
			s.Errorf("%s: the client decoded %+v, want %+v", rule, r.Status, want)
		}
		if r.EngineDetail {
			s.Errorf("%s: the handler's own error gained agentsafe's detail", rule)
		}
		if r.Header.Get(adapter.HeaderCode) != middleware.CodeExecutionFailed.String() || r.Header.Get(adapter.HeaderRetryable) != "false" {
			s.Errorf("%s: the envelope's code and retryable flag travel as %s and %s: got %q and %q", rule,
				adapter.HeaderCode, adapter.HeaderRetryable, r.Header.Get(adapter.HeaderCode), r.Header.Get(adapter.HeaderRetryable))
		}
	}},
	{name: "Isolation/a handler that mutates its input cannot change the next attempt's", check: func(s *suite) {
		const rule = "each attempt gets the input as the caller sent it"
		req := s.request(ModeMutate)
		r := s.call(FixtureRead, req, "")
		s.expect(rule, r, middleware.CodeOK)
		s.wantRuns(rule, req.ID, 2)
		if n := len(s.runsOf(MutatedID)); n > 0 {
			s.Errorf("%s: %d attempts saw the input attempt 1 mutated", rule, n)
		}
	}},
	{name: "Envelope/a relayed downstream envelope never shadows this one", check: func(s *suite) {
		const rule = "the envelope's headers are the engine's alone"
		req := s.request(ModeRelay)
		r := s.call(FixtureRead, req, "")
		s.expect(rule, r, middleware.CodeOK)
		runs := s.wantRuns(rule, req.ID, 1)
		if r.Envelope.ExecutionID != runs[0].ID || r.Envelope.Attempts != 1 || r.Envelope.ApprovalID != "" {
			s.Errorf("%s: the client read %+v, the call ran as %s", rule, r.Envelope, runs[0].ID)
		}
		for h, want := range map[string][]string{
			adapter.HeaderExecutionID: {runs[0].ID},
			adapter.HeaderAttempts:    {"1"},
			adapter.HeaderApprovalID:  nil,
			adapter.HeaderCode:        nil,
		} {
			if got := r.Header.Values(h); !slices.Equal(got, want) {
				s.Errorf("%s: %s on the wire = %q, want %q", rule, h, got, want)
			}
		}
	}},
	{name: "Audit/a strict audit sink that cannot record the request refuses the call", engine: []middleware.Option{middleware.WithAuditSink(failingAudit{})}, check: func(s *suite) {
		const rule = "no record, no effect: AUDIT_UNAVAILABLE, nothing runs, safe to re-invoke"
		req := s.request(ModeOK)
		r := s.call(FixtureWrite, req, "")
		s.expect(rule, r, middleware.CodeAuditUnavailable)
		s.wantRuns(rule, req.ID, 0)
		if !r.Envelope.Error.Retryable {
			s.Errorf("%s: nothing ran, so re-invoking is safe: envelope %+v", rule, r.Envelope.Error)
		}
	}},
	{name: "Audit/a strict audit sink slower than its bound refuses the call", engine: []middleware.Option{middleware.WithAuditSink(slowAudit{}, slowTimeout)}, check: func(s *suite) {
		const rule = "an audit record that does not arrive in time is a failure: nothing runs"
		req := s.request(ModeOK)
		r := s.call(FixtureWrite, req, "")
		s.expect(rule, r, middleware.CodeAuditUnavailable)
		s.wantRuns(rule, req.ID, 0)
	}},
	{name: "Stream/a stream carries ids and ends in one envelope", stream: true, check: func(s *suite) {
		const rule = "a governed stream has ids and one envelope"
		req := s.request(ModeOK)
		req.Count = 3
		ctx, cancel := context.WithTimeout(s.Context(), patience)
		defer cancel()
		msgs, r := s.streams.Stream(ctx, req)
		s.expect(rule, r, middleware.CodeOK)
		if len(msgs) != 3 || msgs[0].ExecutionID != r.Envelope.ExecutionID {
			s.Errorf("%s: %d messages in execution %q, envelope %q", rule, len(msgs), firstExec(msgs), r.Envelope.ExecutionID)
		}
		if finals := s.final(r.Envelope.ExecutionID); len(finals) != 1 {
			s.Errorf("%s: %d final events", rule, len(finals))
		}
	}},
	{name: "Stream/a stream is never retried", stream: true, check: func(s *suite) {
		const rule = "streams are never retried"
		req := s.request(ModeFlaky)
		req.FailTimes = 1
		ctx, cancel := context.WithTimeout(s.Context(), patience)
		defer cancel()
		_, r := s.streams.Stream(ctx, req)
		s.expect(rule, r, middleware.CodeExecutionFailed)
		s.wantRuns(rule, req.ID, 1)
	}},
}

func firstExec(msgs []Response) string {
	if len(msgs) == 0 {
		return ""
	}
	return msgs[0].ExecutionID
}

func (s *suite) concealed(rule string, r Result) {
	s.Helper()
	if r.Envelope.Error == nil || r.Envelope.Error.Message != adapter.ConcealedMessage {
		s.Errorf("%s: envelope message %+v, want %q", rule, r.Envelope.Error, adapter.ConcealedMessage)
	}
	for what, text := range map[string]string{"error": fmt.Sprint(r.Err), "body": string(r.Body), "headers": fmt.Sprint(r.Header)} {
		if strings.Contains(text, secret) {
			s.Errorf("%s: the handler's secret reached the client's %s: %s", rule, what, text)
		}
	}
}
