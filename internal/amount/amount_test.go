package amount_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/internal/amount"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// refundMessage is a request message with integer fields of every kind of
// interest, a nested message, a string and a repeated field.
func refundMessage(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, label *descriptorpb.FieldDescriptorProto_Label) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: label}
	}
	inner := field("refund", 5, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, opt)
	inner.TypeName = proto.String(".amt.v1.Inner")
	optional := field("maybe", 7, descriptorpb.FieldDescriptorProto_TYPE_INT32, opt)
	optional.Proto3Optional, optional.OneofIndex = proto.Bool(true), proto.Int32(0)
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String("amt/v1/amt.proto"), Package: proto.String("amt.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Req"), Field: []*descriptorpb.FieldDescriptorProto{
				field("cents", 1, descriptorpb.FieldDescriptorProto_TYPE_INT64, opt),
				field("big", 2, descriptorpb.FieldDescriptorProto_TYPE_UINT64, opt),
				field("name", 3, descriptorpb.FieldDescriptorProto_TYPE_STRING, opt),
				field("list", 4, descriptorpb.FieldDescriptorProto_TYPE_INT64, rep),
				inner,
				field("small", 6, descriptorpb.FieldDescriptorProto_TYPE_SINT32, opt),
				optional,
			}, OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("_maybe")}}},
			{Name: proto.String("Inner"), Field: []*descriptorpb.FieldDescriptorProto{
				field("cents", 1, descriptorpb.FieldDescriptorProto_TYPE_FIXED64, opt),
			}},
		},
	}
	file, err := protodesc.NewFile(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return file.Messages().ByName("Req")
}

func TestCheckProto(t *testing.T) {
	md := refundMessage(t)
	for _, ok := range []string{"cents", "big", "small", "maybe", "refund.cents"} {
		if err := amount.CheckProto(md, ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for path, want := range map[string]string{
		"nope":        `has no field "nope"`,
		"name":        "is string, not an integer",
		"list":        "is repeated",
		"refund":      "is message, not an integer",
		"cents.more":  "is not a message",
		"refund.nope": `amt.v1.Inner has no field "nope"`,
		"refundCents": `has no field "refundCents"`,
	} {
		if err := amount.CheckProto(md, path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

func TestProto(t *testing.T) {
	md := refundMessage(t)
	m := dynamicpb.NewMessage(md)
	set := func(m protoreflect.Message, name string, v protoreflect.Value) {
		m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(name)), v)
	}
	set(m, "cents", protoreflect.ValueOfInt64(450))
	set(m, "big", protoreflect.ValueOfUint64(1<<63))
	set(m, "small", protoreflect.ValueOfInt32(-3))
	for path, want := range map[string]int64{"cents": 450} {
		if got, err := amount.Proto(m, path); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", path, got, err, want)
		}
	}
	for path, want := range map[string]string{
		"big":          "beyond int64",
		"small":        "negative",
		"maybe":        "missing", // explicit presence, unset
		"refund.cents": "missing", // inside an unset message
	} {
		_, err := amount.Proto(m, path)
		if !errors.Is(err, amount.ErrAmount) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	inner := m.Mutable(md.Fields().ByName("refund")).Message()
	set(inner, "cents", protoreflect.ValueOfUint64(120))
	set(m, "maybe", protoreflect.ValueOfInt32(0))
	for path, want := range map[string]int64{"refund.cents": 120, "maybe": 0} {
		if got, err := amount.Proto(m, path); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", path, got, err, want)
		}
	}
	// A field without presence reads 0 when unset, as protojson reads back.
	empty := dynamicpb.NewMessage(md)
	if got, err := amount.Proto(empty, "cents"); err != nil || got != 0 {
		t.Errorf("unset cents: %d %v, want 0", got, err)
	}
}

func TestPointer(t *testing.T) {
	doc := []byte(`{"a":{"b/c":[10,{"d~e":7}],"x":null},"n":-1,"f":4.5,"e":4.5e2,"z":1.0,"big":9223372036854775808,
		"max":9223372036854775807,"huge":1e300,"s":"5","t":true,"tiny":1e-300}`)
	for p, want := range map[string]int64{"/a/b~1c/0": 10, "/a/b~1c/1/d~0e": 7, "/e": 450, "/z": 1, "/max": 1<<63 - 1} {
		if got, err := amount.JSON(doc, p); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", p, got, err, want)
		}
	}
	for p, want := range map[string]string{
		"/missing":   "missing",
		"/a/b~1c/2":  "missing",
		"/a/b~1c/01": "missing",
		"/a/x":       "null",
		"/n":         "negative",
		"/f":         "not an integer",
		"/big":       "beyond int64",
		"/huge":      "beyond int64",
		"/tiny":      "not an integer",
		"/s":         "a string",
		"/t":         "a boolean",
		"/a":         "an object or array",
		"/n/deeper":  "missing",
		"amount":     "not a JSON Pointer",
	} {
		_, err := amount.JSON(doc, p)
		if !errors.Is(err, amount.ErrAmount) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", p, err, want)
		}
	}
}

func TestCheckPointer(t *testing.T) {
	for p, ok := range map[string]bool{"/a": true, "/a~0b/~1": true, "": false, "a": false, "/a~": false, "/a~2": false} {
		if err := amount.CheckPointer(p); (err == nil) != ok {
			t.Errorf("%q: %v", p, err)
		}
	}
}
