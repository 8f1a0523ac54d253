package adapter

import (
	"context"

	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware"
)

// The surfaces a call comes in on (see [middleware.Surface]).
const (
	SurfaceRPC  = middleware.SurfaceRPC
	SurfaceHTTP = middleware.SurfaceHTTP
	SurfaceMCP  = middleware.SurfaceMCP
)

// Call is one incoming call, as an adapter hands it to the engine: what
// the engine needs from the framework's request. T is the value each
// attempt returns (the adapter's sink for that attempt's response).
type Call[T any] struct {
	// Input is the call's input in bindable form (see [JSONInput],
	// [ProtoInput], [HTTPInput]), for the input digest of approvals and
	// events. Nil means there is nothing to bind.
	Input Input
	// ApprovalID is the raw value of the Agentsafe-Approval-Id request
	// header, or empty.
	ApprovalID string
	// Surface is where the call came in: Connect, gRPC, gRPC-Web and Twirp
	// are SurfaceRPC, nethttpadapter SurfaceHTTP; the MCP bridge marks its
	// in-process calls SurfaceMCP through its transport's request context.
	Surface middleware.Surface
	// IdempotencyKey is the raw value of the call's Idempotency-Key (HTTP
	// header, Connect or gRPC metadata, Twirp header; the _idempotency_key
	// argument over MCP), or empty. The engine parses it.
	IdempotencyKey string
	// Codec turns the value an attempt returned into bytes the engine can
	// store, and stored bytes back into a value the adapter writes as a
	// replayed response (results of calls with a caller key, or within a
	// dedup window). Nil: results are never stored with a response; a
	// replay then carries the envelope without a body.
	Codec Codec[T]
	// Status is the adapter's one function from its framework's errors to
	// codes: for an error of the framework (one a handler returned, or
	// the framework raised), its canonical RPC code (the numbering gRPC and
	// Connect share: 1 Canceled, 4 DeadlineExceeded, 14 Unavailable, ...)
	// and the message the framework shows the caller; ok is false for
	// every other error. The engine applies every rule that depends on it
	// (see [Execute]). Nil: the framework has no errors of its own.
	Status func(err error) (code uint32, message string, ok bool)
}

// Execute governs one call through route r: it opens an execution, runs
// attempts of attempt under the capability's timeout and retry rules, and
// finalizes exactly once. Each attempt runs on its own goroutine and
// returns its own value, its sink for the response, together with its
// error. Execute returns the value of the finalized attempt (also when it
// failed, so that the adapter writes that attempt's own response; the zero
// T when no attempt returned in time or none ran), the envelope, and on
// failure an *[middleware.Error] whose Cause is what the attempt returned.
//
// The engine, not the adapter, owns the rules about the attempt's result:
//   - a framework cancel or deadline status (c.Status) after the attempt's
//     context ended is the context's outcome: TIMEOUT for the attempt's own
//     timer, CANCELLED for the caller leaving;
//   - a framework's Unavailable is transient (retried where the
//     capability allows);
//   - a framework's own error passes to the wire unchanged (see
//     [HandlerError]); a plain error is concealed;
//   - [ErrNoResponse] is an implicit success, or the context's outcome.
//
// Each attempt must use its own copy of the input when [Route.MayRetry]
// (the first attempt may use the original; later ones a copy of a
// snapshot taken before the first) and its own sink for response headers:
// an abandoned attempt may still run while the next starts.
//
// A route the engine does not govern passes through: attempt runs once on
// ctx and the envelope is the zero value.
func Execute[T any](ctx context.Context, r Route, c Call[T], attempt func(ctx context.Context) (T, error)) (T, middleware.Envelope, error) {
	if attempt == nil {
		var zero T
		return zero, middleware.Envelope{}, &middleware.Error{Code: middleware.CodeInvalidArgument, Message: "agentsafe/adapter: Execute needs an attempt function"}
	}
	if r.r == nil { // the zero Route: nothing governs it
		t, err := attempt(ctx)
		return t, middleware.Envelope{}, err
	}
	call := c.seam()
	if c.Codec != nil && r.r.StoresResults() { // three closures, made only when they may be used
		withCodec(&call, c.Codec)
	}
	ctx, probe := marked(ctx, r.r, &call)
	if probe {
		var zero T
		return zero, middleware.Envelope{}, errProbed
	}
	call.Attempt = attemptFunc[T](attempt)
	v, env, err := r.r.Execute(ctx, call)
	t, _ := v.(T) // only attempt's values go in
	return t, env, err
}

// attemptFunc is an attempt function of [Execute] as the engine, which
// knows no T, runs it: a func type rather than a closure over the
// function, so that erasing T allocates nothing.
type attemptFunc[T any] func(context.Context) (T, error)

func (f attemptFunc[T]) RunAttempt(ctx context.Context) (any, error) { return f(ctx) }

// ExecuteStream governs a streaming call through route r. A stream cannot
// be abandoned or replayed, so fn runs once, synchronously, on the
// caller's goroutine: never retried, no approval, no digest; a timeout
// only if the capability sets one, and then it only cancels the context.
// The execution's ids are available to fn through
// [middleware.ExecutionFromContext] before the first message, and the
// execution still ends in exactly one envelope and final event.
func ExecuteStream(ctx context.Context, r Route, c Call[struct{}], fn func(ctx context.Context) error) (middleware.Envelope, error) {
	if fn == nil {
		return middleware.Envelope{}, &middleware.Error{Code: middleware.CodeInvalidArgument, Message: "agentsafe/adapter: ExecuteStream needs a stream function"}
	}
	if r.r == nil {
		return middleware.Envelope{}, fn(ctx)
	}
	call := c.seam()
	ctx, probe := marked(ctx, r.r, &call)
	if probe {
		return middleware.Envelope{}, errProbed
	}
	return r.r.ExecuteStream(ctx, call, fn)
}

