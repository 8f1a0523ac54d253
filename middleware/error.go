package middleware

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentsafe/agentsafe/internal/seam"
)

// concealedMessage replaces the message of every error the handler did not
// declare on purpose, so internals never reach the caller.
const concealedMessage = seam.ConcealedMessage

// Error is how an execution failed. Handlers may return one to declare a
// business error whose message the caller may see (for example an
// ALREADY_REFUNDED refusal, with Code CodeExecutionFailed); every other error
// is concealed behind "the operation failed" and its text goes to events only.
type Error struct {
	Code    Code
	Message string
	// Retryable says whether another runtime attempt could succeed. On the
	// wire the engine narrows it to "safe for the caller to re-invoke".
	Retryable bool
	// Cause is the underlying error, for errors.Is/As and events. It never
	// reaches the wire, except as a framework's own error (see own).
	Cause error
	// own marks the error of an execution that failed with a framework's
	// own error (a *connect.Error, a gRPC status, a twirp.Error, a net/http
	// 5xx): Cause passes to the wire unchanged.
	own bool
	// hidden marks a call answered as if its procedure had no handler (a
	// policy hid it, or it came in on a surface it is not exposed on).
	hidden bool
	// retryAfter is, on BUDGET_EXCEEDED, when enough of the window frees.
	retryAfter time.Duration
}

// NewError returns an error with code and message.
func NewError(code Code, message string) *Error {
	return &Error{Code: code, Message: message, Retryable: code.retryable()}
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Code.String()
	}
	if e.Cause != nil && e.Cause.Error() != msg {
		return fmt.Sprintf("agentsafe %s: %s: %v", e.Code, msg, e.Cause)
	}
	return fmt.Sprintf("agentsafe %s: %s", e.Code, msg)
}

func (e *Error) Unwrap() error { return e.Cause }

// CodeOf returns the code of err: CodeOK for nil, the code of the first
// *Error in err's chain, and CodeExecutionFailed otherwise.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return CodeExecutionFailed
}

type retryableError struct{ err error }

func (r retryableError) Error() string { return r.err.Error() }
func (r retryableError) Unwrap() error { return r.err }

// Retryable marks err as transient, worth another runtime attempt where the
// capability allows one. It returns nil for nil, and keeps err reachable
// through errors.Is and errors.As.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return retryableError{err}
}

// DefaultClassifier treats as transient: errors marked with [Retryable], an
// *Error whose Retryable is set, and anything with a `Temporary() bool`
// method that returns true. Everything else is permanent.
func DefaultClassifier(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := errors.AsType[retryableError](err); ok {
		return true
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Retryable
	}
	if t, ok := errors.AsType[interface {
		error
		Temporary() bool
	}](err); ok {
		return t.Temporary()
	}
	return false
}

// PanicError is the Cause of the error an execution ends with when its
// handler panicked. It carries the panic value and the stack, which go to
// events; the caller sees a concealed EXECUTION_FAILED.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", p.Value) }
