package conformance

import (
	"context"
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
)

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
}
