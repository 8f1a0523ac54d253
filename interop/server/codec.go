package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// strictJSONCodec is connect-go's JSON codec without DiscardUnknown, as the
// suite's reference server uses: a request with a field the server does not
// know fails instead of being silently accepted.
type strictJSONCodec struct{}

func (strictJSONCodec) Name() string { return "json" }

func (c strictJSONCodec) Marshal(msg any) ([]byte, error) { return c.MarshalAppend(nil, msg) }

func (strictJSONCodec) MarshalAppend(b []byte, msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("message type %T is not a proto.Message", msg)
	}
	return protojson.MarshalOptions{}.MarshalAppend(b, m)
}

func (strictJSONCodec) Unmarshal(data []byte, msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("message type %T is not a proto.Message", msg)
	}
	return protojson.Unmarshal(data, m)
}

// MarshalStable is what connect-go uses for Connect GET requests' query
// values, which must be stable.
func (c strictJSONCodec) MarshalStable(msg any) ([]byte, error) {
	data, err := c.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (strictJSONCodec) IsBinary() bool { return false }
