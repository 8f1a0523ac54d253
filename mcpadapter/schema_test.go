package mcpadapter_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	// The well-known types the schema file imports.
	_ "google.golang.org/protobuf/types/known/anypb"
	_ "google.golang.org/protobuf/types/known/durationpb"
	_ "google.golang.org/protobuf/types/known/fieldmaskpb"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/timestamppb"
	_ "google.golang.org/protobuf/types/known/wrapperspb"
)

// schemaFile is a service whose messages use every shape the schema rules
// cover, written as the descriptor protoc would produce for:
//
//	syntax = "proto3";
//	package shop.v1;
//	service Shop { rpc Place(Order) returns (Node); rpc Legacy(Old) returns (Old); }
//	enum Status { STATUS_UNSPECIFIED = 0; STATUS_OPEN = 1; STATUS_CLOSED = 2; }
//	message Item { string sku = 1; int32 quantity = 2; }
//	message Node { string name = 1; repeated Node children = 2; }
//	message Order {
//	  // The order's id.
//	  string order_id = 1; int32 count = 2; uint32 small = 3; int64 cents = 4; uint64 big = 5;
//	  double price = 6; float ratio = 7; bool gift = 8; bytes blob = 9; Status status = 10;
//	  repeated Item items = 11; map<string, int64> tags = 12; map<int32, string> by_number = 13;
//	  Item first = 14; google.protobuf.Timestamp created = 15; google.protobuf.Duration ttl = 16;
//	  google.protobuf.Int64Value limit = 17; google.protobuf.Struct extra = 18;
//	  google.protobuf.Value anything = 19; google.protobuf.Any detail = 20;
//	  google.protobuf.FieldMask mask = 21; oneof payment { string card = 22; string iban = 23; }
//	  optional string note = 24; Node tree = 25; repeated Status history = 26;
//	}
//
// plus a proto2 message with a required field.
const schemaFile = `
name: "shop/v1/shop.proto" package: "shop.v1" syntax: "proto3"
dependency: ["google/protobuf/timestamp.proto", "google/protobuf/duration.proto", "google/protobuf/wrappers.proto",
  "google/protobuf/struct.proto", "google/protobuf/any.proto", "google/protobuf/field_mask.proto"]
enum_type { name: "Status" value { name: "STATUS_UNSPECIFIED" number: 0 } value { name: "STATUS_OPEN" number: 1 } value { name: "STATUS_CLOSED" number: 2 } }
message_type { name: "Item"
  field { name: "sku" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "sku" }
  field { name: "quantity" number: 2 label: LABEL_OPTIONAL type: TYPE_INT32 json_name: "quantity" } }
message_type { name: "Node"
  field { name: "name" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "name" }
  field { name: "children" number: 2 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".shop.v1.Node" json_name: "children" } }
message_type { name: "Order"
  field { name: "order_id" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "orderId" }
  field { name: "count" number: 2 label: LABEL_OPTIONAL type: TYPE_INT32 json_name: "count" }
  field { name: "small" number: 3 label: LABEL_OPTIONAL type: TYPE_UINT32 json_name: "small" }
  field { name: "cents" number: 4 label: LABEL_OPTIONAL type: TYPE_INT64 json_name: "cents" }
  field { name: "big" number: 5 label: LABEL_OPTIONAL type: TYPE_UINT64 json_name: "big" }
  field { name: "price" number: 6 label: LABEL_OPTIONAL type: TYPE_DOUBLE json_name: "price" }
  field { name: "ratio" number: 7 label: LABEL_OPTIONAL type: TYPE_FLOAT json_name: "ratio" }
  field { name: "gift" number: 8 label: LABEL_OPTIONAL type: TYPE_BOOL json_name: "gift" }
  field { name: "blob" number: 9 label: LABEL_OPTIONAL type: TYPE_BYTES json_name: "blob" }
  field { name: "status" number: 10 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".shop.v1.Status" json_name: "status" }
  field { name: "items" number: 11 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".shop.v1.Item" json_name: "items" }
  field { name: "tags" number: 12 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".shop.v1.Order.TagsEntry" json_name: "tags" }
  field { name: "by_number" number: 13 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".shop.v1.Order.ByNumberEntry" json_name: "byNumber" }
  field { name: "first" number: 14 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".shop.v1.Item" json_name: "first" }
  field { name: "created" number: 15 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".google.protobuf.Timestamp" json_name: "created" }
  field { name: "ttl" number: 16 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".google.protobuf.Duration" json_name: "ttl" }
  field { name: "limit" number: 17 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".google.protobuf.Int64Value" json_name: "limit" }
  field { name: "extra" number: 18 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".google.protobuf.Struct" json_name: "extra" }
  field { name: "anything" number: 19 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".google.protobuf.Value" json_name: "anything" }
  field { name: "detail" number: 20 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".google.protobuf.Any" json_name: "detail" }
  field { name: "mask" number: 21 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".google.protobuf.FieldMask" json_name: "mask" }
  field { name: "card" number: 22 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "card" oneof_index: 0 }
  field { name: "iban" number: 23 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "iban" oneof_index: 0 }
  field { name: "note" number: 24 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "note" oneof_index: 1 proto3_optional: true }
  field { name: "tree" number: 25 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".shop.v1.Node" json_name: "tree" }
  field { name: "history" number: 26 label: LABEL_REPEATED type: TYPE_ENUM type_name: ".shop.v1.Status" json_name: "history" }
  nested_type { name: "TagsEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "key" }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_INT64 json_name: "value" } }
  nested_type { name: "ByNumberEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_INT32 json_name: "key" }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "value" } }
  oneof_decl { name: "payment" }
  oneof_decl { name: "_note" } }
service { name: "Shop"
  method { name: "Place" input_type: ".shop.v1.Order" output_type: ".shop.v1.Node" } }
source_code_info { location { path: [4, 2, 2, 0] span: [0, 0, 1] leading_comments: " The order's id.\n" } }
`

