package conformance

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/agentsafe/agentsafe/resultstore"
)

// KeyedClient is implemented by the clients of adapters that honour a
// caller's Idempotency-Key, which every adapter should: the suite's key
// rules fail without it. CallKeyed is [Client.Call] with key sent as the
// call's Idempotency-Key exactly as given (the suite sends malformed keys
// on purpose): the HTTP header, Connect or gRPC metadata, the Twirp
// header, or over MCP the _idempotency_key argument.
type KeyedClient interface {
	CallKeyed(ctx context.Context, f Fixture, req Request, approvalID, key string) Result
}

// KeyArgument is implemented by the clients of bridges whose caller key
// is a plain argument rather than an Idempotency-Key header (the MCP
// bridge's _idempotency_key): the value as given, not a header's spelling.
// For them the rules about the header's spellings are skipped.
type KeyArgument interface {
	KeyArgument() bool
}

func keyArgument(c Client) bool {
	ka, ok := c.(KeyArgument)
	return ok && ka.KeyArgument()
}

// resultKey seals the suite's stored results.
var resultKey = middleware.ResultKey{ID: "conformance", Key: []byte("conformance-result-sealing-key-!")}

// options is what the rule's engine needs beyond the suite's own: a
// fresh result store for a rule that stores results.
func (r adapterRule) options() []middleware.Option {
	var opts []middleware.Option
	if r.results {
		opts = append(opts, middleware.WithResultStore(resultstore.NewMemory()), middleware.WithResultKey(resultKey))
	}
	if r.budgets {
		opts = append(opts, middleware.WithBudgetStore(budgetstore.NewMemory()))
	}
	return append(opts, r.engine...)
}

// callKeyed calls f with key as the caller's Idempotency-Key.
func (s *suite) callKeyed(f Fixture, req Request, approvalID, key string) Result {
	s.Helper()
	kc, ok := s.client.(KeyedClient)
	if !ok {
		s.Fatalf("conformance: the harness's client must implement KeyedClient: every adapter passes the caller's Idempotency-Key to the engine")
	}
	ctx, cancel := context.WithTimeout(s.Context(), patience)
	defer cancel()
	return kc.CallKeyed(ctx, f, req, approvalID, key)
}

// callTwice calls f with req under key twice, without an approval, and
// expects the first call to answer code first and the repeat code then.
func (s *suite) callTwice(rule string, f Fixture, req Request, key string, first, then middleware.Code) (Result, Result) {
	s.Helper()
	r1 := s.callKeyed(f, req, "", key)
	s.expect(rule, r1, first)
	r2 := s.callKeyed(f, req, "", key)
	s.expect(rule, r2, then)
	return r1, r2
}

// replayOf checks that r is the replay of first: the same execution and
// response, marked replayed on the wire.
func (s *suite) replayOf(rule string, r, first Result) {
	s.Helper()
	if r.Envelope.ExecutionID != first.Envelope.ExecutionID || !r.Envelope.Replayed || r.Header.Get(adapter.HeaderReplayed) != "true" {
		s.Errorf("%s: a replay carries the stored envelope (execution %s, Replayed, %s: true): got execution %s, Replayed %v, header %q",
			rule, first.Envelope.ExecutionID, adapter.HeaderReplayed, r.Envelope.ExecutionID, r.Envelope.Replayed, r.Header.Get(adapter.HeaderReplayed))
	}
	if first.Envelope.Replayed || first.Header.Get(adapter.HeaderReplayed) != "" {
		s.Errorf("%s: the first call ran: it is not a replay", rule)
	}
}

// doubtful is a write the suite can leave in doubt and then reconcile:
// its Reconcile hook answers with the suite's reconcile function.
func doubtful(s *suite, caps map[Fixture]middleware.Capability) {
	c := caps[FixtureWrite]
	c.Reconcile = func(ctx context.Context, key string) (middleware.Reconciled, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reconciled = append(s.reconciled, key)
		return middleware.Reconciled{Done: s.reconcileDone}, nil
	}
	caps[FixtureWrite] = c
}

