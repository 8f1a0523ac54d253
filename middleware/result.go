package middleware

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/agentsafe/agentsafe/internal/ids"
	"github.com/agentsafe/agentsafe/internal/replay"
	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware/store"
	"google.golang.org/protobuf/proto"
)

// WithResultStore sets where the results of calls that carry a caller's
// Idempotency-Key live (package resultstore: an in-memory store for one
// process, Redis for many), so that a model that lost a reply and calls
// again with the same key gets the first call's result instead of a second
// run:
//   - the first call with a key claims it, runs, and its result is stored
//     (for [Defaults].ResultRetention, 24 hours by default);
//   - a repeat with the same key and input is answered with the stored
//     result before any approval is asked for: the first execution's
//     envelope (its id, [Envelope].Replayed set, the header
//     Agentsafe-Replayed: true) and its response; nothing runs, and the
//     repeat's own audit trail ends in capability.replayed;
//   - a repeat while the first still runs is IDEMPOTENCY_IN_FLIGHT
//     (retryable), the key with another input IDEMPOTENCY_KEY_REUSED, and
//     a key whose first execution may have had an effect and left no
//     result IDEMPOTENCY_IN_DOUBT, unless the capability can reconcile it
//     ([Capability].Reconcile);
//   - a store that fails is IDEMPOTENCY_UNAVAILABLE: nothing runs.
//
// What is stored: completed results, and a handler's own answer that the
// classifier does not retry (a framework's error, passed to the caller
// unchanged, or a declared *[Error]). Nothing is stored, and the key is
// given back, when nothing ran (an approval, audit or argument refusal,
// the caller gone before the first attempt), or when a read, or an
// idempotent capability, failed retryably: the caller may try again under
// the same key. Any other failure of a write-like capability after an
// attempt started leaves the key in doubt; an attempt abandoned at its
// deadline that returns later stores its own result then. A stored
// response over 1 MiB is left out: a repeat gets the envelope alone.
//
// The key a caller sends is scoped: its record, and the idempotency key
// the handler sees, are derived from the audience ([WithAudience]), the
// whole actor ([WithActor]) and the procedure too, so one caller's key
// never answers another's call. Stored responses are sealed with
// [WithResultKey], which New requires, and never appear in events.
// [Capability].Dedup replays repeats without a key within a window, and
// needs a result store too. Without one, the Idempotency-Key of incoming
// calls is ignored. Streams are never stored or replayed.
//
// A key on a read (side effect none or read) is checked (a malformed one
// is INVALID_ARGUMENT) and then has no effect, as at Stripe: nothing is
// claimed or stored, and the read runs; a dedup window still applies.
func WithResultStore(s store.ResultStore) Option {
	return optionFunc(func(c *config) { c.results = s })
}

// WithResultQuota bounds what one caller's keys keep in the result store
// ([WithResultStore]): per audience and whole actor, at most records
// unexpired results (stored, running or in doubt) and bytes bytes of
// stored results. A call that would claim a new key beyond either is
// refused with IDEMPOTENCY_QUOTA_EXCEEDED (not safe to re-invoke at once:
// it is refused until results expire) and nothing runs; repeats of the
// keys already kept still replay. Results are counted at the claim,
// atomically with it; bytes when a result is stored, so one result may
// overshoot the byte quota. The default is 1,000 results and 64 MiB per
// actor, so that no one caller can fill a store that other callers, or
// approvals, share (size the store for the callers you expect, or give
// results a store of their own). Both must be positive.
func WithResultQuota(records int, bytes int64) Option {
	return optionFunc(func(c *config) {
		if records <= 0 || bytes <= 0 {
			c.problems = append(c.problems, fmt.Sprintf("WithResultQuota needs a positive number of records and of bytes (got %d and %d)", records, bytes))
			return
		}
		c.quota = store.ResultQuota{Records: records, Bytes: bytes}
	})
}

// Reconciled is what a capability's Reconcile hook found out about an
// execution in doubt (see [Capability].Reconcile).
type Reconciled struct {
	// Done reports that the execution in doubt had its effect: the result
	// is stored as completed, and the call is answered with it.
	Done bool
	// Response is the response the execution would have returned, when
	// Done and known: a proto.Message for Connect, gRPC, Twirp and MCP
	// calls, an *http.Response for a net/http route (its status, headers
	// and body are stored; the hook's body is read and closed). Nil, or a
	// response over 1 MiB (a net/http body over 1 MiB), stores the
	// envelope alone, and a repeat gets it without a body.
	Response any
}

