package middleware

import "context"

// NoEffect marks a handler's error as a failure that had no effect: the
// handler refused and nothing happened (a declined payment; a conditional
// write that found the state changed since the approval, see
// [Execution].ApprovedState). When every attempt of an execution returned
// NoEffect, the approval it consumed goes back to approved, as if it had
// never been consumed (the next resume is judged afresh: refused
// APPROVAL_STALE while the state differs), and its budget reservations are
// released: it spent nothing (see [Budget]). The error otherwise reaches the
// caller as err would. It returns nil for nil, and keeps err reachable
// through errors.Is and errors.As.
func NoEffect(err error) error {
	if err == nil {
		return nil
	}
	return noEffect{err}
}

type noEffect struct{ err error }

func (n noEffect) Error() string { return n.err.Error() }
func (n noEffect) Unwrap() error { return n.err }

// withoutEffect strips NoEffect's mark from err, reporting whether it was
// there: the rest of the engine sees the handler's own error.
func withoutEffect(err error) (error, bool) {
	if n, ok := err.(noEffect); ok {
		return n.err, true
	}
	return err, false
}

// took takes the result of an attempt that returned in time, noting
// whether the handler declared it had no effect (NoEffect), whose mark the
// rest of the engine never sees.
func (x *execution) took(a *attempt) attemptResult {
	r := a.result()
	var none bool
	if r.err, none = withoutEffect(r.err); none {
		x.noEffects++
	}
	return r
}

// hadNoEffect reports that nothing this execution ran had an effect: no
// attempt started, or every one returned NoEffect in time (an attempt
// abandoned at its deadline may have had one).
func (x *execution) hadNoEffect() bool {
	return x.attempts == 0 || x.noEffects == x.attempts
}

// settleNoEffect is part of stage 6: an execution whose every attempt
// returned NoEffect gives back the approval it consumed, which goes back
// to approved, now rather than in the background (a resume right after
// must find it approved). A failed release leaves the record consumed,
// in_doubt after its lease: visible, and never run twice.
func (x *execution) settleNoEffect() {
	if !x.consumed || x.attempts == 0 || !x.hadNoEffect() {
		return
	}
	x.consumed = false
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), storeTimeout)
	defer cancel()
	_ = x.e.cfg.store.Release(ctx, x.approvalID(), x.id)
}
