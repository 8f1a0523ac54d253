package middleware

import "time"

// WithApprovalURL sets where a person decides an approval: url returns the
// address of the approval with the given id, typically a deep link into an
// approval console (approvalconsole serves one approval at
// /approvals/{id}; approvalconsole.Link builds the function). Envelopes of
// APPROVAL_REQUIRED and APPROVAL_PENDING then carry it as ApprovalURL, next
// to the approval's expiry (ExpiresAt, which they carry in any case), and
// every adapter writes both: the headers Agentsafe-Approval-Url and
// Agentsafe-Approval-Expires, the error detail (Connect, gRPC), the error
// meta (Twirp), the JSON envelope (net/http) and the tool result (MCP).
//
// The address is for the people who decide, not a secret: the console
// behind it checks who asks, as for its list. By default envelopes carry no
// URL; nil keeps the default. A url that panics or returns "" leaves the
// envelope without one.
func WithApprovalURL(url func(id string) string) Option {
	return optionFunc(func(c *config) {
		if url != nil {
			c.approvalURL = url
		}
	})
}

// approvalHints is what an envelope that asks the caller for a decision
// tells them beyond the approval id.
type approvalHints struct {
	// expires is the approval's expiry, when the execution learned it
	// (from the record it requested, or read while it was pending).
	expires time.Time
}

// hint fills ApprovalURL and ExpiresAt of an APPROVAL_REQUIRED or
// APPROVAL_PENDING envelope; every other envelope is left as it is.
func (x *execution) hint(env *Envelope) {
	if env.Error == nil || env.ApprovalID == "" {
		return
	}
	if c := env.Error.Code; c != CodeApprovalRequired && c != CodeApprovalPending {
		return
	}
	env.ExpiresAt = x.more.hints.expires
	env.ApprovalURL = x.e.approvalURL(env.ApprovalID)
}

// approvalURL returns the application's address of approval id, or "".
func (e *Engine) approvalURL(id string) (url string) {
	f := e.cfg.approvalURL
	if f == nil {
		return ""
	}
	defer func() {
		if recover() != nil {
			url = "" // the application's function failed: no hint, the call's outcome stands
		}
	}()
	return f(id)
}