// maxStoredResponse is the largest response stored with its result; a
// larger one is left out and replayed without a body.
const maxStoredResponse = 1 << 20

// defaultResultRetention is how long a result is kept by default.
const defaultResultRetention = 24 * time.Hour

// keyed is what an execution with a caller's key, or within a dedup
// window, knows about its key. Written by the Execute goroutine; doubtful
// under the execution's mu.
type keyed struct {
	callerKey string // the caller's key as parsed; "" for a dedup window
	retention time.Duration
	key       string // the record key, derived once the digest is known
	owner     string // whose quota the record counts against
	held      bool   // this execution holds the key
	replay    *replayed
	// doubtful: the execution finalized leaving the key in doubt, so an
	// abandoned attempt that returns late stores its result.
	doubtful bool
}

// ref names the key's record in the store.
func (k *keyed) ref() store.ResultKey { return store.ResultKey{Owner: k.owner, Key: k.key} }

// replayed is a stored result, as an execution answers with it.
type replayed struct {
	env Envelope
	v   any
	err *Error
}

// resultProblems reports result store configurations that cannot work,
// and warns about risky ones.
func (c *config) resultProblems(caps map[string]Capability) []error {
	var errs []error
	if c.results != nil && c.resultKeys == nil {
		errs = append(errs, errors.New("agentsafe: WithResultStore needs WithResultKey: stored responses are sealed"))
	}
	for _, proc := range slices.Sorted(maps.Keys(caps)) {
		cp := caps[proc]
		switch {
		case cp.Dedup > 0 && c.results == nil:
			errs = append(errs, &FieldError{proc, "engine", "Dedup", "needs a result store, and the engine has none: add WithResultStore (resultstore.NewMemory for one process, resultstore.NewRedis for many)"})
		case cp.Dedup > 0 && cp.Streaming:
			errs = append(errs, &FieldError{proc, "engine", "Dedup", "a stream cannot be replayed"})
		}
	}
	if len(errs) == 0 && c.results != nil {
		if l, ok := c.results.(interface{ ProcessLocal() bool }); ok && l.ProcessLocal() {
			c.logger.Warn("agentsafe: results are kept in this process only (the memory result store): other instances never replay them; use resultstore.NewRedis to share them")
		}
		if c.actor == nil {
			c.logger.Warn("agentsafe: a result store without WithActor: every caller's Idempotency-Key is in one scope, so two callers that pick the same key get each other's results, and all callers share one result quota (WithResultQuota)")
		}
	}
	return errs
}

func (c *config) resultRetention() time.Duration {
	if c.retention > 0 {
		return c.retention
	}
	return defaultResultRetention
}

// callerKey is part of stage 2a: it reads the caller's Idempotency-Key
// (or notes the capability's dedup window). An engine without a result
// store ignores both; a stream is never replayed. A key on a read (side
// effect none or read) is checked and then has no effect, as at Stripe:
// a read has nothing a repeat could run twice, so nothing is claimed or
// stored for it, and one caller's keyed reads never fill the store; the
// capability's dedup window, when it has one, still applies.
func (x *execution) callerKey() *Error {
	if x.e.cfg.results == nil || x.streaming {
		return nil
	}
	if x.call.IdempotencyKey != "" {
		k, err := parseCallerKey(x.call.IdempotencyKey)
		if err != nil {
			return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("malformed %s header: %s", headerIdempotencyKey, err), Cause: err}
		}
		if x.cap.SideEffect.WriteLike() {
			x.keyed = &keyed{callerKey: k, retention: x.e.cfg.resultRetention()}
			return nil
		}
	}
	if x.cap.Dedup > 0 {
		x.keyed = &keyed{retention: x.cap.Dedup}
	}
	return nil
}

// claimRetries are the waits before the engine claims again when the
// store failed rather than answered: at most three tries, as for Consume.
var claimRetries = consumeRetries

