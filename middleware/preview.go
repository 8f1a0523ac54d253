package middleware

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentsafe/agentsafe/internal/digest"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// PreviewInput is what a capability's Preview function is given: the call
// it previews.
type PreviewInput struct {
	// Actor is who the call is for (see [WithActor]).
	Actor Actor
	// Procedure is the governed procedure.
	Procedure string
	// Input is the call's input as JSON, as policies read it: the decoded
	// input the approval's digest binds (a JSON body, or the pinned
	// protojson rendering of a message), checked first; nil for an input
	// that is not JSON. It must not be modified.
	Input []byte
}

// Preview is the effect a call would have, computed by the server from
// its current state: Text is what approvers see first, plain text of at
// most 4 KiB ("refund 420.00 EUR of order 77, paid 500.00 on 30 Nov, to
// card ****1234"); State is what the effect depends on (a row's version,
// or the fields the Text shows), whose digest the approval is bound to. A
// resume whose State differs is refused APPROVAL_STALE.
type Preview struct {
	Text  string
	State []byte
}

// maxPreviewText is the longest Text a preview may return, in bytes.
const maxPreviewText = 4 << 10

// errPreviewTimeout is the cause a preview's own timer cancels it with.
var errPreviewTimeout = errors.New("agentsafe: the preview timed out")

// WithPreview sets the Preview of procedure's capability (see
// [Capability].Preview): for a capability declared by protobuf method
// options, which cannot carry a function. [New] fails when procedure has no
// capability, when its registry entry has a Preview already, when
// procedure is given twice, when f is nil, and for a streaming procedure.
// The preview is called only for calls that need an approval. By default a
// capability has the Preview of its registry entry, if any.
func WithPreview(procedure string, f func(ctx context.Context, in PreviewInput) (Preview, error)) Option {
	return optionFunc(func(c *config) {
		switch {
		case f == nil:
			c.problems = append(c.problems, fmt.Sprintf("WithPreview(%q): the preview function is nil", procedure))
		case c.previews[procedure] != nil:
			c.problems = append(c.problems, fmt.Sprintf("WithPreview(%q): given twice", procedure))
		default:
			if c.previews == nil {
				c.previews = make(map[string]func(context.Context, PreviewInput) (Preview, error))
			}
			c.previews[procedure] = f
		}
	})
}

// previewProblems gives the capabilities of caps the previews of
// WithPreview, and reports those that name no capability or one that
// cannot take them. Every capability with a preview is checked too: a
// stream binds no single input, so it can have no preview.
func (c *config) previewProblems(caps map[string]Capability) []error {
	var errs []error
	for _, proc := range slices.Sorted(maps.Keys(c.previews)) {
		declared, ok := caps[proc]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("agentsafe: WithPreview(%q): no capability is declared for this procedure (by method option or registry): check the spelling", proc))
		case declared.Preview != nil:
			errs = append(errs, &FieldError{proc, "engine", "Preview", "set both in the registry and with WithPreview: keep one"})
		default:
			declared.Preview = c.previews[proc]
			caps[proc] = declared
		}
	}
	for _, proc := range slices.Sorted(maps.Keys(caps)) {
		if caps[proc].Preview != nil && caps[proc].Streaming {
			errs = append(errs, &FieldError{proc, "engine", "Preview", "a streaming procedure cannot have a preview: an approval binds one input"})
		}
	}
	return errs
}

// previewed is what a capability's preview computed for one execution, at
// the request or at the resume.
type previewed struct {
	text   string
	digest string // of state; "" when the capability has no preview
	state  []byte
}

