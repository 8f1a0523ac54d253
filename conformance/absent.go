package conformance

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/resultstore"
)

// RawClient is implemented by clients that can send a fixture's call as
// bytes and show the response as it came off the wire, so that the suite
// compares a hidden call with a call of a procedure the server does not
// have byte for byte (SPEC §12, "Hidden looks absent"): the status, every
// header and trailer field but Date, and the body. Without it that rule
// is skipped.
type RawClient interface {
	// CallRaw sends f's call with req, made as shape says, to the server
	// under test or, when absent is true, to the same server without f's
	// procedure (as [Unhandled] does), and returns what came back, read
	// to its end. Over a wire without HTTP (an in-memory transport) the
	// response is the framework's message as encoded, in Body. ok is false
	// for a shape the adapter's wire cannot carry (net/http has no
	// deadline header, say): the suite skips it. Every harness carries
	// [ShapePlain].
	CallRaw(ctx context.Context, f Fixture, req Request, shape Shape, absent bool) (resp RawResponse, ok bool)
}

// Shape is how [RawClient.CallRaw] makes a call: each is something a
// caller could get wrong, and that the server must not answer otherwise
// for a hidden procedure than for one it does not have.
type Shape string

// The shapes of a raw call.
const (
	// ShapePlain is the call as [Client.Call] makes it.
	ShapePlain Shape = "plain"
	// ShapeMalformedApprovalID carries the approval id "x": an
	// Agentsafe-Approval-Id header (the _approval_id argument over MCP).
	ShapeMalformedApprovalID Shape = "a malformed approval id"
	// ShapeMalformedKey carries the caller key `"unterminated`, which is
	// neither a structured-field string nor a token: an Idempotency-Key
	// header (an _idempotency_key of "" over MCP, which no key may be).
	ShapeMalformedKey Shape = "a malformed idempotency key"
	// ShapeUndecodable has a body the framework cannot decode: for
	// protobuf, bytes that are no message of the request's type; over MCP,
	// arguments that are not a JSON object.
	ShapeUndecodable Shape = "an undecodable body"
	// ShapeUnbindable carries the caller key "k1" and an input the digest
	// refuses (JSON with a duplicate member name, where the framework
	// hands such a body to the engine: net/http).
	ShapeUnbindable Shape = "a keyed input the digest refuses"
	// ShapeExpired carries a deadline that has passed by the time the
	// server reads it: grpc-timeout 1u, Connect-Timeout-Ms 1.
	ShapeExpired Shape = "an already expired deadline"
)

// Shapes lists every shape, in the order the suite sends them.
func Shapes() []Shape {
	return []Shape{ShapePlain, ShapeMalformedApprovalID, ShapeMalformedKey, ShapeUndecodable, ShapeUnbindable, ShapeExpired}
}

// RawResponse is a response as it came off the wire: over HTTP/2 the
// status, the header and trailer fields and the body, not the framing.
type RawResponse struct {
	Status  int
	Header  http.Header
	Trailer http.Header
	Body    []byte
}

// String renders r for a failure message.
func (r RawResponse) String() string {
	return fmt.Sprintf("%d, header %v, trailer %v, body %q", r.Status, r.Header, r.Trailer, r.Body)
}

// sameOnTheWire reports whether a and b are the same response but for
// their Date fields.
func sameOnTheWire(a, b RawResponse) bool {
	return a.Status == b.Status && sameFields(a.Header, b.Header) && sameFields(a.Trailer, b.Trailer) && bytes.Equal(a.Body, b.Body)
}

func sameFields(a, b http.Header) bool {
	keys := func(h http.Header) []string {
		var out []string
		for k := range h {
			if !strings.EqualFold(k, "Date") {
				out = append(out, http.CanonicalHeaderKey(k))
			}
		}
		slices.Sort(out)
		return out
	}
	ka := keys(a)
	if !slices.Equal(ka, keys(b)) {
		return false
	}
	for _, k := range ka {
		if !slices.Equal(a.Values(k), b.Values(k)) {
			return false
		}
	}
	return true
}

// absentRules hold hidden calls to their framework's answer for a
// procedure that does not exist, byte for byte.
var absentRules = []adapterRule{
	{name: "Hidden/a hidden call is answered byte for byte as a procedure the server does not have", check: func(s *suite) {
		const rule = "hidden looks absent on the wire, byte for byte (status, header and trailer fields but Date, body), whatever else is wrong with the call: " +
			"hiding is decided first, before the caller's context, any agentsafe header or the body is read, and a strict audit sink's failure cannot reveal it"
		if _, ok := s.client.(RawClient); !ok {
			s.Skip("the harness's client cannot show a response as it came off the wire (conformance.RawClient)")
		}
		// The gated fixture a policy hides (no approval store call may
		// follow); the read, where the harness says its surface, on no
		// surface but that one's others.
		hide := &rulePolicy{name: "hide", h: s.h, decide: map[Fixture]func() (middleware.PolicyDecision, error){FixtureGated: decision(middleware.Hide())}}
		hiddenFixtures := []Fixture{FixtureGated}
		surfaced, _ := s.h.(Surfaced)
		unexpose := func(f Fixture, c *middleware.Capability) {
			if surfaced == nil || f != FixtureRead {
				return
			}
			c.Exposure = slices.DeleteFunc(slices.Clone(everywhere), func(e middleware.Surface) bool { return e == surfaced.Surface() })
		}
		if surfaced != nil {
			hiddenFixtures = append(hiddenFixtures, FixtureRead)
		}
		// Keys are checked and inputs bound (a result store), and the
		// strict audit sink fails every synchronous record.
		ps, approvals := s.policySuiteWith([]middleware.Option{
			middleware.WithResultStore(resultstore.NewMemory()), middleware.WithResultKey(resultKey), middleware.WithAuditSink(failingAudit{}),
		}, unexpose, hide)
		rc := ps.client.(RawClient)
		for _, f := range hiddenFixtures {
			for _, shape := range Shapes() {
				ctx, cancel := context.WithTimeout(s.Context(), patience)
				req := ps.request(ModeOK)
				hidden, ok := rc.CallRaw(ctx, f, req, shape, false)
				if !ok {
					cancel()
					if shape == ShapePlain {
						s.Fatalf("%s: the harness cannot make a plain raw call", rule)
					}
					continue
				}
				absent, _ := rc.CallRaw(ctx, f, req, shape, true)
				cancel()
				if !sameOnTheWire(hidden, absent) {
					s.Errorf("%s: %s, %s:\n\thidden: %s\n\tabsent: %s", rule, f, shape, hidden, absent)
				}
				ps.wantRuns(rule, req.ID, 0)
			}
		}
		if n := approvals.calls.Load(); n != 0 {
			s.Errorf("%s: the approval store was called %d times for hidden calls", rule, n)
		}
	}},
}