// claim is stage 2d: claim the key, or answer from the store. It returns
// nil when the execution holds the key (it runs) or has a stored result
// to replay (see replaying); nothing has run when it refuses. gated tells
// that the call needs an approval.
func (x *execution) claim(gated bool) *Error {
	k := x.keyed
	if k == nil {
		return nil
	}
	if x.digest == "" { // bind computed it for every input that binds
		return &Error{Code: CodeInvalidArgument, Message: "the call has an " + headerIdempotencyKey + " (or a dedup window), and no input to bind it to"}
	}
	if k.callerKey != "" {
		k.key = callerResultKey(x.e.cfg.audience, x.actor, x.proc(), k.callerKey)
	} else {
		k.key = dedupResultKey(x.e.cfg.audience, x.actor, x.proc(), x.digest)
	}
	k.owner = resultOwner(x.e.cfg.audience, x.actor)
	req := x.claimRequest(x.claimLease(gated))
	req.Reconcile = x.cap.Reconcile != nil
	if gated && req.Reconcile {
		// Reconciled only once the key its handler saw is known (see
		// handlerKeyOf): a key in doubt is left as it is until then.
		req.Reconcile = false
		c, err := x.claimOnce(req)
		if err != nil {
			return err
		}
		if c.Status != store.ClaimInDoubt {
			return x.claimed(c, gated)
		}
		if _, known := x.handlerKeyOf(c.ExecutionID, gated); !known {
			return x.claimed(c, gated)
		}
		req.Reconcile = true
	}
	c, err := x.claimOnce(req)
	if err != nil {
		return err
	}
	return x.claimed(c, gated)
}

// claimed answers the store's answer to claim.
func (x *execution) claimed(c store.Claim, gated bool) *Error {
	k := x.keyed
	switch c.Status {
	case store.ClaimAcquired:
		k.held, x.idempotencyKey = true, k.key
		return nil
	case store.ClaimReconcile:
		k.held, x.idempotencyKey = true, k.key
		return x.reconcile(c.ExecutionID, gated)
	case store.ClaimInFlight:
		return &Error{Code: CodeIdempotencyInFlight, Retryable: true, Message: fmt.Sprintf("execution %s with this %s is still running; call again later", c.ExecutionID, keyName(k))}
	case store.ClaimKeyReused:
		return &Error{Code: CodeIdempotencyKeyReused, Message: fmt.Sprintf("this %s was used with another input; send a new key for a new operation", keyName(k))}
	case store.ClaimInDoubt:
		msg := fmt.Sprintf("execution %s with this %s may have run and left no result; find out whether it did before calling again with a new key", c.ExecutionID, keyName(k))
		if gated && x.cap.Reconcile != nil {
			msg = fmt.Sprintf("execution %s with this %s may have run and left no result; to reconcile it, call again with the %s header of the approval it consumed", c.ExecutionID, keyName(k), seam.HeaderApprovalID)
		}
		return &Error{Code: CodeIdempotencyInDoubt, Message: msg}
	case store.ClaimQuotaExceeded:
		q := x.e.cfg.quota
		return &Error{Code: CodeIdempotencyQuotaExceeded, Message: fmt.Sprintf("the results this caller's keys keep are at their quota (%d results or %d bytes, until they expire); nothing ran", q.Records, q.Bytes)}
	case store.ClaimDone:
		r, err := x.replayOf(c.Result)
		if err != nil {
			return x.resultUnavailable(err)
		}
		k.replay = r
		return nil
	}
	return x.resultUnavailable(fmt.Errorf("the result store answered a claim with %s", c.Status))
}

// claimRequest is the claim of the execution's key, with lease.
func (x *execution) claimRequest(lease time.Duration) store.ClaimRequest {
	return store.ClaimRequest{ResultKey: x.keyed.ref(), Quota: x.e.cfg.quota, Digest: x.digest, ExecutionID: x.id, Lease: lease,
		WriteLike: x.cap.SideEffect.WriteLike(), Retention: x.keyed.retention}
}

// claimLease is how long a claim holds without a result: the longest the
// execution may run, plus a grace (as for a consumed approval), and, when
// the call needs an approval and its caller waits for the decision (an
// MCP bridge's answering round), that wait too: the claim is taken
// before the gate.
func (x *execution) claimLease(gated bool) time.Duration {
	if !gated {
		return x.cap.lease
	}
	return x.cap.lease + max(x.mark().Wait, 0)
}

