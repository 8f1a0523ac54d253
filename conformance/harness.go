package conformance

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
)

// Fixture names one of the suite's capabilities. A harness maps each to a
// procedure of its adapter (see [Harness.Procedure]); the suite registers
// the fixture's capability under that name, replacing any method option.
type Fixture string

// The suite's fixtures and their capabilities.
const (
	// FixtureRead: read, retried at most twice (3 runs), 150ms per attempt.
	FixtureRead Fixture = "read"
	// FixtureWrite: write, never retried, 150ms per attempt.
	FixtureWrite Fixture = "write"
	// FixtureIdempotentWrite: write declared idempotent, retried once.
	FixtureIdempotentWrite Fixture = "idempotent-write"
	// FixtureSlow: read without retries and a 100ms attempt timeout.
	FixtureSlow Fixture = "slow"
	// FixtureGated: write that needs a "manager" approval.
	FixtureGated Fixture = "gated"
	// FixtureStream: server-streaming read with retries configured, which a
	// stream must never honour. Only for harnesses that stream.
	FixtureStream Fixture = "stream"
)

// Fixtures lists the unary fixtures every harness must serve.
func Fixtures() []Fixture {
	return []Fixture{FixtureRead, FixtureWrite, FixtureIdempotentWrite, FixtureSlow, FixtureGated}
}

// Mode programs what each attempt of a fixture's handler does.
type Mode string

// The handler modes.
const (
	// ModeOK succeeds at once.
	ModeOK Mode = "ok"
	// ModeFlaky fails retryably FailTimes times, then succeeds.
	ModeFlaky Mode = "flaky"
	// ModeFail fails with a plain Go error whose text must stay concealed.
	ModeFail Mode = "fail"
	// ModeHang blocks until its context ends and returns the context's error.
	ModeHang Mode = "hang"
	// ModeIgnore ignores its context: it sets a response header, sleeps past
	// its deadline, and returns success late.
	ModeIgnore Mode = "ignore"
	// ModePanic panics.
	ModePanic Mode = "panic"
	// ModeHeaders sets X-Conformance-Attempt to its attempt number, then
	// fails retryably on attempt 1 and succeeds after.
	ModeHeaders Mode = "headers"
	// ModeFrameworkDeadline waits until its context ends, then returns the
	// framework's own DeadlineExceeded status (a *Status), as a framework
	// handler that checks its context, or a downstream call on it, would.
	ModeFrameworkDeadline Mode = "framework-deadline"
	// ModeUnavailable fails FailTimes times with the framework's own
	// Unavailable status (a *Status), then succeeds.
	ModeUnavailable Mode = "unavailable"
	// ModeFrameworkError fails with the framework's own error: a *Status
	// with code Unimplemented, [FrameworkErrorMessage] and
	// [FrameworkErrorDetail].
	ModeFrameworkError Mode = "framework-error"
	// ModeMutate is a careless handler that changes its input: the
	// harness's framework handler, seeing this mode in the decoded request,
	// sets the request message's id to [MutatedID], in place, after the
	// suite's handler returned. Attempt 1 fails retryably; the retry must
	// see the input as the caller sent it.
	ModeMutate Mode = "mutate"
	// ModeRelay sets, through setHeader, the envelope's headers a
	// downstream governed response would carry (Agentsafe-Execution-Id and
	// the others, naming another execution), as a handler relaying that
	// response's headers would, then succeeds.
	ModeRelay Mode = "relay"
)

// What ModeFrameworkError and ModeMutate use.
const (
	FrameworkErrorMessage = "conformance: the feature is switched off"
	FrameworkErrorDetail  = "conformance-detail"
	MutatedID             = "mutated-by-the-handler"
)

// The canonical codes (the numbering gRPC and Connect share) of the
// statuses the suite's handler returns.
const (
	StatusCanceled          uint32 = 1
	StatusDeadlineExceeded  uint32 = 4
	StatusResourceExhausted uint32 = 8
	StatusUnimplemented     uint32 = 12
	StatusInternal          uint32 = 13
	StatusUnavailable       uint32 = 14
)

// Status is an error in the terms RPC frameworks share: a canonical code,
// a message and one detail. The suite's handler returns a *Status for the
// modes that exercise a framework's own errors; the harness's framework
// handler turns it into its framework's error before returning it
// (connect.NewError with Detail in an error detail, a gRPC status with
// details, a twirp.Error with Detail as meta, a net/http response with
// [Status.HTTPStatus] and Message as its body), and the harness's client
// turns a framework error back into a Status for [Result.Status].
type Status struct {
	Code    uint32
	Message string
	// Detail is carried as the framework carries details (an error
	// detail, meta, a header for net/http: X-Conformance-Detail).
	Detail string
}

