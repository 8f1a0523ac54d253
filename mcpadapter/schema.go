package mcpadapter

import (
	"math"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// messageSchema returns the JSON Schema of md as protojson writes and reads
// it. The rules, also listed in the package documentation:
//
//   - a message is an object whose properties are its fields under their
//     JSON names (lowerCamelCase), in declaration order; other properties
//     are not allowed, because protojson rejects unknown fields;
//   - nothing is required, because proto3 has no required fields (a field
//     that is not sent has its default value); only proto2 `required` fields
//     are listed as required, because protojson refuses a message without
//     them;
//   - 32-bit integers are integers within their range; 64-bit integers are
//     an integer or a decimal string (protojson writes them as strings);
//     float and double are a number or a string ("NaN", "Infinity");
//     bytes are a base64 string; enums are strings, one of the value names;
//   - repeated fields are arrays; maps are objects whose property values
//     follow the map's value type;
//   - well-known types take their JSON form: Timestamp an RFC 3339 string,
//     Duration a string like "1.5s", FieldMask a string, wrappers the
//     wrapped scalar, Struct an object, ListValue an array, Value anything,
//     Any an object with "@type";
//   - a message that can contain itself is defined once under $defs and
//     referenced with $ref wherever it appears; every other message is
//     inlined, which is what models read best;
//   - fields of a oneof say so in their description (set at most one), and
//     comments in the descriptor's source info become descriptions.
func messageSchema(md protoreflect.MessageDescriptor) *jsonschema.Schema {
	b := &schemaBuilder{recursive: map[protoreflect.FullName]bool{}}
	root := b.object(md)
	defs := map[string]*jsonschema.Schema{}
	for i := 0; i < len(b.refs); i++ { // building a definition may add refs
		m := b.refs[i]
		defs[string(m.FullName())] = b.object(m)
	}
	if len(defs) > 0 {
		root.Defs = defs
	}
	return root
}

type schemaBuilder struct {
	// recursive caches, per message, whether it contains itself.
	recursive map[protoreflect.FullName]bool
	// refs lists the recursive messages referenced so far, in the order
	// met; each gets one definition under $defs.
	refs []protoreflect.MessageDescriptor
}

// message returns the schema of a message value.
func (b *schemaBuilder) message(md protoreflect.MessageDescriptor) *jsonschema.Schema {
	if s, ok := wellKnown(md); ok {
		return s
	}
	if !b.isRecursive(md) {
		return b.object(md)
	}
	if !slices.ContainsFunc(b.refs, func(m protoreflect.MessageDescriptor) bool { return m.FullName() == md.FullName() }) {
		b.refs = append(b.refs, md)
	}
	return &jsonschema.Schema{Ref: "#/$defs/" + string(md.FullName())}
}

// isRecursive reports whether a value of md can contain another md.
func (b *schemaBuilder) isRecursive(md protoreflect.MessageDescriptor) bool {
	if r, ok := b.recursive[md.FullName()]; ok {
		return r
	}
	seen := map[protoreflect.FullName]bool{}
	var reaches func(m protoreflect.MessageDescriptor) bool
	reaches = func(m protoreflect.MessageDescriptor) bool {
		fields := m.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			next := fd.Message()
			if next == nil {
				continue
			}
			if next.FullName() == md.FullName() {
				return true
			}
			if !seen[next.FullName()] {
				seen[next.FullName()] = true
				if reaches(next) {
					return true
				}
			}
		}
		return false
	}
	r := reaches(md)
	b.recursive[md.FullName()] = r
	return r
}

// object is the schema of a message's fields.
func (b *schemaBuilder) object(md protoreflect.MessageDescriptor) *jsonschema.Schema {
	s := &jsonschema.Schema{
		Type:                 "object",
		Description:          comments(md),
		Properties:           map[string]*jsonschema.Schema{},
		AdditionalProperties: falseSchema(),
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := fd.JSONName()
		p := b.field(fd)
		p.Description = joinSentences(comments(fd), oneofNote(fd), p.Description)
		s.Properties[name] = p
		s.PropertyOrder = append(s.PropertyOrder, name)
		if fd.Cardinality() == protoreflect.Required {
			s.Required = append(s.Required, name)
		}
	}
	return s
}

func (b *schemaBuilder) field(fd protoreflect.FieldDescriptor) *jsonschema.Schema {
	switch {
	case fd.IsMap():
		s := &jsonschema.Schema{Type: "object", AdditionalProperties: b.value(fd.MapValue())}
		switch fd.MapKey().Kind() {
		case protoreflect.StringKind:
		case protoreflect.BoolKind:
			s.PropertyNames = &jsonschema.Schema{Enum: []any{"true", "false"}}
		default:
			s.PropertyNames = &jsonschema.Schema{Pattern: `^-?[0-9]+$`}
		}
		return s
	case fd.IsList():
		return &jsonschema.Schema{Type: "array", Items: b.value(fd)}
	}
	return b.value(fd)
}