func keyName(k *keyed) string {
	if k.callerKey == "" {
		return "input (within the dedup window)"
	}
	return headerIdempotencyKey
}

// claimOnce calls the store's Claim, claiming again for the same execution
// (a repeated claim answers as the first) when the store failed rather
// than answered, within the caller's deadline. If every try failed, a try
// whose reply was lost may hold the key: it is released in the
// background, a no-op unless this execution holds it.
func (x *execution) claimOnce(req store.ClaimRequest) (store.Claim, *Error) {
	results := x.e.cfg.results
	for try := 0; ; try++ {
		c, err := results.Claim(x.ctx, req)
		if err == nil {
			return c, nil
		}
		if x.ctx.Err() != nil || try == len(claimRetries) || !x.sleepWithin(claimRetries[try]) {
			x.e.releaseKey(x.ctx, req.ResultKey, x.id)
			if x.ctx.Err() != nil {
				return store.Claim{}, x.cancelled()
			}
			return store.Claim{}, x.resultUnavailable(err)
		}
	}
}

func (x *execution) resultUnavailable(err error) *Error {
	return &Error{Code: CodeIdempotencyUnavailable, Retryable: true, Message: "the result store is unavailable; nothing ran", Cause: err}
}

// releaseKey gives a key back when nothing ran on its claim, in the
// background, bounded; a failure leaves a write-like claim to read in
// doubt after its lease: visible, not silent.
func (e *Engine) releaseKey(ctx context.Context, key store.ResultKey, executionID string) {
	inBackground(ctx, func(ctx context.Context) error { return e.cfg.results.Release(ctx, key, executionID) })
}

// replaying returns the stored result the execution answers with, or nil.
func (x *execution) replaying() *replayed {
	if x.keyed == nil {
		return nil
	}
	return x.keyed.replay
}

// reconcile asks the capability's Reconcile hook about the execution in
// doubt that held the key (prev), now that this execution holds it: done
// stores and replays its result, not found runs again under the same key,
// an error leaves the key in doubt.
func (x *execution) reconcile(prev string, gated bool) *Error {
	k := x.keyed
	key, known := x.handlerKeyOf(prev, gated)
	if !known { // the approval changed hands since claim looked: rare, and in doubt still
		x.markInDoubt()
		k.held = false
		return &Error{Code: CodeIdempotencyInDoubt, Message: fmt.Sprintf("execution %s with this %s may have run and left no result; to reconcile it, call again with the %s header of the approval it consumed", prev, keyName(k), seam.HeaderApprovalID)}
	}
	found, err := x.callReconcile(key)
	if err != nil {
		x.markInDoubt()
		k.held = false
		return &Error{Code: CodeIdempotencyInDoubt, Message: fmt.Sprintf("execution %s with this %s may have run and left no result, and reconciling it failed", prev, keyName(k)), Cause: err}
	}
	if !found.Done {
		return x.holdAfresh() // it did not happen: run, under the same key
	}
	resp, err := x.reconciledResponse(found.Response)
	if err != nil {
		x.markInDoubt()
		k.held = false
		return &Error{Code: CodeIdempotencyInDoubt, Message: "reconciling the execution in doubt returned a response the engine cannot store", Cause: err}
	}
	if x.overLimit(resp) { // as for a response the handler returned: the envelope alone
		resp = nil
	}
	env := Envelope{ExecutionID: prev, Procedure: x.proc(), Status: StatusCompleted}
	res := x.sealResult(env, false, resp, nil)
	x.complete(res)
	k.held = false
	r, rerr := x.replayOf(res)
	if rerr != nil {
		return x.resultUnavailable(rerr)
	}
	k.replay = r
	return nil
}

