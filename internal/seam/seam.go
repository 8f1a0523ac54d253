// Package seam is the private contract between the engine (package
// middleware) and its adapter SPI (package middleware/adapter): what the
// SPI needs from the engine without making it part of the engine's user
// API. The engine installs the hooks at init; the SPI wraps them in typed
// functions. Nothing else may import it.
package seam

import (
	"context"
	"errors"
)

// Resolve returns the engine's route for a procedure: an unexported type
// of package middleware whose exported methods the SPI calls through an
// interface of its own. engine is a *middleware.Engine. Installed by
// package middleware.
var Resolve func(engine any, procedure string) any

// HandlerError returns the error a handler (or its framework) returned
// when an execution failed with it as the framework's own error: it passes
// to the wire unchanged. Installed by package middleware.
var HandlerError func(err error) (error, bool)

// Hidden reports whether err is the outcome of a call answered as if its
// procedure had no handler. Installed by package middleware.
var Hidden func(err error) bool

// Call is one incoming call, as the SPI hands it to the engine.
type Call struct {
	// Input is the call's input in bindable form; nil means nothing to bind.
	Input Input
	// ApprovalID is the raw value of the Agentsafe-Approval-Id header.
	ApprovalID string
	// Surface is where the call came in (see middleware.Surface).
	Surface uint8
	// Status maps an error of the adapter's framework to its canonical RPC
	// code and the message the framework shows the caller; ok is false for
	// every other error.
	Status func(err error) (code uint32, message string, ok bool)
	// IdempotencyKey is the raw Idempotency-Key the call carries, or empty.
	IdempotencyKey string
	// Marshal and Unmarshal are the adapter's codec for stored results;
	// nil when it has none.
	Marshal   func(any) ([]byte, error)
	Unmarshal func([]byte) (any, error)
	// MarshalError and UnmarshalError store and rebuild the framework's own
	// errors; nil when the adapter's codec cannot.
	MarshalError   func(error) ([]byte, error)
	UnmarshalError func([]byte) (error, error)
	// Attempt is the adapter's attempt function: a typed function of the
	// SPI whose method erases the type, so that a call costs no closure.
	Attempt Attempt
}

// Attempt runs one attempt of a call.
type Attempt interface {
	RunAttempt(ctx context.Context) (any, error)
}

// Input is a call's input as the engine binds it.
type Input interface {
	JSON() ([]byte, error)
	Digest(procedure string) (string, error)
}

// AmountReader is implemented by the inputs that can read the amount a
// call spends against a budget: path is a dotted path of protobuf field
// names for a message, a JSON Pointer for a JSON document. Its error
// wraps amount.ErrAmount when the input has no such amount.
type AmountReader interface {
	Amount(path string) (int64, error)
}

// The canonical RPC codes the engine's rules read.
const (
	CodeCanceled         = 1
	CodeDeadlineExceeded = 4
	CodeUnavailable      = 14
)

// ErrNoResponse is what an attempt returns when its handler returned
// without a response, which its framework answers with an implicit success
// (net/http's 200): while the engine still waits for the attempt, after its
// context ended, it is the context's outcome (the handler gave up when
// told to); for an attempt the engine abandoned, it is a success that
// landed late.
var ErrNoResponse = errors.New("agentsafe: the handler returned without a response")

// KeyLabel is the context key of the label middleware.WithKeyLabel sets.
type KeyLabel struct{}

// HeaderApprovalID is the request header a resumed call presents its
// approval id in.
const HeaderApprovalID = "Agentsafe-Approval-Id"

// ConcealedMessage replaces the message of every error a handler did not
// declare on purpose (see adapter.ConcealedMessage).
const ConcealedMessage = "the operation failed"
