package nethttpadapter

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// StatusError is net/http's own error: a handler's failing status, 500 or
// more, or 499 (the caller closed the request). The engine reads its
// canonical code: 502 and 503 are Unavailable, transient; 504
// (DeadlineExceeded) and 499 (Canceled) after the attempt's context ended
// are the context's outcome; 501 is Unimplemented, the rest Internal. The
// finalized attempt's response passes through as written.
type StatusError struct {
	Status int
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
	switch e.Status {
	case 499:
		code = 1 // Canceled
	case http.StatusNotImplemented:
		code = 12 // Unimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		code = 14 // Unavailable
	case http.StatusGatewayTimeout:
		code = 4 // DeadlineExceeded
	default:
		code = 13 // Internal
	}
	return code, adapter.ConcealedMessage, true
}
