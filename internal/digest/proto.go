package digest

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// protoJSON pins the protojson rendering that Proto canonicalizes. Changing
// any of these changes every protobuf digest, so they are fixed forever:
// lowerCamelCase JSON names (UseProtoNames false), enum names rather than
// numbers, unpopulated fields omitted, no multi-line layout (JCS removes
// whitespace anyway, and protojson varies it on purpose), partial messages
// refused, and Any payloads resolved through [protoregistry.GlobalTypes].
var protoJSON = protojson.MarshalOptions{
	Multiline:         false,
	Indent:            "",
	AllowPartial:      false,
	UseProtoNames:     false,
	UseEnumNumbers:    false,
	EmitUnpopulated:   false,
	EmitDefaultValues: false,
	Resolver:          protoregistry.GlobalTypes,
}

// ProtoJSON returns the pinned protojson rendering of m that [Proto]
// binds, for showing an input to people (approval views, conditions).
func ProtoJSON(m proto.Message) ([]byte, error) { return protoJSON.Marshal(m) }

// Proto returns the digest of a protobuf input to procedure: the pinned
// protojson rendering of m, canonicalized with RFC 8785. Whenever [JSON]
// accepts that rendering, the two agree: Proto(p, m) equals
// JSON(p, protojson.Marshal(m)).
//
// A message with unknown fields anywhere inside it is refused, because
// protojson would drop them and the digest would not cover them; so is a
// nil or invalid message, one missing required fields, and an Any whose type
// is not linked into the program. Errors wrap [ErrUnbindable].
func Proto(procedure string, m proto.Message) (string, error) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return "", fmt.Errorf("%w: nil protobuf message", ErrUnbindable)
	}
	r := m.ProtoReflect()
	if err := checkUnknown(r, string(r.Descriptor().FullName())); err != nil {
		return "", err
	}
	doc, err := protoJSON.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("%w: protojson: %v", ErrUnbindable, err)
	}
	// The message is already decoded, so the client-JSON checks do not
	// apply: protojson writes 64-bit integers as strings, a double of 1e20 is
	// a double by schema, and two fields whose JSON names differ only in case
	// are distinct fields here.
	c, err := checkJSON(doc, rendered)
	if err != nil {
		return "", err
	}
	w := newWriter(procedure, formRPC)
	if err := w.canonical(c); err != nil {
		return "", err
	}
	return w.sum(), nil
}

// checkUnknown refuses unknown fields in m and in every message reachable
// from it, naming the path of the first one found.
func checkUnknown(m protoreflect.Message, at string) error {
	if len(m.GetUnknown()) > 0 {
		return fmt.Errorf("%w: protobuf message %s has unknown fields", ErrUnbindable, at)
	}
	if m.Descriptor().FullName() == "google.protobuf.Any" {
		return checkAny(m, at)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := at + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			list := v.List()
			for i := range list.Len() {
				if err = checkUnknown(list.Get(i).Message(), fmt.Sprintf("%s[%d]", name, i)); err != nil {
					return false
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				err = checkUnknown(mv.Message(), fmt.Sprintf("%s[%v]", name, k.Interface()))
				return err == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			err = checkUnknown(v.Message(), name)
		}
		return err == nil
	})
	return err
}

// checkAny unpacks an Any as protojson will and checks the payload.
func checkAny(m protoreflect.Message, at string) error {
	fields := m.Descriptor().Fields()
	url := m.Get(fields.ByNumber(1)).String()
	value := m.Get(fields.ByNumber(2)).Bytes()
	if url == "" {
		return nil // protojson renders an empty Any as {} or refuses it
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return fmt.Errorf("%w: protobuf message %s: Any type %q: %v", ErrUnbindable, at, url, err)
	}
	payload := mt.New()
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(value, payload.Interface()); err != nil {
		return fmt.Errorf("%w: protobuf message %s: Any payload: %v", ErrUnbindable, at, err)
	}
	return checkUnknown(payload, at+"("+string(mt.Descriptor().FullName())+")")
}