// value is the schema of one value of fd's type (one element of a list).
func (b *schemaBuilder) value(fd protoreflect.FieldDescriptor) *jsonschema.Schema {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return &jsonschema.Schema{Type: "boolean"}
	case protoreflect.StringKind:
		return &jsonschema.Schema{Type: "string"}
	case protoreflect.BytesKind:
		return &jsonschema.Schema{Type: "string", ContentEncoding: "base64"}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return &jsonschema.Schema{Type: "integer", Minimum: ptr(float64(math.MinInt32)), Maximum: ptr(float64(math.MaxInt32))}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return &jsonschema.Schema{Type: "integer", Minimum: ptr(0.0), Maximum: ptr(float64(math.MaxUint32))}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return &jsonschema.Schema{Types: []string{"integer", "string"}, Pattern: `^-?[0-9]+$`}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return &jsonschema.Schema{Types: []string{"integer", "string"}, Minimum: ptr(0.0), Pattern: `^[0-9]+$`}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return &jsonschema.Schema{Types: []string{"number", "string"}}
	case protoreflect.EnumKind:
		return enumSchema(fd.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return b.message(fd.Message())
	}
	return &jsonschema.Schema{}
}

func enumSchema(ed protoreflect.EnumDescriptor) *jsonschema.Schema {
	if ed.FullName() == "google.protobuf.NullValue" {
		return &jsonschema.Schema{Type: "null"}
	}
	s := &jsonschema.Schema{Type: "string"}
	values := ed.Values()
	for i := range values.Len() {
		s.Enum = append(s.Enum, string(values.Get(i).Name()))
	}
	return s
}

// wellKnown returns the JSON form of the well-known types protojson treats
// specially.
func wellKnown(md protoreflect.MessageDescriptor) (*jsonschema.Schema, bool) {
	if md.ParentFile() == nil || md.ParentFile().Package() != "google.protobuf" {
		return nil, false
	}
	switch md.Name() {
	case "Timestamp":
		return &jsonschema.Schema{Type: "string", Format: "date-time", Description: `An RFC 3339 time in UTC, like "2024-05-01T12:00:00Z".`}, true
	case "Duration":
		return &jsonschema.Schema{Type: "string", Pattern: `^-?[0-9]+(\.[0-9]{1,9})?s$`, Description: `A duration in seconds, like "1.5s".`}, true
	case "FieldMask":
		return &jsonschema.Schema{Type: "string", Description: "Comma-separated field paths in lowerCamelCase."}, true
	case "Struct":
		return &jsonschema.Schema{Type: "object"}, true
	case "ListValue":
		return &jsonschema.Schema{Type: "array"}, true
	case "Value":
		return &jsonschema.Schema{Description: "Any JSON value."}, true
	case "Any":
		return &jsonschema.Schema{
			Type:        "object",
			Properties:  map[string]*jsonschema.Schema{"@type": {Type: "string"}},
			Required:    []string{"@type"},
			Description: `A message of the type named by "@type", with its fields beside it.`,
		}, true
	case "DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "Int32Value", "UInt32Value", "BoolValue", "StringValue", "BytesValue":
		if fd := md.Fields().ByName("value"); fd != nil {
			return (&schemaBuilder{}).value(fd), true
		}
	}
	return nil, false
}

// comments returns the leading comments of d from its file's source info,
// which generated Go code strips; descriptors built from .proto files keep
// them.
func comments(d protoreflect.Descriptor) string {
	if d.ParentFile() == nil {
		return ""
	}
	loc := d.ParentFile().SourceLocations().ByDescriptor(d)
	return strings.Join(strings.Fields(loc.LeadingComments), " ")
}

func oneofNote(fd protoreflect.FieldDescriptor) string {
	od := fd.ContainingOneof()
	if od == nil || od.IsSynthetic() {
		return ""
	}
	var names []string
	fields := od.Fields()
	for i := range fields.Len() {
		names = append(names, fields.Get(i).JSONName())
	}
	return "One of " + strings.Join(names, ", ") + ": set at most one."
}

func joinSentences(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " ")
}

// falseSchema is the schema no value matches: {"not": {}}, written false.
func falseSchema() *jsonschema.Schema { return &jsonschema.Schema{Not: &jsonschema.Schema{}} }

func ptr[T any](v T) *T { return &v }
