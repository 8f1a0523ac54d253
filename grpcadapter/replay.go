package grpcadapter

import (
	"context"
	"errors"
	"sync"

	"github.com/agentsafe/agentsafe/internal/protoreplay"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// callerKey is the caller's idempotency-key metadata, every value of it:
// more than one, or an empty one, is malformed, which the engine reports.
func callerKey(ctx context.Context) string {
	return adapter.CallerKey(metadata.ValueFromIncomingContext(ctx, mdKey))
}

// replayCodec stores a call's response as its message's binary encoding,
// and the gRPC status a handler returned, for a repeat with the caller's
// key. The response is decoded into the method's generated type (found in
// protoregistry.GlobalTypes by the method's descriptor): without the
// descriptor linked no response is stored, and a repeat of a stored
// success fails Internal.
type replayCodec struct{ output protoreflect.MessageType }

func newReplayCodec(method string) adapter.Codec[*headerSink] {
	if c, ok := codecs.Load(method); ok {
		c, _ := c.(adapter.Codec[*headerSink])
		return c
	}
	var c adapter.Codec[*headerSink]
	if mt, ok := protoreplay.Output(method); ok {
		c = replayCodec{mt}
	}
	codecs.Store(method, c)
	return c
}

// codecs holds each method's codec, made once: a codec per call would be
// an allocation per call. Methods are the server's, so it stays small.
var codecs sync.Map // method → adapter.Codec[*headerSink], nil without a descriptor

func (replayCodec) Marshal(s *headerSink) ([]byte, error) {
	if s == nil || s.resp == nil {
		return nil, nil
	}
	msg, ok := s.resp.(proto.Message)
	if !ok {
		return nil, errors.New("grpcadapter: the response is not a protobuf message")
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(msg)
}

func (c replayCodec) Unmarshal(b []byte) (*headerSink, error) {
	msg := c.output.New().Interface()
	if err := proto.Unmarshal(b, msg); err != nil {
		return nil, err
	}
	return &headerSink{resp: msg}, nil
}

// MarshalError stores a status error as its google.rpc.Status: code,
// message and details.
func (replayCodec) MarshalError(err error) ([]byte, error) {
	st, ok := status.FromError(err)
	if !ok {
		return nil, errors.New("grpcadapter: not a gRPC status")
	}
	return proto.Marshal(st.Proto())
}

func (replayCodec) UnmarshalError(b []byte) (error, error) {
	p := new(spb.Status)
	if err := proto.Unmarshal(b, p); err != nil {
		return nil, err
	}
	return status.FromProto(p).Err(), nil
}
