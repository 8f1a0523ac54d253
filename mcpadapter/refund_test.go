package mcpadapter_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// refundFiles returns the descriptor of the refund example's order service
// (examples/proto/orders/v1/orders.proto) with its agentsafe options. The
// generated package is internal to examples/, so the test reads the
// descriptor from the generated source instead of importing it: the
// descriptor protoc-gen-go embedded, byte for byte.
func refundFiles(t *testing.T) *protoregistry.Files {
	t.Helper()
	const src = "../examples/internal/gen/orders/v1/orders.pb.go"
	f, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	obj := f.Scope.Lookup("file_orders_v1_orders_proto_rawDesc")
	if obj == nil {
		t.Fatalf("%s has no raw descriptor constant: regenerated differently?", src)
	}
	var raw []byte
	var concat func(e ast.Expr)
	concat = func(e ast.Expr) {
		switch e := e.(type) {
		case *ast.BinaryExpr:
			concat(e.X)
			concat(e.Y)
		case *ast.BasicLit:
			s, err := strconv.Unquote(e.Value)
			if err != nil {
				t.Fatal(err)
			}
			raw = append(raw, s...)
		default:
			t.Fatalf("unexpected expression %T in the raw descriptor", e)
		}
	}
	concat(obj.Decl.(*ast.ValueSpec).Values[0])
	fdp := new(descriptorpb.FileDescriptorProto)
	if err := proto.Unmarshal(raw, fdp); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(fd); err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRefundTools lists the tools of the refund example's order service,
// whose capabilities are its method options: names, descriptions,
// annotations (one mapping with the engine's hints) and schemas.
func TestRefundTools(t *testing.T) {
	files := refundFiles(t)
	tools := listTools(t, files, nil, "orders.v1.OrderService")

	type hints struct{ readOnly, destructive, idempotent, openWorld bool }
	want := map[string]struct {
		procedure   string
		description string
		hints       hints
		input       []string
		output      []string
	}{
		"get_order": {"/orders.v1.OrderService/GetOrder", "Look up an order by id.", hints{readOnly: true},
			[]string{"orderId"}, []string{"orderId", "customer", "totalCents", "status", "refundedCents"}},
		"refund_order": {"/orders.v1.OrderService/RefundOrder", "Refund an order; large refunds need a manager's approval. " +
			`Budget "refunds": at most a total amountCents of 250000 per person in any 24h; a call past it waits for a person's approval.`, hints{idempotent: true},
			[]string{"orderId", "amountCents", "reason"}, []string{"orderId", "refundedCents", "gatewayReference"}},
		"notify_customer": {"/orders.v1.OrderService/NotifyCustomer", "Email the customer about their order. " +
			`Budget "emails": at most 3 calls per person in any 1h; a call past it is refused (BUDGET_EXCEEDED), saying when to try again.`, hints{openWorld: true},
			[]string{"orderId", "message"}, []string{"messageId"}},
		"export_report": {"/orders.v1.OrderService/ExportReport", "Export the day's order report.", hints{readOnly: true},
			[]string{"day"}, []string{"orders"}},
	}
	var names []string
	for name := range tools {
		names = append(names, name)
	}
	slices.Sort(names)
	// CancelOrder is not exposed on MCP: it is no tool.
	if !slices.Equal(names, []string{"export_report", "get_order", "notify_customer", "refund_order"}) {
		t.Fatalf("tools %v", names)
	}

	eng, err := middleware.New(nil, middleware.WithProtoFiles(files), middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithBudgetStore(budgetstore.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		tool := tools[name]
		if tool.Description != w.description || tool.Meta["agentsafe/procedure"] != w.procedure {
			t.Errorf("%s: description %q, procedure %v", name, tool.Description, tool.Meta["agentsafe/procedure"])
		}
		a := tool.Annotations
		got := hints{a.ReadOnlyHint, a.DestructiveHint != nil && *a.DestructiveHint, a.IdempotentHint, a.OpenWorldHint != nil && *a.OpenWorldHint}
		if got != w.hints || a.DestructiveHint == nil || a.OpenWorldHint == nil {
			t.Errorf("%s: annotations %+v, want %+v with destructive and open-world always explicit (MCP defaults them to true)", name, got, w.hints)
		}
		// One mapping: the annotations are the engine's hints.
		c, _ := adapter.Resolve(eng, w.procedure).Capability()
		if h := c.Hints(); (hints{h.ReadOnly, h.Destructive, h.Idempotent, h.OpenWorld}) != got {
			t.Errorf("%s: annotations %+v differ from the engine's hints %+v", name, got, h)
		}
		if in := propertyNames(t, tool.InputSchema); !slices.Equal(in, sorted(append(w.input, "_approval_id", "_idempotency_key"))) {
			t.Errorf("%s: input properties %v, want %v, _approval_id and _idempotency_key", name, in, w.input)
		}
		if out := propertyNames(t, tool.OutputSchema); !slices.Equal(out, sorted(w.output)) {
			t.Errorf("%s: output properties %v, want %v", name, out, w.output)
		}
	}
	if got := property(t, tools["refund_order"].InputSchema, "amountCents"); got != `{"pattern":"^-?[0-9]+$","type":["integer","string"]}` {
		t.Errorf("refund_order amountCents: %s", got)
	}
	// A refund needs an approval only by condition: no approval type.
	if refund := tools["refund_order"]; refund.Meta["agentsafe/approvalType"] != nil || refund.Meta["agentsafe/sideEffect"] != "write" || refund.Meta["agentsafe/risk"] != "high" {
		t.Errorf("refund_order _meta %v", refund.Meta)
	}
	b, _ := json.Marshal(tools["get_order"].Annotations)
	if string(b) != `{"destructiveHint":false,"idempotentHint":false,"openWorldHint":false,"readOnlyHint":true}` {
		t.Errorf("get_order annotations on the wire: %s", b)
	}
}

func propertyNames(t *testing.T, schema any) []string {
	t.Helper()
	props, _ := schema.(map[string]any)["properties"].(map[string]any)
	var names []string
	for n := range props {
		names = append(names, n)
	}
	return sorted(names)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
