package twirpadapter

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentsafe/agentsafe/internal/protoreplay"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/twitchtv/twirp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// callerKey is the caller's Idempotency-Key header, every value of it:
// more than one, or an empty one, is malformed, which the engine reports.
func callerKey(h http.Header) string {
	return adapter.CallerKey(h[adapter.HeaderIdempotencyKey]) // canonical, as the server stores it
}

// replayCodec stores a call's response as its message's binary encoding,
// and the twirp.Error a handler returned, for a repeat with the caller's
// key. The response is decoded into the method's generated type (found in
// protoregistry.GlobalTypes by the method's descriptor), which Twirp's
// generated code requires; without the descriptor linked no response is
// stored, and a repeat of a stored success fails internal.
type replayCodec struct{ output protoreflect.MessageType }

func newReplayCodec(procedure string) adapter.Codec[*result] {
	mt, ok := protoreplay.Output(procedure)
	if !ok {
		return nil
	}
	return replayCodec{mt}
}

func (replayCodec) Marshal(r *result) ([]byte, error) {
	if r == nil || r.resp == nil {
		return nil, nil
	}
	msg, ok := r.resp.(proto.Message)
	if !ok {
		return nil, errors.New("twirpadapter: the response is not a protobuf message")
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(msg)
}

func (c replayCodec) Unmarshal(b []byte) (*result, error) {
	msg := c.output.New().Interface()
	if err := proto.Unmarshal(b, msg); err != nil {
		return nil, err
	}
	return &result{resp: msg, header: http.Header{}}, nil
}

// storedError is a twirp.Error as stored: code, message and meta.
type storedError struct {
	Code twirp.ErrorCode   `json:"code"`
	Msg  string            `json:"msg"`
	Meta map[string]string `json:"meta,omitempty"`
}

func (replayCodec) MarshalError(err error) ([]byte, error) {
	twerr, ok := errors.AsType[twirp.Error](err)
	if !ok {
		return nil, errors.New("twirpadapter: not a twirp.Error")
	}
	return json.Marshal(storedError{Code: twerr.Code(), Msg: twerr.Msg(), Meta: twerr.MetaMap()})
}

func (replayCodec) UnmarshalError(b []byte) (error, error) {
	var s storedError
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	twerr := twirp.NewError(s.Code, s.Msg)
	for k, v := range s.Meta {
		twerr = twerr.WithMeta(k, v)
	}
	return twerr, nil
}