// handlerKeyOf returns the idempotency key the handler of prev, the
// execution in doubt, saw: the key's own, unless prev consumed an
// approval, whose derived key its handler saw instead (one approval, one
// downstream key). That approval is known when this
// call carries it and its record names prev as its consumer. Otherwise, a
// call that needs an approval cannot tell which key prev's handler saw:
// Reconcile is not asked about a key the downstream may never have seen.
func (x *execution) handlerKeyOf(prev string, gated bool) (string, bool) {
	if id, approvals := x.call.ApprovalID, x.e.cfg.store; id != "" && approvals != nil && store.ValidApprovalID(id) {
		if rec, err := approvals.Get(x.ctx, id); err == nil && rec.ConsumedBy == prev && rec.Audience == x.e.cfg.audience {
			return ids.Derive(idempotencyKeyPrefix, id), true
		}
	}
	return x.keyed.key, !gated
}

// holdAfresh turns this execution's claim to reconcile into a claim of
// its own, before it runs: gives the key back and claims it again, so
// that if it ends in doubt, the key is in doubt about this execution (a
// reconciler's MarkInDoubt names the execution it reconciled). Another
// execution that claims the key in between runs instead; this one then
// answers as a repeat of it.
func (x *execution) holdAfresh() *Error {
	k := x.keyed
	if err := x.e.cfg.results.Release(x.ctx, k.ref(), x.id); err != nil {
		return x.resultUnavailable(err) // still held: finish gives it back
	}
	k.held = false
	c, err := x.claimOnce(x.claimRequest(x.claimLease(false)))
	if err != nil {
		return err
	}
	return x.claimed(c, false)
}

// callReconcile runs the hook about key; a panic is an error.
func (x *execution) callReconcile(key string) (r Reconciled, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = Reconciled{}, fmt.Errorf("agentsafe: Reconcile panicked: %v", p)
		}
	}()
	return x.cap.Reconcile(x.ctx, key)
}

// reconciledResponse turns a Reconcile hook's response into the stored
// form the call's adapter replays: a protobuf message's binary encoding, or
// a net/http response's status, headers and body.
func (x *execution) reconciledResponse(resp any) ([]byte, error) {
	switch r := resp.(type) {
	case nil:
		return nil, nil
	case *http.Response:
		if Surface(x.call.Surface) != SurfaceHTTP {
			return nil, fmt.Errorf("an *http.Response answers a net/http route, not a %s call", Surface(x.call.Surface))
		}
		var body []byte
		if r.Body != nil {
			var err error
			body, err = io.ReadAll(io.LimitReader(r.Body, maxStoredResponse+1))
			r.Body.Close()
			if err != nil {
				return nil, err
			}
		}
		return replay.EncodeHTTP(r.StatusCode, r.Header, body), nil
	case proto.Message:
		if Surface(x.call.Surface) == SurfaceHTTP {
			return nil, errors.New("a net/http route is answered with an *http.Response, not a protobuf message")
		}
		return proto.MarshalOptions{Deterministic: true}.Marshal(r)
	}
	return nil, fmt.Errorf("a %T is no response: want a proto.Message or an *http.Response", resp)
}

// settleKey is stage 6 for an execution with a key: a replay answers with
// the stored envelope; an execution that holds the key stores its result,
// gives the key back, or leaves it in doubt (see WithResultStore).
func (x *execution) settleKey(env Envelope, v any, err *Error) Envelope {
	k := x.keyed
	if k.replay != nil {
		return k.replay.env
	}
	if !k.held {
		return env
	}
	x.mu.Lock()
	x.final = true // from here on, a late attempt records itself
	last := x.last
	var late attemptResult
	var returned bool
	if last != nil {
		_, late, returned = last.returnedLate()
	}
	left := last != nil && (last.abandoned || returned) // or an Inline attempt that returned late
	keep := err == nil || storable(err)
	release := !keep && x.released(err)
	k.doubtful = !keep && !release && !(left && returned)
	x.mu.Unlock()
	switch {
	case keep:
		x.complete(x.sealResult(env, false, x.response(v), err))
	case release: // now, not in the background: a repeat right after must find the key free
		x.writeStore(func(ctx context.Context) error { return x.e.cfg.results.Release(ctx, k.ref(), x.id) })
	case left && returned: // the abandoned attempt is back: its result decides
		x.storeLate(last, late)
	default:
		x.markInDoubt()
	}
	return env
}

