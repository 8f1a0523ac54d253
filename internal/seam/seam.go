// Package seam holds what the engine (package middleware) and the adapters
// share without making it part of either's public API.
package seam

import "errors"

// ErrNoResponse is what an attempt returns when its handler returned
// without a response, which its framework answers with an implicit success
// (net/http's 200): while the engine still waits for the attempt, after its
// context ended, it is the context's outcome (the handler gave up when
// told to); for an attempt the engine abandoned, it is a success that
// landed late.
var ErrNoResponse = errors.New("agentsafe: the handler returned without a response")
