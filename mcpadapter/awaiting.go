package mcpadapter

import (
	"fmt"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

// metaAwaiting is the _meta key of a result whose call waits for a
// human's decision: {"approvalId", "approvalUrl", "expiresAt"}.
const metaAwaiting = "agentsafe/awaitingApproval"

// awaitingApproval is the value under metaAwaiting.
type awaitingApproval struct {
	ApprovalID  string     `json:"approvalId"`
	ApprovalURL string     `json:"approvalUrl,omitempty"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
}

// awaiting returns what a result of env says about the approval it waits
// for: only for APPROVAL_REQUIRED and APPROVAL_PENDING.
func awaiting(env middleware.Envelope) (awaitingApproval, bool) {
	if env.Error == nil || env.ApprovalID == "" {
		return awaitingApproval{}, false
	}
	if c := env.Error.Code; c != middleware.CodeApprovalRequired && c != middleware.CodeApprovalPending {
		return awaitingApproval{}, false
	}
	a := awaitingApproval{ApprovalID: env.ApprovalID, ApprovalURL: env.ApprovalURL}
	if !env.ExpiresAt.IsZero() {
		at := env.ExpiresAt.UTC()
		a.ExpiresAt = &at
	}
	return a, true
}

// decideAt is the sentence of a result's text that says where and until
// when a person decides the approval, or "" when the envelope does not say.
func decideAt(env middleware.Envelope) string {
	switch {
	case env.ApprovalURL != "" && !env.ExpiresAt.IsZero():
		return fmt.Sprintf(" A person decides it at %s before %s: give the user that link.", env.ApprovalURL, env.ExpiresAt.UTC().Format(time.RFC3339))
	case env.ApprovalURL != "":
		return fmt.Sprintf(" A person decides it at %s: give the user that link.", env.ApprovalURL)
	case !env.ExpiresAt.IsZero():
		return fmt.Sprintf(" It expires at %s.", env.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return ""
}