// storable reports whether a failure is the handler's own answer, which a
// repeat gets as it is: a framework's own error, or an error the handler
// declared, that the classifier does not retry.
func storable(err *Error) bool {
	if err.Retryable {
		return false
	}
	if err.own {
		return true
	}
	_, declared := errors.AsType[*Error](err.Cause)
	return declared && err.Code != CodeTimeout && err.Code != CodeCancelled
}

// released reports whether a failure gives the key back: nothing ran, or
// a read (or an idempotent capability) failed retryably (or a read at
// all: a read has no effect to be in doubt about).
func (x *execution) released(err *Error) bool {
	return x.hadNoEffect() || !x.cap.SideEffect.WriteLike() || (x.cap.Idempotent && err.Retryable)
}

// storeLate stores the result of the execution's last attempt, abandoned
// at its deadline, once it returned: a completed one or the handler's own
// answer replaces in doubt; anything else stays in doubt.
func (x *execution) storeLate(a *attempt, r attemptResult) {
	r.err, _ = withoutEffect(r.err)
	v, err := x.settle(a, r)
	if err != nil && !storable(err) {
		x.markInDoubt()
		return
	}
	env := Envelope{ExecutionID: x.id, Procedure: x.proc(), Status: StatusCompleted, Attempts: int(x.attempts), Duration: x.e.cfg.now().Sub(x.start), ApprovalID: x.approvalID()}
	if err != nil {
		env.Status, env.Error = err.Code.Status(), &EnvelopeError{Code: err.Code, Message: err.Message}
	}
	x.complete(x.sealResult(env, true, x.response(v), err))
}

// response is the finalized attempt's response as the adapter's codec
// stores it; nil when there is none, it does not encode, or it is over
// the size limit (then a repeat gets the envelope without a body).
func (x *execution) response(v any) []byte {
	if v == nil || x.call.Marshal == nil {
		return nil
	}
	b, err := x.call.Marshal(v)
	if err != nil || x.overLimit(b) {
		return nil
	}
	return b
}

// overLimit reports whether a stored response is over the size limit: a
// message's encoding, or a net/http response's body (its status and
// headers aside).
func (x *execution) overLimit(b []byte) bool {
	if Surface(x.call.Surface) == SurfaceHTTP {
		if _, _, body, err := replay.DecodeHTTP(b); err == nil {
			return len(body) > maxStoredResponse
		}
	}
	return len(b) > maxStoredResponse
}

// The stored form of a result: the envelope in the clear (the store's
// Envelope), and the response with the handler's own error, sealed.
type storedEnvelope struct {
	ExecutionID string        `json:"executionId"`
	Procedure   string        `json:"procedure,omitempty"`
	Status      string        `json:"status"`
	Code        Code          `json:"code,omitempty"`
	Message     string        `json:"message,omitempty"`
	Own         bool          `json:"own,omitempty"` // a framework's own error, rebuilt by the adapter
	Attempts    int           `json:"attempts,omitempty"`
	Duration    time.Duration `json:"duration,omitempty"`
	ApprovalID  string        `json:"approvalId,omitempty"`
}

// The flags of a sealed payload: what it holds.
const (
	payloadResponse = 1 << iota
	payloadError
)

// sealResult builds the stored result of env, with the response resp and
// the handler's own error err (nil for a success).
func (x *execution) sealResult(env Envelope, late bool, resp []byte, err *Error) store.Result {
	se := storedEnvelope{ExecutionID: env.ExecutionID, Procedure: env.Procedure, Status: env.Status.String(), Attempts: env.Attempts, Duration: env.Duration, ApprovalID: env.ApprovalID}
	code := CodeOK
	var errBytes []byte
	if err != nil {
		code, se.Code, se.Message = err.Code, err.Code, err.Message
		if err.own && x.call.MarshalError != nil {
			if b, merr := x.call.MarshalError(err.Cause); merr == nil {
				se.Own, errBytes = true, b
			}
		}
	}
	envJSON, _ := json.Marshal(se) // plain data: always marshals
	res := store.Result{ExecutionID: env.ExecutionID, Code: code.String(), Envelope: envJSON, Late: late}
	flags := byte(0)
	if resp != nil {
		flags |= payloadResponse
	}
	if se.Own {
		flags |= payloadError
	}
	if flags != 0 {
		plain := []byte{flags}
		plain = binary.AppendUvarint(plain, uint64(len(resp)))
		plain = append(append(plain, resp...), errBytes...)
		res.Sealed, res.KeyID = x.e.cfg.resultKeys.seal(plain, x.keyed.key, x.digest)
	}
	return res
}

