package middleware

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	agentsafev1 "github.com/agentsafe/agentsafe/proto/agentsafe/v1"
)

// The HTTP header names of the wire format, shared by every adapter.
const (
	// HeaderExecutionID carries the execution id on every governed response.
	HeaderExecutionID = "Agentsafe-Execution-Id"
	// HeaderAttempts carries how many attempts the execution ran.
	HeaderAttempts = "Agentsafe-Attempts"
	// HeaderApprovalID carries an approval id: on a response, the approval
	// an execution requested or consumed; on a request, the approval a
	// resumed call presents.
	HeaderApprovalID = "Agentsafe-Approval-Id"
	// HeaderIdempotencyKey carries an execution's idempotency key on
	// outgoing calls to downstream services.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// wireStatus is the one table from a code to each wire status: the
// canonical RPC code number shared by gRPC and Connect, and the HTTP status
// used by net/http (and by Twirp through its own code table).
var wireStatus = [numCodes]struct {
	rpc  uint32
	http int
}{
	CodeOK:                     {0, http.StatusOK},
	CodeTimeout:                {4, http.StatusGatewayTimeout},
	CodeCancelled:              {1, 499}, // client closed request
	CodeExecutionFailed:        {13, http.StatusInternalServerError},
	CodeResourceExhausted:      {8, http.StatusTooManyRequests},
	CodeUnauthenticated:        {16, http.StatusUnauthorized},
	CodeApprovalRequired:       {9, http.StatusPreconditionRequired},
	CodeApprovalPending:        {9, http.StatusConflict},
	CodeApprovalRejected:       {7, http.StatusForbidden},
	CodeApprovalExpired:        {7, http.StatusForbidden},
	CodeApprovalConsumed:       {7, http.StatusForbidden},
	CodeApprovalNotFound:       {7, http.StatusForbidden},
	CodeApprovalInputMismatch:  {7, http.StatusForbidden},
	CodeApprovalResumeMismatch: {7, http.StatusForbidden},
	CodeApprovalUnavailable:    {14, http.StatusServiceUnavailable},
	CodeCapabilityNotFound:     {5, http.StatusNotFound},
	CodeInvalidArgument:        {3, http.StatusBadRequest},
}

// RPCCode returns the canonical RPC status code (the numbering gRPC and
// Connect share) that c is written as: TIMEOUT is DeadlineExceeded (4),
// CANCELLED is Canceled (1), and so on. A concealed EXECUTION_FAILED is
// Internal (13).
func (c Code) RPCCode() uint32 {
	if c < numCodes {
		return wireStatus[c].rpc
	}
	return 2 // Unknown
}

// HTTPStatus returns the HTTP status c is written as by net/http: 504, 499,
// 428, 409, 403, 503, 401, 429, 404, 400, and 500 for EXECUTION_FAILED.
func (c Code) HTTPStatus() int {
	if c < numCodes {
		return wireStatus[c].http
	}
	return http.StatusInternalServerError
}

// SetHeaders writes the envelope's ids to h: the execution id, the attempt
// count and, when set, the approval id. Adapters call it on success and on
// error.
func (env Envelope) SetHeaders(h http.Header) {
	if env.ExecutionID == "" {
		return
	}
	h.Set(HeaderExecutionID, env.ExecutionID)
	h.Set(HeaderAttempts, strconv.Itoa(env.Attempts))
	if env.ApprovalID != "" {
		h.Set(HeaderApprovalID, env.ApprovalID)
	}
}

// EnvelopeFromHeaders reads what [Envelope.SetHeaders] wrote. It reports
// false when h carries no execution id. Status and error travel elsewhere
// (an error detail, error meta or a JSON body); each adapter's client helper
// completes the envelope.
func EnvelopeFromHeaders(h http.Header) (Envelope, bool) {
	id := h.Get(HeaderExecutionID)
	if id == "" {
		return Envelope{}, false
	}
	env := Envelope{ExecutionID: id, ApprovalID: h.Get(HeaderApprovalID), Status: StatusCompleted}
	env.Attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	return env, true
}

// envelopeJSON is the JSON form of an envelope (net/http bodies, MCP
// results): {"status","executionId","procedure","attempts","error":{"code",
// "message","retryable"},"approvalId"}.
type envelopeJSON struct {
	Status      string             `json:"status"`
	ExecutionID string             `json:"executionId"`
	Procedure   string             `json:"procedure,omitempty"`
	Attempts    int                `json:"attempts,omitempty"`
	Error       *envelopeErrorJSON `json:"error,omitempty"`
	ApprovalID  string             `json:"approvalId,omitempty"`
}

type envelopeErrorJSON struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// MarshalJSON encodes the envelope in its wire form. Duration is not part
// of it.
func (env Envelope) MarshalJSON() ([]byte, error) {
	out := envelopeJSON{Status: env.Status.String(), ExecutionID: env.ExecutionID, Procedure: env.Procedure, Attempts: env.Attempts, ApprovalID: env.ApprovalID}
	if e := env.Error; e != nil {
		out.Error = &envelopeErrorJSON{e.Code, e.Message, e.Retryable}
	}
	return json.Marshal(out)
}

// UnmarshalJSON decodes the wire form written by MarshalJSON.
func (env *Envelope) UnmarshalJSON(b []byte) error {
	var in envelopeJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	status, ok := ParseStatus(in.Status)
	if !ok {
		return fmt.Errorf("agentsafe: unknown envelope status %q", in.Status)
	}
	*env = Envelope{Status: status, ExecutionID: in.ExecutionID, Procedure: in.Procedure, Attempts: in.Attempts, ApprovalID: in.ApprovalID}
	if e := in.Error; e != nil {
		env.Error = &EnvelopeError{e.Code, e.Message, e.Retryable}
	}
	return nil
}

// ErrorDetail returns the agentsafe.v1.ErrorDetail that RPC adapters
// (Connect, gRPC) attach to the error of a failed envelope: code,
// retryable-for-caller, ids and attempts. It returns nil for a completed
// envelope.
func (env Envelope) ErrorDetail() *agentsafev1.ErrorDetail {
	if env.Error == nil {
		return nil
	}
	return &agentsafev1.ErrorDetail{Code: env.Error.Code.String(), Retryable: env.Error.Retryable, ExecutionId: env.ExecutionID,
		ApprovalId: env.ApprovalID, Procedure: env.Procedure, Attempts: int32(env.Attempts)}
}

// EnvelopeFromDetail rebuilds the envelope a client sees from the error
// detail of a failed call and the error's message. A code this client does
// not know (a newer server) reads as a non-retryable EXECUTION_FAILED: the
// failure is real, its kind unknown, and re-invoking is not known to be
// safe.
func EnvelopeFromDetail(d *agentsafev1.ErrorDetail, message string) Envelope {
	code, ok := ParseCode(d.GetCode())
	retryable := d.GetRetryable()
	if !ok || code == CodeOK {
		code, retryable = CodeExecutionFailed, false
	}
	return Envelope{
		ExecutionID: d.GetExecutionId(),
		Procedure:   d.GetProcedure(),
		Status:      StatusOf(code),
		Error:       &EnvelopeError{Code: code, Message: message, Retryable: retryable},
		Attempts:    int(d.GetAttempts()),
		ApprovalID:  d.GetApprovalId(),
	}
}

type keyLabelKey struct{}

// WithKeyLabel labels the downstream calls made with ctx, so that the
// Idempotency-Key they carry is the execution's sub-key for that label (see
// [Execution.SubKey]): two different downstream calls of one execution get
// two keys, each stable across retries.
func WithKeyLabel(ctx context.Context, label string) context.Context {
	return context.WithValue(ctx, keyLabelKey{}, label)
}

// OutgoingIdempotencyKey returns the key an outgoing call made with ctx
// should carry as Idempotency-Key: the execution's idempotency key, or its
// sub-key for the label set with [WithKeyLabel]. It reports false outside a
// governed execution. Client helpers of every adapter use it.
func OutgoingIdempotencyKey(ctx context.Context) (string, bool) {
	x, ok := ExecutionFromContext(ctx)
	if !ok {
		return "", false
	}
	label, _ := ctx.Value(keyLabelKey{}).(string)
	return x.SubKey(label), true
}

// KeyHosts lists the downstream hosts an execution's idempotency key may be
// sent to (SPEC §5: only to hosts the application lists). Every adapter's
// client helper uses it. The zero value lists none.
type KeyHosts struct{ hosts []string }

// NewKeyHosts lists hosts: each is a host name or IP address, which matches
// any port, or host:port, which matches that port only; case does not
// matter, and a bracketed IPv6 literal may be given with or without
// brackets.
func NewKeyHosts(hosts ...string) KeyHosts {
	var k KeyHosts
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			h = h[1 : len(h)-1]
		}
		if h != "" {
			k.hosts = append(k.hosts, h)
		}
	}
	return k
}

// Allows reports whether addr, a host or host:port, is listed.
func (k KeyHosts) Allows(addr string) bool {
	if addr == "" {
		return false
	}
	addr = strings.ToLower(addr)
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	return slices.Contains(k.hosts, addr) || slices.Contains(k.hosts, host)
}

// Key returns the Idempotency-Key an outgoing call made with ctx to addr
// should carry: [OutgoingIdempotencyKey] when addr is listed, else false.
func (k KeyHosts) Key(ctx context.Context, addr string) (string, bool) {
	if !k.Allows(addr) {
		return "", false
	}
	return OutgoingIdempotencyKey(ctx)
}