const legacyFile = `
name: "shop/v1/legacy.proto" package: "shop.v1" syntax: "proto2"
message_type { name: "Old"
  field { name: "key" number: 1 label: LABEL_REQUIRED type: TYPE_STRING json_name: "key" }
  field { name: "n" number: 2 label: LABEL_OPTIONAL type: TYPE_INT32 json_name: "n" } }
service { name: "Archive"
  method { name: "Keep" input_type: ".shop.v1.Old" output_type: ".shop.v1.Old" } }
`

// shopFiles builds the descriptors of the schema test files.
func shopFiles(t *testing.T) *protoregistry.Files {
	t.Helper()
	files := new(protoregistry.Files)
	for _, src := range []string{schemaFile, legacyFile} {
		fdp := new(descriptorpb.FileDescriptorProto)
		if err := prototext.Unmarshal([]byte(src), fdp); err != nil {
			t.Fatal(err)
		}
		fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
		if err != nil {
			t.Fatal(err)
		}
		if err := files.RegisterFile(fd); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// listTools builds a bridge for services in files and lists its tools with
// the SDK's client, over the in-memory transport and over streamable HTTP,
// which must agree.
func listTools(t *testing.T, files *protoregistry.Files, reg *middleware.Registry, services ...string) map[string]*mcp.Tool {
	t.Helper()
	eng, err := middleware.New(reg, middleware.WithProtoFiles(files), middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithBudgetStore(budgetstore.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := mcpadapter.New(eng, http.NotFoundHandler(), services, mcpadapter.WithProtoFiles(files))
	if err != nil {
		t.Fatal(err)
	}
	list := func(cs *mcp.ClientSession) map[string]*mcp.Tool {
		tools := map[string]*mcp.Tool{}
		for tool, err := range cs.Tools(context.Background(), nil) {
			if err != nil {
				t.Fatal(err)
			}
			tools[tool.Name] = tool
		}
		return tools
	}
	tools := list(connectInMemory(t, b, nil))
	overHTTP := list(connectHTTP(t, b, "", nil))
	if a, b := mustJSON(t, tools), mustJSON(t, overHTTP); a != b {
		t.Errorf("the tool lists differ between transports:\nin memory: %s\nHTTP:      %s", a, b)
	}
	return tools
}

func readCapability() middleware.Capability {
	return middleware.Capability{SideEffect: middleware.SideEffectRead, Exposure: everySurface}
}

// everySurface exposes a capability on MCP too (MCP is opt-in).
var everySurface = []middleware.Surface{middleware.SurfaceRPC, middleware.SurfaceHTTP, middleware.SurfaceMCP}

// property returns the schema of one property, as JSON, for comparisons.
func property(t *testing.T, schema any, name string) string {
	t.Helper()
	props, _ := schema.(map[string]any)["properties"].(map[string]any)
	p, ok := props[name]
	if !ok {
		t.Fatalf("no property %q in %v", name, schema)
	}
	b, _ := json.Marshal(p)
	return string(b)
}

func TestSchema(t *testing.T) {
	files := shopFiles(t)
	reg := middleware.NewRegistry().Register("/shop.v1.Shop/Place", readCapability()).Register("/shop.v1.Archive/Keep", readCapability())
	tools := listTools(t, files, reg, "shop.v1.Shop", "shop.v1.Archive")
	place := tools["place"]
	if place == nil {
		t.Fatalf("tools %v: want place", tools)
	}
	in := place.InputSchema

	t.Run("properties", func(t *testing.T) {
		for name, want := range map[string]string{
			"orderId":  `{"description":"The order's id.","type":"string"}`,
			"count":    `{"maximum":2147483647,"minimum":-2147483648,"type":"integer"}`,
			"small":    `{"maximum":4294967295,"minimum":0,"type":"integer"}`,
			"cents":    `{"pattern":"^-?[0-9]+$","type":["integer","string"]}`,
			"big":      `{"minimum":0,"pattern":"^[0-9]+$","type":["integer","string"]}`,
			"price":    `{"type":["number","string"]}`,
			"gift":     `{"type":"boolean"}`,
			"blob":     `{"contentEncoding":"base64","type":"string"}`,
			"status":   `{"enum":["STATUS_UNSPECIFIED","STATUS_OPEN","STATUS_CLOSED"],"type":"string"}`,
			"history":  `{"items":{"enum":["STATUS_UNSPECIFIED","STATUS_OPEN","STATUS_CLOSED"],"type":"string"},"type":"array"}`,
			"items":    `{"items":{"additionalProperties":false,"properties":{"quantity":{"maximum":2147483647,"minimum":-2147483648,"type":"integer"},"sku":{"type":"string"}},"type":"object"},"type":"array"}`,
			"tags":     `{"additionalProperties":{"pattern":"^-?[0-9]+$","type":["integer","string"]},"type":"object"}`,
			"byNumber": `{"additionalProperties":{"type":"string"},"propertyNames":{"pattern":"^-?[0-9]+$"},"type":"object"}`,
			"created":  `{"description":"An RFC 3339 time in UTC, like \"2024-05-01T12:00:00Z\".","format":"date-time","type":"string"}`,
			"limit":    `{"pattern":"^-?[0-9]+$","type":["integer","string"]}`,
			"extra":    `{"type":"object"}`,
			"anything": `{"description":"Any JSON value."}`,
			"card":     `{"description":"One of card, iban: set at most one.","type":"string"}`,
			"note":     `{"type":"string"}`,
			"tree":     `{"$ref":"#/$defs/shop.v1.Node"}`,
		} {
			if got := property(t, in, name); got != want {
				t.Errorf("%s:\n got %s\nwant %s", name, got, want)
			}
		}
	})

	t.Run("object rules", func(t *testing.T) {
		m := in.(map[string]any)
		if m["type"] != "object" || m["additionalProperties"] != false || m["required"] != nil {
			t.Errorf("input schema: type %v, additionalProperties %v, required %v: want a closed object, nothing required", m["type"], m["additionalProperties"], m["required"])
		}
		if !strings.Contains(property(t, in, "_approval_id"), `"type":"string"`) {
			t.Errorf("the input schema must offer the _approval_id argument")
		}
		defs, _ := m["$defs"].(map[string]any)
		node, _ := json.Marshal(defs["shop.v1.Node"])
		if want := `{"additionalProperties":false,"properties":{"children":{"items":{"$ref":"#/$defs/shop.v1.Node"},"type":"array"},"name":{"type":"string"}},"type":"object"}`; string(node) != want {
			t.Errorf("$defs of the recursive message:\n got %s\nwant %s", node, want)
		}
		out := place.OutputSchema.(map[string]any)
		if _, ok := out["$defs"].(map[string]any)["shop.v1.Node"]; !ok || out["type"] != "object" {
			t.Errorf("output schema of a recursive response %v: want its own $defs", out)
		}
		keep := tools["keep"].InputSchema.(map[string]any)
		if !reflect.DeepEqual(keep["required"], []any{"key"}) {
			t.Errorf("proto2 required fields: required = %v, want [key]", keep["required"])
		}
	})

	// What protojson writes for a full message must validate against the
	// schema, and what it refuses should not.
	t.Run("protojson agrees", func(t *testing.T) {
		md, err := files.FindDescriptorByName("shop.v1.Order")
		if err != nil {
			t.Fatal(err)
		}
		full := `{"orderId":"o-1","count":-3,"small":7,"cents":"-12000","big":"18446744073709551615","price":"NaN","ratio":0.5,
			"gift":true,"blob":"AAE=","status":"STATUS_OPEN","items":[{"sku":"a","quantity":2}],"tags":{"x":"5"},"byNumber":{"4":"four"},
			"first":{"sku":"b"},"created":"2024-05-01T12:00:00Z","ttl":"1.500s","limit":"9","extra":{"k":[1,"v"]},"anything":null,
			"detail":{"@type":"type.googleapis.com/google.protobuf.Duration","value":"2s"},"mask":"orderId,items.sku","iban":"DE00",
			"note":"", "tree":{"name":"root","children":[{"name":"leaf"}]},"history":["STATUS_OPEN","STATUS_CLOSED"]}`
		msg := dynamicpb.NewMessage(md.(protoreflect.MessageDescriptor))
		if err := protojson.Unmarshal([]byte(full), msg); err != nil {
			t.Fatal(err)
		}
		written, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		schema := resolve(t, in)
		if err := validate(schema, written); err != nil {
			t.Errorf("protojson's own output does not validate: %v\n%s", err, written)
		}
		for _, bad := range []string{`{"orderId":1}`, `{"count":1.5}`, `{"count":3000000000}`, `{"status":"STATUS_MAYBE"}`, `{"unknown":1}`, `{"items":[{"sku":"a","colour":"red"}]}`, `{"ttl":"3 seconds"}`, `{"cents":"12e"}`} {
			if validate(schema, []byte(bad)) == nil {
				t.Errorf("the schema accepts %s, which protojson refuses", bad)
			}
			if protojson.Unmarshal([]byte(bad), dynamicpb.NewMessage(md.(protoreflect.MessageDescriptor))) == nil {
				t.Errorf("test bug: protojson accepts %s", bad)
			}
		}
	})
}

func resolve(t *testing.T, schema any) *jsonschema.Resolved {
	t.Helper()
	b, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func validate(r *jsonschema.Resolved, doc []byte) error {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return err
	}
	return r.Validate(v)
}