// runPreview calls the capability's preview, if it has one, and keeps
// what it computed in x.preview. It is bounded by the capability's
// Timeout: the preview runs on a goroutine of its own, so one that ignores
// its context is left behind, never waited for. It fails closed:
// PREVIEW_UNAVAILABLE for an error, a panic or a timeout (retryable: the
// state may be readable again), and for a Text that is over 4 KiB, not
// valid UTF-8 or holds NUL (not retryable: the application's bug, which
// the logger reports, rate-limited; never truncated); CANCELLED when the
// caller left.
func (x *execution) runPreview() *Error {
	f := x.cap.Preview
	if f == nil {
		return nil
	}
	input, err := x.inputJSON()
	if err != nil { // bind refused it before the gate; never trust that it ran
		return x.unbound(err)
	}
	ctx, cancel := context.WithTimeoutCause(x.ctx, x.cap.timeout, errPreviewTimeout)
	defer cancel()
	done := make(chan previewResult, 1)
	go func() {
		var r previewResult
		defer func() {
			if p := recover(); p != nil {
				r = previewResult{err: &PanicError{Value: p, Stack: debug.Stack()}}
			}
			done <- r
		}()
		r.p, r.err = f(ctx, PreviewInput{Actor: x.actor, Procedure: x.proc(), Input: input})
	}()
	// Let the preview run on this thread first: a quick one then returns
	// before this goroutine parks (as execution.await does for attempts).
	runtime.Gosched()
	var r previewResult
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done: // a result returned as the deadline fired wins
		default:
			r.err = context.Cause(ctx)
		}
	}
	switch {
	case r.err != nil && x.ctx.Err() != nil && (isContextError(r.err) || r.err == errPreviewTimeout):
		return x.cancelled() // the caller left: not the preview's failure
	case r.err == errPreviewTimeout || errors.Is(r.err, context.DeadlineExceeded) && context.Cause(ctx) == errPreviewTimeout:
		return &Error{Code: CodePreviewUnavailable, Message: fmt.Sprintf("the preview of the effect did not finish within %s; nothing was requested or ran", x.cap.timeout), Retryable: true, Cause: errPreviewTimeout}
	case r.err != nil:
		return &Error{Code: CodePreviewUnavailable, Message: "the preview of the effect failed; nothing was requested or ran", Retryable: true, Cause: fmt.Errorf("preview: %w", r.err)}
	}
	if why := badPreviewText(r.p.Text); why != "" {
		x.e.warnPreview(x.cap, why)
		return &Error{Code: CodePreviewUnavailable, Message: "the preview of the effect cannot be shown to approvers; nothing was requested or ran", Cause: errors.New("preview: " + why)}
	}
	x.extra().preview = previewed{text: r.p.Text, digest: digest.Preview(r.p.State), state: r.p.State}
	return nil
}

type previewResult struct {
	p   Preview
	err error
}

// badPreviewText says what makes text unfit for approvers' eyes and every
// store, or "".
func badPreviewText(text string) string {
	switch {
	case len(text) > maxPreviewText:
		return fmt.Sprintf("its text is %d bytes, over the limit of %d (it is never truncated)", len(text), maxPreviewText)
	case !utf8.ValidString(text):
		return "its text is not valid UTF-8"
	case strings.IndexByte(text, 0) >= 0:
		return "its text holds a NUL byte"
	}
	return ""
}

// previewWarnEvery spaces the warnings about one capability's unfit previews.
const previewWarnEvery = time.Minute

// warnPreview logs, at most once a minute per capability, that its
// preview returned a text approvers cannot be shown: the application's
// bug, which fails every such call.
func (e *Engine) warnPreview(c *capability, why string) {
	now := time.Now().UnixNano()
	last := c.previewWarned.Load()
	if last != 0 && now-last < int64(previewWarnEvery) || !c.previewWarned.CompareAndSwap(last, now) {
		return
	}
	e.cfg.logger.Warn("agentsafe: a capability's Preview returned a text approvers cannot be shown, so its calls fail PREVIEW_UNAVAILABLE: fix the preview",
		"procedure", c.procedure, "problem", why)
}

// staleOr is the event of a refused consumption: approval_stale when the
// state changed, approval_denied otherwise.
func staleOr(code Code) EventType {
	if code == CodeApprovalStale {
		return EventApprovalStale
	}
	return EventApprovalDenied
}

// approvedState is what [Execution].ApprovedState holds: the State of the
// preview computed before the consumption, a copy for each reader.
func (x *execution) approvedState() []byte {
	if x.approval() == nil || x.more.preview.digest == "" {
		return nil
	}
	return slices.Clone(x.more.preview.state)
}

// previewed returns req with what the capability's preview computed, if
// it has one: the record keeps its text and the digest of its state.
func (x *execution) previewed(req store.ApprovalRequest) store.ApprovalRequest {
	p := x.preview()
	req.PreviewText, req.PreviewDigest = p.text, p.digest
	return req
}