// Refuse records a governed call that the adapter cannot even hand to the
// engine — its input could not be read (a body over the adapter's limit),
// or its path is not one the route serves — as an execution finalized at
// once with err: the caller still gets an execution id, and the audit
// trail shows the refusal. Nothing runs. A call on a surface its
// capability is not exposed on, or that a policy hides from its caller
// (asked without input), is answered as hidden instead ([Hidden]). A
// route the engine does not govern gets a zero envelope and err back.
func Refuse(ctx context.Context, r Route, c Call[struct{}], err *middleware.Error) (middleware.Envelope, error) {
	if r.r == nil {
		if err == nil {
			return middleware.Envelope{}, nil
		}
		return middleware.Envelope{}, err
	}
	call := c.seam()
	ctx, probe := marked(ctx, r.r, &call)
	if probe {
		return middleware.Envelope{}, errProbed
	}
	return r.r.Refuse(ctx, call, err)
}

// Codec converts an attempt's value T to and from bytes, for stored-result
// replay: Marshal sees the finalized attempt's value (its response), and
// Unmarshal must return a value the adapter writes exactly as it writes a
// fresh one. For protobuf responses, the message's binary encoding (the
// repeat is re-encoded with its own codec); for net/http, the status,
// headers (less hop-by-hop ones and Date) and body.
//
// Marshal returns nil for a value without a response (a failed attempt of
// an RPC). Unmarshal(nil) is asked for a replay without a body (a stored
// response over the size limit, a reconciled result without one): the
// value of an empty response (the empty message; net/http: 200, no body).
// A codec that also implements [ErrorCodec] lets a handler's own
// framework error be stored and replayed too.
type Codec[T any] interface {
	Marshal(T) ([]byte, error)
	Unmarshal([]byte) (T, error)
}

// ErrorCodec is implemented by a [Codec] that stores the framework's own
// errors (those [Call].Status recognizes): a handler's own answer that the
// classifier does not retry is stored with MarshalError, and a repeat
// fails with what UnmarshalError rebuilt, which the adapter writes as it
// writes a fresh one ([HandlerError]). Without it such an answer is not
// stored: a read's key is given back, a write's left in doubt.
type ErrorCodec interface {
	MarshalError(err error) ([]byte, error)
	UnmarshalError(b []byte) (rebuilt error, err error)
}

// seam is the call as the engine takes it, without its codec (see
// withCodec).
func (c Call[T]) seam() seam.Call {
	call := seam.Call{ApprovalID: c.ApprovalID, Surface: uint8(c.Surface), Status: c.Status, IdempotencyKey: c.IdempotencyKey}
	if c.Input != nil {
		call.Input = c.Input
	}
	return call
}

// withCodec sets call's codec functions from codec, erasing T.
func withCodec[T any](call *seam.Call, codec Codec[T]) {
	call.Marshal = func(v any) ([]byte, error) { t, _ := v.(T); return codec.Marshal(t) }
	call.Unmarshal = func(b []byte) (any, error) { return codec.Unmarshal(b) }
	if ec, ok := codec.(ErrorCodec); ok {
		call.MarshalError, call.UnmarshalError = ec.MarshalError, ec.UnmarshalError
	}
}

// HandlerError returns the error the handler (or its framework) returned
// when the execution failed with the framework's own error, as recognized
// by [Call.Status]: the adapter writes it to the wire unchanged — code,
// message, details and metadata — adding only the envelope's headers
// ([SetHeaders]). It reports false for every outcome the engine decided
// (timeout, cancellation, approvals, concealment, a panic), which the
// adapter writes from the envelope.
func HandlerError(err error) (error, bool) {
	if err == nil {
		return nil, false
	}
	return seam.HandlerError(err)
}

// ErrNoResponse is what an attempt returns when its handler returned
// without a response, which its framework answers with an implicit success
// (net/http's 200): after the attempt's context ended it is the context's
// outcome (the handler gave up when told to); otherwise, and for an
// attempt the engine abandoned, it is a success, and the attempt's value
// is its response.
var ErrNoResponse = seam.ErrNoResponse

// ConcealedMessage is the message of every failure whose error the handler
// did not declare on purpose (a plain Go error, a panic): internals never
// reach the caller; the real error goes to events only.
const ConcealedMessage = seam.ConcealedMessage

// CarriesDetail reports whether the failure err (from [Execute]) is
// written with agentsafe's own detail — the agentsafe.v1.ErrorDetail
// (Connect, gRPC), agentsafe_ meta (Twirp), the JSON envelope as the body
// (net/http): every outcome the engine decided (timeout, approvals,
// concealment, a panic, a refusal), but neither a framework's own error
// ([HandlerError]), which passes unchanged, nor CANCELLED, the caller
// having left, which is written as the framework writes a caller that left
// ([RPCCode]: Canceled, or DeadlineExceeded for its own deadline) — no
// client is waiting to read a detail then, and clients that compare
// details see exactly what the framework sends. The envelope's headers
// ([SetHeaders]) are written in every case.
func CarriesDetail(err error) bool {
	if err == nil || middleware.CodeOf(err) == middleware.CodeCancelled {
		return false
	}
	_, own := HandlerError(err)
	return !own
}
