package adapter

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware"
	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
)

// The HTTP header names of the wire format, shared by every adapter (gRPC
// metadata keys are their lower-case forms).
const (
	// HeaderExecutionID carries the execution id on every governed response.
	HeaderExecutionID = "Agentsafe-Execution-Id"
	// HeaderAttempts carries how many attempts the execution ran.
	HeaderAttempts = "Agentsafe-Attempts"
	// HeaderApprovalID carries an approval id: on a response, the approval
	// an execution requested or consumed; on a request, the approval a
	// resumed call presents.
	HeaderApprovalID = seam.HeaderApprovalID
	// HeaderCode carries the agentsafe code of a failed execution, for
	// example "TIMEOUT".
	HeaderCode = "Agentsafe-Code"
	// HeaderRetryable carries "true" when re-invoking a failed call is safe
	// for the caller, "false" otherwise.
	HeaderRetryable = "Agentsafe-Retryable"
	// HeaderIdempotencyKey carries an idempotency key: a caller's, on an
	// incoming call (its repeats are replayed, not run again); an
	// execution's, on outgoing calls to downstream services.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayed is "true" on the stored result of an earlier
	// execution, replayed: nothing ran.
	HeaderReplayed = "Agentsafe-Replayed"
	// HeaderApprovalURL and HeaderApprovalExpires tell the caller of an
	// APPROVAL_REQUIRED or APPROVAL_PENDING call where a person decides the
	// approval and until when (RFC 3339).
	HeaderApprovalURL     = "Agentsafe-Approval-Url"
	HeaderApprovalExpires = "Agentsafe-Approval-Expires"
	// HeaderRetryAfter is HTTP's Retry-After (RFC 9110, in whole seconds,
	// rounded up) on a BUDGET_EXCEEDED that knows when enough of the
	// budget's window frees. It is not one of the envelope's own headers:
	// a handler's Retry-After on its own response passes untouched.
	HeaderRetryAfter = "Retry-After"
)

// envelopeHeaders are the response headers that belong to the envelope:
// the engine's alone, never a handler's.
var envelopeHeaders = [...]string{HeaderExecutionID, HeaderAttempts, HeaderApprovalID, HeaderCode, HeaderRetryable,
	HeaderReplayed, HeaderApprovalURL, HeaderApprovalExpires}

// SetHeaders writes the envelope to h, replacing any value there: the
// execution id, the attempt count and the approval id when set; on
// failure also the code and whether re-invoking is safe. A zero envelope
// (an ungoverned call) writes nothing. Adapters call it on success and on
// error, for response headers, or for trailers where the framework sends
// the outcome last.
func SetHeaders(h http.Header, env middleware.Envelope) {
	if env.ExecutionID == "" {
		return
	}
	DelHeaders(h)
	setEnvelope(h, env, false)
}

// SetMetadata writes the envelope to md, a gRPC-style metadata map, under
// the header names in lower case; md holds none of them yet. A zero
// envelope writes nothing.
func SetMetadata(md map[string][]string, env middleware.Envelope) {
	if env.ExecutionID != "" {
		setEnvelope(md, env, true)
	}
}

// The envelope's header names in lower case, as gRPC metadata keys.
var lowerHeaders = func() (m map[string]string) {
	m = make(map[string]string, len(envelopeHeaders))
	for _, h := range envelopeHeaders {
		m[h] = strings.ToLower(h)
	}
	return m
}()

// setEnvelope assigns the envelope's headers to h by their canonical
// names, or lower-case ones, with their values in one backing array: one
// allocation for them all, where a Set per header makes one each.
func setEnvelope(h map[string][]string, env middleware.Envelope, lower bool) {
	var buf [len(envelopeHeaders) + 1][2]string
	kv := buf[:0]
	kv = append(kv, [2]string{HeaderExecutionID, env.ExecutionID}, [2]string{HeaderAttempts, strconv.Itoa(env.Attempts)})
	if env.ApprovalID != "" {
		kv = append(kv, [2]string{HeaderApprovalID, env.ApprovalID})
	}
	if env.ApprovalURL != "" {
		kv = append(kv, [2]string{HeaderApprovalURL, env.ApprovalURL})
	}
	if !env.ExpiresAt.IsZero() {
		kv = append(kv, [2]string{HeaderApprovalExpires, env.ExpiresAt.UTC().Format(time.RFC3339)})
	}
	if env.Replayed {
		kv = append(kv, [2]string{HeaderReplayed, "true"})
	}
	if e := env.Error; e != nil {
		kv = append(kv, [2]string{HeaderCode, e.Code.String()}, [2]string{HeaderRetryable, strconv.FormatBool(e.Retryable)})
	}
	if env.RetryAfter > 0 {
		kv = append(kv, [2]string{HeaderRetryAfter, strconv.FormatInt(RetryAfterSeconds(env.RetryAfter), 10)})
	}
	values := make([]string, len(kv))
	for i, p := range kv {
		name := p[0]
		if lower {
			name = lowerHeaders[name]
			if name == "" {
				name = "retry-after"
			}
		}
		values[i] = p[1]
		h[name] = values[i : i+1 : i+1] // a handler's append copies, never overwrites the next
	}
}

