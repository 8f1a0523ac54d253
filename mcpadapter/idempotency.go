package mcpadapter

import (
	"errors"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// keyArgument is the optional argument of every tool that carries the
// caller's idempotency key: a model that got no reply sends the same value
// again, and the engine replays the first call's result instead of running
// it twice. Its leading underscore keeps it apart from request fields, as
// "_approval_id"'s does; New refuses a request message with a field of
// this name. It is left out of the input digest: it is not the input.
const keyArgument = "_idempotency_key"

const keyArgumentDoc = "Optional. When repeating a call of this tool that got no reply or failed, send the same value; " +
	"use a new value only for a new operation."

// maxKeyArgument is the longest key, as for the Idempotency-Key header.
const maxKeyArgument = 255

// checkKey refuses a key the Idempotency-Key header could not carry: 1 to
// 255 printable ASCII characters.
func checkKey(key string) error {
	if key == "" || len(key) > maxKeyArgument {
		return errors.New(`"` + keyArgument + `" must be 1 to 255 characters`)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < ' ' || key[i] > '~' {
			return errors.New(`"` + keyArgument + `" must be printable ASCII`)
		}
	}
	return nil
}

// setKey sets the call's Idempotency-Key from the argument and from
// nowhere else: a header forwarded from the MCP request is dropped. The
// value goes as an sf-string, so the engine reads it as sent.
func setKey(h http.Header, key string) {
	h.Del(adapter.HeaderIdempotencyKey)
	if key != "" {
		h.Set(adapter.HeaderIdempotencyKey, adapter.QuoteKey(key))
	}
}
