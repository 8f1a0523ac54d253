package digest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	if p := checkUnknown(r); p != nil {
		return "", fmt.Errorf("%w: protobuf message %s", ErrUnbindable, p.render(r.Descriptor().FullName()))
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

// problem is what checkUnknown found, and where. The steps to it are
// appended on the way back up, so a message that binds costs no path.
type problem struct {
	steps []string // innermost first: ".field", "[index]", "[key]", "(type)"
	what  string   // " has unknown fields", ": Any type …"
}

func (p *problem) render(root protoreflect.FullName) string {
	var b strings.Builder
	b.WriteString(string(root))
	for _, s := range slices.Backward(p.steps) {
		b.WriteString(s)
	}
	b.WriteString(p.what)
	return b.String()
}

// checkUnknown finds unknown fields in m or in any message reachable from
// it: nested messages, lists, map values and the payload of an Any.
func checkUnknown(m protoreflect.Message) *problem {
	if len(m.GetUnknown()) > 0 {
		return &problem{what: " has unknown fields"}
	}
	if m.Descriptor().FullName() == "google.protobuf.Any" {
		return checkAny(m)
	}
	var p *problem
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			list := v.List()
			for i := range list.Len() {
				if p = checkUnknown(list.Get(i).Message()); p != nil {
					p.steps = append(p.steps, "["+strconv.Itoa(i)+"]")
					break
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if p = checkUnknown(mv.Message()); p != nil {
					p.steps = append(p.steps, fmt.Sprintf("[%v]", k.Interface()))
				}
				return p == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			p = checkUnknown(v.Message())
		}
		if p != nil {
			p.steps = append(p.steps, "."+string(fd.Name()))
		}
		return p == nil
	})
	return p
}

// checkAny unpacks an Any as protojson will and checks the payload.
func checkAny(m protoreflect.Message) *problem {
	fields := m.Descriptor().Fields()
	url := m.Get(fields.ByNumber(1)).String()
	value := m.Get(fields.ByNumber(2)).Bytes()
	if url == "" {
		return nil // protojson renders an empty Any as {} or refuses it
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return &problem{what: fmt.Sprintf(": Any type %q: %v", url, err)}
	}
	payload := mt.New()
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(value, payload.Interface()); err != nil {
		return &problem{what: fmt.Sprintf(": Any payload: %v", err)}
	}
	p := checkUnknown(payload)
	if p != nil {
		p.steps = append(p.steps, "("+string(mt.Descriptor().FullName())+")")
	}
	return p
}