// DelHeaders removes the envelope's headers from h, in any spelling of
// their names: a handler's copies (of a downstream response, say) belong to
// another execution, and must never shadow this one's.
func DelHeaders(h http.Header) {
	const prefix = "agentsafe-"
	// One pass over h, which usually holds a few keys, rather than a
	// delete per envelope header: every one of them has the prefix, and
	// the pass also finds a key set by assigning to the map directly, not
	// in canonical form (clients canonicalize what they receive).
	for k := range h {
		if len(k) > len(prefix) && strings.EqualFold(k[:len(prefix)], prefix) && IsEnvelopeHeader(k) {
			delete(h, k)
		}
	}
}

// IsEnvelopeHeader reports whether name (in any case) is one of the
// envelope's headers.
func IsEnvelopeHeader(name string) bool {
	for _, h := range envelopeHeaders {
		// The names are ASCII: of equal length, only ASCII folds to them
		// (strings.EqualFold alone would take "ſ" for "s").
		if len(h) == len(name) && strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}

// ReadHeaders reads back what [SetHeaders] wrote. It reports false when h
// carries no execution id. The message of a failure travels elsewhere (the
// framework's error); client helpers complete it.
func ReadHeaders(h http.Header) (middleware.Envelope, bool) {
	id := h.Get(HeaderExecutionID)
	if id == "" {
		return middleware.Envelope{}, false
	}
	env := middleware.Envelope{ExecutionID: id, ApprovalID: h.Get(HeaderApprovalID), Status: middleware.StatusCompleted,
		ApprovalURL: h.Get(HeaderApprovalURL), Replayed: h.Get(HeaderReplayed) == "true"}
	env.Attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	env.ExpiresAt, _ = time.Parse(time.RFC3339, h.Get(HeaderApprovalExpires))
	if c := h.Get(HeaderCode); c != "" {
		env.RetryAfter = ParseRetryAfter(h.Get(HeaderRetryAfter))
		code, retryable := parseCode(c), h.Get(HeaderRetryable) == "true"
		if code == middleware.CodeExecutionFailed && c != middleware.CodeExecutionFailed.String() {
			retryable = false // a code this client does not know: not known to be safe
		}
		env.Status = code.Status()
		env.Error = &middleware.EnvelopeError{Code: code, Retryable: retryable}
	}
	return env, true
}

// RetryAfterSeconds is d as Retry-After writes it: whole seconds, rounded
// up, so a client that waits that long finds the window freed.
func RetryAfterSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// ParseRetryAfter reads what [RetryAfterSeconds] writes, a Retry-After of
// delay-seconds (or an adapter's field carrying them, such as Twirp's
// error metadata); an HTTP date or anything else reads as unknown, 0.
func ParseRetryAfter(v string) time.Duration {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > int64(math.MaxInt64/time.Second) {
		return 0
	}
	return time.Duration(n) * time.Second
}

// parseCode reads a code's wire name; a name this client does not know (a
// newer server), and OK on a failure, read as EXECUTION_FAILED.
func parseCode(s string) middleware.Code {
	var c middleware.Code
	if c.UnmarshalText([]byte(s)) != nil || c == middleware.CodeOK {
		return middleware.CodeExecutionFailed
	}
	return c
}

// wire is the one table from a code to each wire status: the canonical RPC
// code shared by gRPC and Connect (Twirp maps it through its own table),
// and the HTTP status net/http answers with.
func wire(c middleware.Code) (rpc uint32, status int) {
	switch c {
	case middleware.CodeOK:
		return 0, http.StatusOK
	case middleware.CodeTimeout:
		return 4, http.StatusGatewayTimeout
	case middleware.CodeCancelled:
		return 1, 499 // client closed request
	case middleware.CodeExecutionFailed:
		return 13, http.StatusInternalServerError
	case middleware.CodeResourceExhausted, middleware.CodeIdempotencyQuotaExceeded:
		return 8, http.StatusTooManyRequests
	case middleware.CodeUnauthenticated:
		return 16, http.StatusUnauthorized
	case middleware.CodeApprovalRequired:
		return 9, http.StatusPreconditionRequired
	case middleware.CodeApprovalPending:
		return 9, http.StatusConflict
	case middleware.CodeApprovalRejected, middleware.CodeApprovalExpired, middleware.CodeApprovalConsumed,
		middleware.CodeApprovalNotFound, middleware.CodeApprovalInputMismatch, middleware.CodeApprovalResumeMismatch:
		return 7, http.StatusForbidden
	case middleware.CodeApprovalUnavailable, middleware.CodeAuditUnavailable,
		middleware.CodeIdempotencyUnavailable, middleware.CodePolicyUnavailable:
		return 14, http.StatusServiceUnavailable
	case middleware.CodeCapabilityNotFound:
		return 5, http.StatusNotFound
	case middleware.CodeInvalidArgument:
		return 3, http.StatusBadRequest
	case middleware.CodeIdempotencyInFlight:
		return 10, http.StatusConflict
	case middleware.CodeIdempotencyKeyReused:
		return 9, http.StatusUnprocessableEntity
	case middleware.CodeIdempotencyInDoubt:
		return 9, http.StatusConflict
	case middleware.CodePolicyDenied:
		return 7, http.StatusForbidden
	case middleware.CodeBudgetExceeded:
		return 8, http.StatusTooManyRequests
	case middleware.CodeBudgetUnavailable:
		return 14, http.StatusServiceUnavailable
	case middleware.CodeApprovalStale:
		return 9, http.StatusConflict
	case middleware.CodePreviewUnavailable:
		return 14, http.StatusServiceUnavailable
	}
	return 2, http.StatusInternalServerError // Unknown: a code this table does not know
}

// RPCCode returns the canonical RPC status code (the numbering gRPC and
// Connect share) an execution's outcome is written as, from the error
// [Execute] returned (nil for success): TIMEOUT is DeadlineExceeded (4),
// CANCELLED is Canceled (1) — or DeadlineExceeded when the caller's own
// deadline passed, as every gRPC server reports it — and so on.
func RPCCode(err error) uint32 {
	if callerDeadline(err) {
		return 4
	}
	rpc, _ := wire(middleware.CodeOf(err))
	return rpc
}

// HTTPStatus returns the HTTP status an execution's outcome is written as
// by net/http: 504, 499 (504 when the caller's own deadline passed), 428,
// 409, 403, 503, 401, 429, 404, 400, 422, and 500 for EXECUTION_FAILED.
func HTTPStatus(err error) int {
	if callerDeadline(err) {
		return http.StatusGatewayTimeout
	}
	_, status := wire(middleware.CodeOf(err))
	return status
}

// CodeRPC returns the canonical RPC status code of c alone, for client
// helpers that rebuild an outcome from the wire.
func CodeRPC(c middleware.Code) uint32 {
	rpc, _ := wire(c)
	return rpc
}

// callerDeadline reports a CANCELLED caused by the caller's own deadline.
func callerDeadline(err error) bool {
	return middleware.CodeOf(err) == middleware.CodeCancelled && errors.Is(err, context.DeadlineExceeded)
}

// ErrorDetail returns the agentsafe.v1.ErrorDetail that RPC adapters
// (Connect, gRPC) attach to an error agentsafe itself decided: code,
// retryable-for-caller, ids and attempts. It returns nil for a completed
// envelope. A handler's or the framework's own error never gains one (see
// [HandlerError]).
func ErrorDetail(env middleware.Envelope) *agentsafev1.ErrorDetail {
	if env.Error == nil {
		return nil
	}
	d := &agentsafev1.ErrorDetail{Code: env.Error.Code.String(), Retryable: env.Error.Retryable, ExecutionId: env.ExecutionID,
		ApprovalId: env.ApprovalID, Procedure: env.Procedure, Attempts: int32(env.Attempts), ApprovalUrl: env.ApprovalURL}
	if !env.ExpiresAt.IsZero() {
		d.ExpiresAt = env.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if env.RetryAfter > 0 {
		d.RetryAfter = durationpb.New(env.RetryAfter)
	}
	return d
}

// RetryInfo returns the google.rpc.RetryInfo that RPC adapters (Connect,
// gRPC) attach, beside [ErrorDetail], to an error that knows when to try
// again (BUDGET_EXCEEDED with Envelope.RetryAfter); nil otherwise.
func RetryInfo(env middleware.Envelope) *errdetails.RetryInfo {
	if env.Error == nil || env.RetryAfter <= 0 {
		return nil
	}
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(env.RetryAfter)}
}

// EnvelopeFromDetail rebuilds the envelope a client sees from the error
// detail of a failed call and the error's message. A code this client does
// not know (a newer server) reads as a non-retryable EXECUTION_FAILED: the
// failure is real, its kind unknown, and re-invoking is not known to be
// safe.
func EnvelopeFromDetail(d *agentsafev1.ErrorDetail, message string) middleware.Envelope {
	code, retryable := parseCode(d.GetCode()), d.GetRetryable()
	if code == middleware.CodeExecutionFailed && d.GetCode() != middleware.CodeExecutionFailed.String() {
		retryable = false
	}
	expires, _ := time.Parse(time.RFC3339, d.GetExpiresAt())
	return middleware.Envelope{
		ExecutionID: d.GetExecutionId(),
		Procedure:   d.GetProcedure(),
		Status:      code.Status(),
		Error:       &middleware.EnvelopeError{Code: code, Message: message, Retryable: retryable},
		Attempts:    int(d.GetAttempts()),
		ApprovalID:  d.GetApprovalId(),
		ApprovalURL: d.GetApprovalUrl(),
		ExpiresAt:   expires,
		RetryAfter:  d.GetRetryAfter().AsDuration(),
	}
}