// replayOf turns a stored result into the answer of a repeat: the stored
// envelope, Replayed; the response through the adapter's codec; the
// handler's own error, rebuilt.
func (x *execution) replayOf(res store.Result) (*replayed, error) {
	var se storedEnvelope
	if err := json.Unmarshal(res.Envelope, &se); err != nil {
		return nil, fmt.Errorf("the stored envelope does not decode: %w", err)
	}
	status, ok := parseStatus(se.Status)
	if !ok {
		return nil, fmt.Errorf("the stored envelope has status %q", se.Status)
	}
	r := &replayed{env: Envelope{ExecutionID: se.ExecutionID, Procedure: x.proc(), Status: status, Attempts: se.Attempts,
		Duration: se.Duration, ApprovalID: se.ApprovalID, Replayed: true}}
	var resp, errBytes []byte
	hasResp := false
	if res.Sealed != nil {
		plain, err := x.e.cfg.resultKeys.open(res.Sealed, res.KeyID, x.keyed.key, x.digest)
		if err != nil {
			return nil, err
		}
		if len(plain) == 0 {
			return nil, errors.New("the stored result is empty")
		}
		n, size := binary.Uvarint(plain[1:])
		if size <= 0 || n > uint64(len(plain)-1-size) {
			return nil, errors.New("the stored result is malformed")
		}
		body := plain[1+size:]
		hasResp = plain[0]&payloadResponse != 0
		resp, errBytes = body[:n], body[n:]
		if plain[0]&payloadError == 0 {
			errBytes = nil
		}
	}
	if x.call.Unmarshal != nil {
		if !hasResp {
			resp = nil // no body: the codec's empty response
		}
		v, err := x.call.Unmarshal(resp)
		if err != nil {
			return nil, fmt.Errorf("the stored response does not decode: %w", err)
		}
		r.v = v
	}
	if se.Code != CodeOK {
		r.err = &Error{Code: se.Code, Message: se.Message}
		r.env.Error = &EnvelopeError{Code: se.Code, Message: se.Message}
		if se.Own {
			if errBytes == nil || x.call.UnmarshalError == nil {
				return nil, errors.New("the stored error cannot be rebuilt by this adapter")
			}
			cause, err := x.call.UnmarshalError(errBytes)
			if err != nil {
				return nil, fmt.Errorf("the stored error does not decode: %w", err)
			}
			r.err.own, r.err.Cause = true, cause
		}
	}
	return r, nil
}

// complete stores res for the key this execution holds, trying again
// (Complete repeated is a no-op) when the store failed, bounded and
// outside the caller's context: the result is known now. A failure
// leaves a write-like key to read in doubt after its lease.
func (x *execution) complete(res store.Result) {
	x.writeStore(func(ctx context.Context) error {
		return x.e.cfg.results.Complete(ctx, x.keyed.ref(), x.id, res)
	})
}

// markInDoubt records that the execution may have had an effect and
// leaves no result.
func (x *execution) markInDoubt() {
	x.writeStore(func(ctx context.Context) error {
		return x.e.cfg.results.MarkInDoubt(ctx, x.keyed.ref(), x.id)
	})
}

// writeStore runs a store write of stage 6 (a key's, or a budget's
// release) outside the caller's context, bounded, tried again as a lost
// Consume is; a write the store answers with ErrNotHeld is not tried again.
func (x *execution) writeStore(write func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), storeTimeout)
	defer cancel()
	for try := 0; ; try++ {
		err := write(ctx)
		if err == nil || errors.Is(err, store.ErrNotHeld) || try == len(claimRetries) {
			return
		}
		t := time.NewTimer(claimRetries[try])
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// boundTo names what an input that cannot be bound was to be bound to.
func (x *execution) boundTo() string {
	if x.keyed != nil && !x.cap.Approval.Required && !x.e.cfg.condition {
		return "its " + keyName(x.keyed)
	}
	return "an approval"
}
