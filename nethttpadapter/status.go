package nethttpadapter

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// StatusError is net/http's own error: a handler's failing status, 500 or
// more, or 499 (the caller closed the request). The engine reads its
// canonical code: 502, 503 and 504 are Unavailable, transient — except a
// 504 or 499 the handler answered once its context had ended, which is
// net/http's deadline or cancel status, the context's outcome (TIMEOUT or
// CANCELLED); 501 is Unimplemented, the rest Internal. The finalized
// attempt's response passes through as written.
type StatusError struct {
	Status int
	// afterContext: the handler answered after its context ended.
	afterContext bool
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("handler answered %d %s", e.Status, http.StatusText(e.Status))
}

// failed reports whether a handler's status is a failure; anything else,
// 4xx included, is the handler's answer.
func failed(status int) bool { return status >= 500 || status == 499 }

// status is the adapter's one function from net/http's errors to codes (see
// [adapter.Call]): a [StatusError]'s canonical code.
func status(err error) (code uint32, message string, ok bool) {
	e, ok := errors.AsType[*StatusError](err)
	if !ok {
		return 0, "", false
	}
	switch {
	case e.Status == 499:
		code = 1 // Canceled
	case e.Status == http.StatusGatewayTimeout && e.afterContext:
		code = 4 // DeadlineExceeded: the handler gave up when told to
	case e.Status == http.StatusNotImplemented:
		code = 12 // Unimplemented
	case e.Status == http.StatusBadGateway || e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout:
		code = 14 // Unavailable
	default:
		code = 13 // Internal
	}
	return code, adapter.ConcealedMessage, true
}
