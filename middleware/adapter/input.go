package adapter

import (
	"fmt"
	"net/http"

	"github.com/agentsafe/agentsafe/internal/amount"
	"github.com/agentsafe/agentsafe/internal/digest"
	"google.golang.org/protobuf/proto"
)

// Input is a call's input in a form the engine can bind: the input digest
// of approvals and events is computed from it, only when something needs
// it. Build one with [JSONInput], [ProtoInput] or [HTTPInput]; every adapter
// uses these, so one input gives the same digest through any adapter.
type Input interface {
	// JSON returns the input as JSON, for application functions that look
	// at it (approval views and conditions): the body of a JSON input, the
	// pinned protojson rendering of a message, the body of a JSON request.
	// It returns nil for inputs that are not JSON.
	JSON() ([]byte, error)
	// Digest returns the input digest for procedure: "sha256:" and 64 hex
	// digits. Its error wraps the reason an input cannot be bound (not
	// I-JSON, unknown protobuf fields).
	Digest(procedure string) (string, error)
}

// JSONInput binds a JSON document by its RFC 8785 canonical form.
func JSONInput(body []byte) Input { return jsonInput(body) }

type jsonInput []byte

func (j jsonInput) Digest(procedure string) (string, error) { return digest.JSON(procedure, j) }

func (j jsonInput) JSON() ([]byte, error) { return j, nil }

// Amount reads a budget's amount at the JSON Pointer p.
func (j jsonInput) Amount(p string) (int64, error) { return amount.JSON(j, p) }

// ProtoInput binds a protobuf message through protojson with pinned
// options, then its canonical JSON form. Messages with unknown fields cannot
// be bound.
func ProtoInput(m proto.Message) Input { return protoInput{m} }

type protoInput struct{ m proto.Message }

func (p protoInput) Digest(procedure string) (string, error) { return digest.Proto(procedure, p.m) }

func (p protoInput) JSON() ([]byte, error) { return digest.ProtoJSON(p.m) }

// Amount reads a budget's amount at the dotted field path.
func (p protoInput) Amount(path string) (int64, error) { return amount.Proto(p.m.ProtoReflect(), path) }

// HTTPInput binds a net/http request: method, cleaned path, sorted query,
// the headers named in bound, and the body (canonical JSON for JSON media
// types, raw bytes otherwise). body is the complete request body, read by
// the caller; r.Body is not touched.
func HTTPInput(r *http.Request, body []byte, bound ...string) Input {
	return &httpInput{r: r, body: body, bound: bound}
}

// httpInput parses the request's path and query only when asked to bind
// it: most calls need no digest. r is not modified while the call runs.
type httpInput struct {
	r     *http.Request
	body  []byte
	bound []string
}

func (h *httpInput) JSON() ([]byte, error) {
	if !digest.IsJSON(h.r.Header.Get("Content-Type")) {
		return nil, nil
	}
	return h.body, nil
}

// Amount reads a budget's amount at the JSON Pointer p of a JSON body.
func (h *httpInput) Amount(p string) (int64, error) {
	if !digest.IsJSON(h.r.Header.Get("Content-Type")) {
		return 0, fmt.Errorf("%w: %s: the body is not JSON (Content-Type %q)", amount.ErrAmount, p, h.r.Header.Get("Content-Type"))
	}
	return amount.JSON(h.body, p)
}

func (h *httpInput) Digest(procedure string) (string, error) {
	return digest.HTTP(digest.HTTPRequest{
		Procedure:    procedure,
		Method:       h.r.Method,
		Path:         h.r.URL.EscapedPath(),
		Query:        h.r.URL.Query(),
		Header:       h.r.Header,
		BoundHeaders: h.bound,
		Body:         h.body,
	})
}
