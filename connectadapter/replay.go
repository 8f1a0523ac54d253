package connectadapter

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// callerKey is the caller's Idempotency-Key, every value of it: more than
// one is malformed, which the engine reports.
func callerKey(h http.Header) string {
	return adapter.CallerKey(h[adapter.HeaderIdempotencyKey]) // canonical, as the server stores it
}

// replayCodec stores a call's response as its message's binary encoding,
// and Connect's own errors, for a repeat with the caller's key. A replayed
// response is a *dynamicpb.Message of the method's output type, which
// every Connect codec encodes as it encodes the generated type: the client
// decodes the same message. Without the method's schema (a handler built
// without connect.WithSchema, which generated code always passes) no
// response is stored, and a repeat of a stored success fails Internal.
type replayCodec struct {
	output protoreflect.MessageDescriptor
}

func newReplayCodec(spec connect.Spec) adapter.Codec[*attempt] {
	md, ok := spec.Schema.(protoreflect.MethodDescriptor)
	if !ok {
		return nil
	}
	if c, ok := codecs.Load(md); ok {
		c, _ := c.(adapter.Codec[*attempt])
		return c
	}
	var c adapter.Codec[*attempt] = replayCodec{md.Output()}
	codecs.Store(md, c)
	return c
}

// codecs holds each method's codec, made once: a codec per call would be
// an allocation per call. Methods are the server's, so it stays small.
var codecs sync.Map // protoreflect.MethodDescriptor → adapter.Codec[*attempt]

func (replayCodec) Marshal(a *attempt) ([]byte, error) {
	if a == nil || a.res == nil {
		return nil, nil
	}
	msg, ok := a.res.Any().(proto.Message)
	if !ok {
		return nil, errors.New("connectadapter: the response is not a protobuf message")
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(msg)
}

func (c replayCodec) Unmarshal(b []byte) (*attempt, error) {
	msg := dynamicpb.NewMessage(c.output)
	if err := proto.Unmarshal(b, msg); err != nil {
		return nil, err
	}
	return &attempt{res: connect.NewResponse(msg)}, nil
}

// storedError is a *connect.Error as stored: code, message, details and
// metadata, and whether it came from the wire (a downstream call's).
type storedError struct {
	Code    connect.Code `json:"code"`
	Message string       `json:"message"`
	Wire    bool         `json:"wire,omitempty"`
	Details []struct {
		Type  string `json:"type"`
		Value []byte `json:"value"`
	} `json:"details,omitempty"`
	Meta http.Header `json:"meta,omitempty"`
}

func (replayCodec) MarshalError(err error) ([]byte, error) {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return nil, errors.New("connectadapter: not a Connect error")
	}
	s := storedError{Code: ce.Code(), Message: ce.Message(), Wire: connect.IsWireError(ce)}
	for _, d := range ce.Details() {
		s.Details = append(s.Details, struct {
			Type  string `json:"type"`
			Value []byte `json:"value"`
		}{d.Type(), d.Bytes()})
	}
	if !s.Wire {
		view := *ce // Meta allocates on a nil map: read it through a copy
		s.Meta = view.Meta()
	}
	return json.Marshal(s)
}

func (replayCodec) UnmarshalError(b []byte) (error, error) {
	var s storedError
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	ce := connect.NewError(s.Code, errors.New(s.Message))
	if s.Wire {
		ce = connect.NewWireError(s.Code, errors.New(s.Message))
	}
	for _, d := range s.Details {
		detail, err := connect.NewErrorDetail(&anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type, Value: d.Value})
		if err != nil {
			return nil, err
		}
		ce.AddDetail(detail)
	}
	for k, vs := range s.Meta {
		ce.Meta()[k] = vs
	}
	return ce, nil
}
