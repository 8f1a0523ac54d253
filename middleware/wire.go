package middleware

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/agentsafe/agentsafe/internal/seam"
)

// envelopeJSON is the JSON form of an envelope (net/http bodies, MCP
// results): {"status","executionId","procedure","attempts","error":{"code",
// "message","retryable"},"approvalId","approvalUrl","expiresAt","replayed",
// "retryAfter" (seconds)}.
type envelopeJSON struct {
	Status      string             `json:"status"`
	ExecutionID string             `json:"executionId"`
	Procedure   string             `json:"procedure,omitempty"`
	Attempts    int                `json:"attempts,omitempty"`
	Error       *envelopeErrorJSON `json:"error,omitempty"`
	ApprovalID  string             `json:"approvalId,omitempty"`
	ApprovalURL string             `json:"approvalUrl,omitempty"`
	ExpiresAt   *time.Time         `json:"expiresAt,omitempty"`
	Replayed    bool               `json:"replayed,omitempty"`
	// RetryAfter is in whole seconds, rounded up, as Retry-After says it.
	RetryAfter int64 `json:"retryAfter,omitempty"`
}

type envelopeErrorJSON struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// MarshalJSON encodes the envelope in its wire form. Duration is not part
// of it.
func (env Envelope) MarshalJSON() ([]byte, error) {
	out := envelopeJSON{Status: env.Status.String(), ExecutionID: env.ExecutionID, Procedure: env.Procedure, Attempts: env.Attempts, ApprovalID: env.ApprovalID,
		ApprovalURL: env.ApprovalURL, Replayed: env.Replayed}
	if !env.ExpiresAt.IsZero() {
		at := env.ExpiresAt.UTC()
		out.ExpiresAt = &at
	}
	if e := env.Error; e != nil {
		out.Error = &envelopeErrorJSON{e.Code, e.Message, e.Retryable}
	}
	if env.RetryAfter > 0 {
		out.RetryAfter = int64((env.RetryAfter + time.Second - 1) / time.Second)
	}
	return json.Marshal(out)
}

// UnmarshalJSON decodes the wire form written by MarshalJSON.
func (env *Envelope) UnmarshalJSON(b []byte) error {
	var in envelopeJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	status, ok := parseStatus(in.Status)
	if !ok {
		return fmt.Errorf("agentsafe: unknown envelope status %q", in.Status)
	}
	*env = Envelope{Status: status, ExecutionID: in.ExecutionID, Procedure: in.Procedure, Attempts: in.Attempts, ApprovalID: in.ApprovalID,
		ApprovalURL: in.ApprovalURL, Replayed: in.Replayed}
	if in.ExpiresAt != nil {
		env.ExpiresAt = *in.ExpiresAt
	}
	if in.RetryAfter > 0 && in.RetryAfter <= int64(math.MaxInt64/time.Second) {
		env.RetryAfter = time.Duration(in.RetryAfter) * time.Second
	}
	if e := in.Error; e != nil {
		env.Error = &EnvelopeError{e.Code, e.Message, e.Retryable}
	}
	return nil
}

// WithKeyLabel labels the downstream calls made with ctx, so that the
// Idempotency-Key they carry is the execution's sub-key for that label (see
// [Execution.SubKey]): two different downstream calls of one execution get
// two keys, each stable across retries. The adapters' client helpers read
// it.
func WithKeyLabel(ctx context.Context, label string) context.Context {
	return context.WithValue(ctx, seam.KeyLabel{}, label)
}