var keyRules = []adapterRule{
	{name: "Keys/a repeat with the same key replays the stored result", results: true, check: func(s *suite) {
		const rule = "a repeat with the caller's key gets the stored envelope and response, and nothing runs"
		req := s.request(ModeOK)
		first, r := s.callTwice(rule, FixtureWrite, req, "order-42-refund", middleware.CodeOK, middleware.CodeOK)
		s.wantRuns(rule, req.ID, 1)
		s.replayOf(rule, r, first)
		if *r.Response != *first.Response {
			s.Errorf("%s: the replayed response %+v differs from the stored %+v", rule, *r.Response, *first.Response)
		}
		if finals := s.final(first.Envelope.ExecutionID); len(finals) != 1 || finals[0].Type != middleware.EventCompleted {
			s.Errorf("%s: the first execution completed: %+v", rule, finals)
		}
	}},
	{name: "Keys/both spellings of a key are one key", results: true, spelling: true, check: func(s *suite) {
		const rule = "a bare token and the sf-string of the same value are one key"
		req := s.request(ModeOK)
		first := s.callKeyed(FixtureWrite, req, "", "k-7")
		r := s.callKeyed(FixtureWrite, req, "", `"k-7"`)
		s.expect(rule, r, middleware.CodeOK)
		s.replayOf(rule, r, first)
		s.wantRuns(rule, req.ID, 1)
	}},
	{name: "Keys/a malformed key is INVALID_ARGUMENT naming the header", results: true, spelling: true, check: func(s *suite) {
		const rule = "an Idempotency-Key that is neither an sf-string nor a token is refused, naming the header"
		req := s.request(ModeOK)
		r := s.callKeyed(FixtureWrite, req, "", `"unterminated`)
		s.expect(rule, r, middleware.CodeInvalidArgument)
		s.wantRuns(rule, req.ID, 0)
		if !strings.Contains(r.Envelope.Error.Message, adapter.HeaderIdempotencyKey) {
			s.Errorf("%s: message %q does not name the header", rule, r.Envelope.Error.Message)
		}
	}},
	{name: "Keys/a repeat while the first runs is IDEMPOTENCY_IN_FLIGHT", results: true, check: func(s *suite) {
		const rule = "a key held by a running execution answers IDEMPOTENCY_IN_FLIGHT, safe to re-invoke, and runs nothing"
		req := s.request(ModeHang)
		done := make(chan Result, 1)
		go func() { done <- s.callKeyed(FixtureWrite, req, "", "slow-key") }()
		s.wait(s.started[req.ID], "the first call's handler to start")
		r := s.callKeyed(FixtureWrite, req, "", "slow-key")
		s.expect(rule, r, middleware.CodeIdempotencyInFlight)
		if !r.Envelope.Error.Retryable || r.Envelope.Replayed {
			s.Errorf("%s: envelope %+v", rule, r.Envelope)
		}
		<-done
		s.wantRuns(rule, req.ID, 1)
	}},
	{name: "Keys/the same key with another input is IDEMPOTENCY_KEY_REUSED", results: true, check: func(s *suite) {
		const rule = "a key that comes back with another input is refused, and nothing runs"
		first := s.request(ModeOK)
		s.expect(rule, s.callKeyed(FixtureWrite, first, "", "reused"), middleware.CodeOK)
		other := s.request(ModeOK)
		r := s.callKeyed(FixtureWrite, other, "", "reused")
		s.expect(rule, r, middleware.CodeIdempotencyKeyReused)
		s.wantRuns(rule, other.ID, 0)
		if r.Envelope.Error.Retryable {
			s.Errorf("%s: a reused key is not safe to re-invoke", rule)
		}
	}},
	{name: "Keys/a write that failed leaves its key in doubt", results: true, check: func(s *suite) {
		const rule = "a write that may have had an effect answers its repeats IDEMPOTENCY_IN_DOUBT"
		req := s.request(ModeFail)
		first, r := s.callTwice(rule, FixtureWrite, req, "doubt", middleware.CodeExecutionFailed, middleware.CodeIdempotencyInDoubt)
		s.wantRuns(rule, req.ID, 1)
		if r.Envelope.Error.Retryable || !strings.Contains(r.Envelope.Error.Message, first.Envelope.ExecutionID) {
			s.Errorf("%s: not safe to re-invoke, and naming the execution in doubt: %+v", rule, r.Envelope.Error)
		}
	}},
	{name: "Keys/a handler's framework error is replayed unchanged", results: true, check: func(s *suite) {
		const rule = "a handler's own framework error is stored and replayed as the framework sent it"
		req := s.request(ModeFrameworkError)
		first, r := s.callTwice(rule, FixtureWrite, req, "framework", middleware.CodeExecutionFailed, middleware.CodeExecutionFailed)
		s.wantRuns(rule, req.ID, 1)
		s.replayOf(rule, r, first)
		want := Status{Code: StatusUnimplemented, Message: FrameworkErrorMessage, Detail: FrameworkErrorDetail}
		if r.Status == nil || *r.Status != want || r.EngineDetail {
			s.Errorf("%s: the client decoded %+v (agentsafe detail %v), want %+v and no agentsafe detail", rule, r.Status, r.EngineDetail, want)
		}
	}},
	{name: "Keys/a gated call runs once, and a repeat never consumes again", results: true, check: func(s *suite) {
		const rule = "the gated first call stores nothing; the resume runs and stores; a repeat is replayed before the gate"
		req := s.request(ModeOK)
		r := s.callKeyed(FixtureGated, req, "", "gated")
		s.expect(rule, r, middleware.CodeApprovalRequired)
		id := r.Envelope.ApprovalID
		if again := s.callKeyed(FixtureGated, req, "", "gated"); code(again.Envelope) != middleware.CodeApprovalRequired || again.Envelope.ApprovalID != id {
			s.Fatalf("%s: the request's claim is given back, so a repeat asks again (for the same approval): %+v", rule, again.Envelope)
		}
		if _, err := s.eng.Decide(s.Context(), id, store.Decision{Approve: true, Approver: suiteApprover}); err != nil {
			s.Fatal(err)
		}
		resumed := s.callKeyed(FixtureGated, req, id, "gated")
		s.expect(rule, resumed, middleware.CodeOK)
		for _, approvalID := range []string{id, ""} {
			r := s.callKeyed(FixtureGated, req, approvalID, "gated")
			s.expect(rule, r, middleware.CodeOK)
			s.replayOf(rule, r, resumed)
		}
		s.wantRuns(rule, req.ID, 1)
	}},
	{name: "Keys/Reconcile: a done execution in doubt replays its envelope without a body", results: true, capabilities: doubtful, check: func(s *suite) {
		const rule = "a key in doubt that Reconcile finds done is answered as completed, from the execution in doubt"
		s.setReconcileDone()
		req := s.request(ModeFlaky)
		req.FailTimes = 1
		first := s.callKeyed(FixtureWrite, req, "", "reconcile-done")
		s.expect(rule, first, middleware.CodeExecutionFailed)
		for range 2 {
			r := s.callKeyed(FixtureWrite, req, "", "reconcile-done")
			if code(r.Envelope) != middleware.CodeOK || r.Err != nil {
				s.Fatalf("%s: got %s (%v)", rule, code(r.Envelope), r.Err)
			}
			if r.Envelope.ExecutionID != first.Envelope.ExecutionID || !r.Envelope.Replayed || r.Header.Get(adapter.HeaderReplayed) != "true" {
				s.Errorf("%s: the replay names the execution in doubt: %+v", rule, r.Envelope)
			}
		}
		s.wantRuns(rule, req.ID, 1)
		if asked := s.reconciledKeys(); len(asked) != 1 || asked[0] != s.runsOf(req.ID)[0].IdempotencyKey {
			s.Errorf("%s: Reconcile is asked once, with the key the handler saw: %v", rule, asked)
		}
	}},
	{name: "Keys/Reconcile: not found runs again under the same key", results: true, capabilities: doubtful, check: func(s *suite) {
		const rule = "a key in doubt that Reconcile does not find runs again, under the same idempotency key"
		req := s.request(ModeFlaky)
		req.FailTimes = 1
		s.expect(rule, s.callKeyed(FixtureWrite, req, "", "reconcile-missing"), middleware.CodeExecutionFailed)
		r := s.callKeyed(FixtureWrite, req, "", "reconcile-missing")
		s.expect(rule, r, middleware.CodeOK)
		runs := s.wantRuns(rule, req.ID, 2)
		if runs[0].IdempotencyKey != runs[1].IdempotencyKey || runs[0].ID == runs[1].ID || r.Envelope.Replayed {
			s.Errorf("%s: the second run is a new execution with the same key: %+v", rule, runs)
		}
		s.replayOf(rule, s.callKeyed(FixtureWrite, req, "", "reconcile-missing"), r)
		other := s.request(ModeOK)
		s.expect(rule, s.callKeyed(FixtureWrite, other, "", "another-key"), middleware.CodeOK)
		if k := s.runsOf(other.ID)[0].IdempotencyKey; k == runs[0].IdempotencyKey {
			s.Errorf("%s: another caller key must give the handler another key", rule)
		}
	}},
	{name: "Keys/a caller at its result quota is IDEMPOTENCY_QUOTA_EXCEEDED", results: true, engine: []middleware.Option{middleware.WithResultQuota(1, 1<<20)}, check: func(s *suite) {
		const rule = "a key that would make a new result for a caller at its quota is refused IDEMPOTENCY_QUOTA_EXCEEDED (ResourceExhausted, HTTP 429), not safe to re-invoke, and nothing runs"
		first := s.request(ModeOK)
		stored := s.callKeyed(FixtureWrite, first, "", "quota-1")
		s.expect(rule, stored, middleware.CodeOK)
		req := s.request(ModeOK)
		r := s.callKeyed(FixtureWrite, req, "", "quota-2")
		s.expect(rule, r, middleware.CodeIdempotencyQuotaExceeded)
		s.wantRuns(rule, req.ID, 0)
		if r.Envelope.Error.Retryable || r.Header.Get(adapter.HeaderCode) != middleware.CodeIdempotencyQuotaExceeded.String() || r.Header.Get(adapter.HeaderRetryable) != "false" {
			s.Errorf("%s: envelope %+v, headers %s %q and %s %q", rule, r.Envelope.Error,
				adapter.HeaderCode, r.Header.Get(adapter.HeaderCode), adapter.HeaderRetryable, r.Header.Get(adapter.HeaderRetryable))
		}
		if r.Status != nil && r.Status.Code != StatusResourceExhausted {
			s.Errorf("%s: the client decoded status %+v, want code %d", rule, r.Status, StatusResourceExhausted)
		}
		s.replayOf(rule+": the stored key still replays", s.callKeyed(FixtureWrite, first, "", "quota-1"), stored)
	}},
	{name: "Keys/a key on a read has no effect", results: true, check: func(s *suite) {
		const rule = "a caller's key on a read is checked and then ignored: nothing is stored, every call runs under its own key"
		req := s.request(ModeOK)
		first, r := s.callTwice(rule, FixtureRead, req, "read-42", middleware.CodeOK, middleware.CodeOK)
		runs := s.wantRuns(rule, req.ID, 2)
		if r.Envelope.Replayed || r.Header.Get(adapter.HeaderReplayed) != "" || r.Envelope.ExecutionID == first.Envelope.ExecutionID {
			s.Errorf("%s: the repeat ran as a call of its own, not a replay: %+v", rule, r.Envelope)
		}
		if runs[0].IdempotencyKey == runs[1].IdempotencyKey {
			s.Errorf("%s: each run has its own idempotency key, not one derived from the caller's: %s", rule, runs[0].IdempotencyKey)
		}
		if !keyArgument(s.client) {
			bad := s.request(ModeOK)
			s.expect(rule+": a malformed key is still refused", s.callKeyed(FixtureRead, bad, "", `"unterminated`), middleware.CodeInvalidArgument)
			s.wantRuns(rule, bad.ID, 0)
		}
	}},
	{name: "Keys/a dedup window replays a repeat without a key", results: true, capabilities: func(_ *suite, caps map[Fixture]middleware.Capability) {
		c := caps[FixtureWrite]
		c.Dedup = time.Minute
		caps[FixtureWrite] = c
	}, check: func(s *suite) {
		const rule = "within its dedup window, a repeat of the same call replays"
		req := s.request(ModeOK)
		first := s.call(FixtureWrite, req, "")
		s.expect(rule, first, middleware.CodeOK)
		r := s.call(FixtureWrite, req, "")
		s.expect(rule, r, middleware.CodeOK)
		s.replayOf(rule, r, first)
		s.wantRuns(rule, req.ID, 1)
	}},
}

// reconcileState is what the Reconcile rules' hook answers, and the keys
// it was asked about; guarded by the suite's mu.
type reconcileState struct {
	reconcileDone bool
	reconciled    []string
}

func (s *suite) setReconcileDone() {
	s.mu.Lock()
	s.reconcileDone = true
	s.mu.Unlock()
}

func (s *suite) reconciledKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reconciled)
}
