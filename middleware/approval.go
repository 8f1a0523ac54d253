package middleware

import (
	"errors"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// Actor is who a call is for. It comes only from verified credentials,
// through the function given with [WithActor], never from a request body:
// ID, Tenant, Kind and the OnBehalfOf delegation chain, nearest first,
// whose members may not approve the actor's requests. Wherever an approval
// is bound to the actor, the whole actor is compared. It is the store
// SPI's type (see package middleware/store), so stores and applications
// share it without conversions.
type Actor = store.Actor

// approvalCodes is the one place sentinel errors become codes.
var approvalCodes = []struct {
	err  error
	code Code
}{
	{store.ErrApprovalNotFound, CodeApprovalNotFound},
	{store.ErrApprovalPending, CodeApprovalPending},
	{store.ErrApprovalRejected, CodeApprovalRejected},
	{store.ErrApprovalExpired, CodeApprovalExpired},
	{store.ErrApprovalConsumed, CodeApprovalConsumed},
	{store.ErrApprovalInputMismatch, CodeApprovalInputMismatch},
	{store.ErrApprovalResumeMismatch, CodeApprovalResumeMismatch},
	{store.ErrApprovalStale, CodeApprovalStale},
	{store.ErrTooManyPending, CodeResourceExhausted},
}

// approvalCode returns the code an approval-store error stands for:
// CodeApprovalUnavailable for anything that is not one of the sentinels.
func approvalCode(err error) Code {
	for _, m := range approvalCodes {
		if errors.Is(err, m.err) {
			return m.code
		}
	}
	return CodeApprovalUnavailable
}