func (s *Status) Error() string { return fmt.Sprintf("status %d: %s", s.Code, s.Message) }

// HTTPStatus is how a net/http handler answers with s: 499 Canceled, 504
// DeadlineExceeded, 429 ResourceExhausted, 501 Unimplemented, 503
// Unavailable, 500 otherwise.
func (s *Status) HTTPStatus() int {
	switch s.Code {
	case StatusCanceled:
		return 499
	case StatusResourceExhausted:
		return http.StatusTooManyRequests
	case StatusDeadlineExceeded:
		return http.StatusGatewayTimeout
	case StatusUnimplemented:
		return http.StatusNotImplemented
	case StatusUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// StatusFromHTTP is the inverse of [Status.HTTPStatus], for net/http
// clients.
func StatusFromHTTP(status int) uint32 {
	switch status {
	case 499:
		return StatusCanceled
	case http.StatusGatewayTimeout:
		return StatusDeadlineExceeded
	case http.StatusTooManyRequests:
		return StatusResourceExhausted
	case http.StatusNotImplemented:
		return StatusUnimplemented
	case http.StatusServiceUnavailable:
		return StatusUnavailable
	}
	return StatusInternal
}

// Request is a fixture call's input. A harness carries it over its wire in
// whatever form its framework uses (this repository's adapters use the
// fields of agentsafe.test.v1.Request) and hands it to the [Handler]
// unchanged.
type Request struct {
	// ID is unique per call; the suite counts handler runs by it.
	ID        string
	Mode      Mode
	FailTimes int
	// Count is how many messages a stream sends.
	Count int
}

// Response is what a fixture's handler returns, to be carried back to the
// client.
type Response struct {
	ID             string
	Attempt        int
	ExecutionID    string
	IdempotencyKey string
}

// Handler is the suite's implementation of every fixture. The harness's
// framework handlers call it with the decoded request, the fixture they
// serve, and a function that sets a response header through the framework
// (Connect's response headers, twirp.SetHTTPResponseHeader, grpc.SetHeader,
// the http.ResponseWriter).
type Handler func(ctx context.Context, f Fixture, req Request, setHeader func(key, value string)) (Response, error)

// StreamHandler implements FixtureStream: it calls send Count times.
type StreamHandler func(ctx context.Context, req Request, setHeader func(key, value string), send func(Response) error) error

// Harness is what an adapter author implements to run the suite: build a
// server around the fixtures through the adapter under test, and a client
// that calls it over the adapter's wire and decodes the envelope.
type Harness interface {
	// Procedure returns the procedure name the adapter gives f.
	Procedure(f Fixture) string
	// Start serves every fixture of [Fixtures] through the adapter under
	// test, governed by eng, each calling handle (and FixtureStream calling
	// stream, if the harness implements [StreamClient]). The server must
	// stop when t ends.
	Start(t *testing.T, eng *middleware.Engine, handle Handler, stream StreamHandler) Client
}

// Client calls the server a harness started.
type Client interface {
	// Call calls fixture f with req. A non-empty approvalID is sent as the
	// Agentsafe-Approval-Id request header exactly as given (the suite sends
	// malformed ones on purpose).
	Call(ctx context.Context, f Fixture, req Request, approvalID string) Result
}

// StreamClient is implemented by clients of adapters that govern streams.
type StreamClient interface {
	Stream(ctx context.Context, req Request) (msgs []Response, res Result)
}

// Result is what a client saw of one call.
type Result struct {
	// Response is the decoded response on success, else nil.
	Response *Response
	// Envelope is the envelope as decoded from the wire with the adapter's
	// own client helper; a zero ExecutionID means none was found.
	Envelope middleware.Envelope
	// Header holds the response headers (and trailers) as they reached the
	// client.
	Header http.Header
	// Err is the error the framework's client returned, if any. Its text
	// is checked for concealment.
	Err error
	// Body is the raw response body, where the framework exposes one; it is
	// checked for concealment too.
	Body []byte
	// Status is the framework's error as the client decoded it (code,
	// message, the suite's detail), nil on success.
	Status *Status
	// EngineDetail reports that the error carried agentsafe's own detail:
	// the agentsafe.v1.ErrorDetail (Connect, gRPC), agentsafe_ meta
	// (Twirp), the JSON envelope as the body (net/http). Only errors the
	// engine decided carry it; a framework's own error never does.
	EngineDetail bool
}

// InProcess is implemented by harnesses whose client calls the server in
// process, through no socket (an http.Handler called directly, an
// in-memory transport). For them [RunAdapter] runs every rule inside a
// testing/synctest bubble: the suite's timeouts and waits run on a fake
// clock, with no sleeps or polling, and Start is called inside the bubble.
type InProcess interface {
	InProcess() bool
}
