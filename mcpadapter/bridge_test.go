package mcpadapter_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// namesFile has methods whose names exercise the snake-case rule, and a
// request with a field that collides with the approval argument.
const namesFile = `
name: "names/v1/names.proto" package: "names.v1" syntax: "proto3"
message_type { name: "Req" field { name: "id" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "id" } }
message_type { name: "Clash" field { name: "approval_id" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "_approval_id" } }
service { name: "Names"
  method { name: "GetHTTPStatus" input_type: ".names.v1.Req" output_type: ".names.v1.Req" }
  method { name: "V2Report" input_type: ".names.v1.Req" output_type: ".names.v1.Req" }
  method { name: "Already_Snake" input_type: ".names.v1.Req" output_type: ".names.v1.Req" }
  method { name: "lower" input_type: ".names.v1.Req" output_type: ".names.v1.Req" }
  method { name: "Clashing" input_type: ".names.v1.Clash" output_type: ".names.v1.Req" } }
service { name: "Other"
  method { name: "Lower" input_type: ".names.v1.Req" output_type: ".names.v1.Req" } }
`

func namesFiles(t *testing.T) *protoregistry.Files {
	t.Helper()
	fdp := new(descriptorpb.FileDescriptorProto)
	if err := prototext.Unmarshal([]byte(namesFile), fdp); err != nil {
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

func TestToolNames(t *testing.T) {
	files := namesFiles(t)
	reg := middleware.NewRegistry()
	for _, m := range []string{"GetHTTPStatus", "V2Report", "Already_Snake", "lower"} {
		reg.Register("/names.v1.Names/"+m, readCapability())
	}
	reg.Register("/names.v1.Other/Lower", middleware.Capability{SideEffect: middleware.SideEffectRead, ToolName: "other.lower-v1"})
	tools := listTools(t, files, reg, "names.v1.Names", "/names.v1.Other/")
	var names []string
	for n := range tools {
		names = append(names, n)
	}
	if want := []string{"already_snake", "get_http_status", "lower", "other.lower-v1", "v2_report"}; !slices.Equal(sorted(names), want) {
		t.Errorf("tool names %v, want %v (Clashing is ungoverned and must not appear)", sorted(names), want)
	}
}

func TestToolListOnlyGoverned(t *testing.T) {
	f := newFixture(t, fixtureConfig{})
	cs := connectInMemory(t, f.bridge, nil)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	// Ungoverned has no capability; Stream is governed but streaming.
	if want := []string{"gated", "idempotent_write", "read", "slow", "write"}; !slices.Equal(sorted(names), want) {
		t.Errorf("tools %v, want %v", sorted(names), want)
	}
}

func TestNewRefuses(t *testing.T) {
	files := namesFiles(t)
	build := func(reg *middleware.Registry, services ...string) error {
		t.Helper()
		eng, err := middleware.New(reg, middleware.WithProtoFiles(files))
		if err != nil {
			t.Fatal(err)
		}
		_, err = mcpadapter.New(eng, http.NotFoundHandler(), services, mcpadapter.WithProtoFiles(files))
		return err
	}
	for _, tc := range []struct {
		name     string
		reg      *middleware.Registry
		services []string
		want     []string
	}{
		{"two procedures under one name", middleware.NewRegistry().
			Register("/names.v1.Names/lower", readCapability()).
			Register("/names.v1.Other/Lower", readCapability()),
			[]string{"names.v1.Names", "names.v1.Other"},
			[]string{"/names.v1.Names/lower", "/names.v1.Other/Lower", `"lower"`}},
		{"an override that collides", middleware.NewRegistry().
			Register("/names.v1.Names/V2Report", readCapability()).
			Register("/names.v1.Names/lower", middleware.Capability{SideEffect: middleware.SideEffectRead, ToolName: "v2_report"}),
			[]string{"names.v1.Names"},
			[]string{"/names.v1.Names/V2Report", "/names.v1.Names/lower", `"v2_report"`}},
		{"a name MCP does not allow", middleware.NewRegistry().
			Register("/names.v1.Names/lower", middleware.Capability{SideEffect: middleware.SideEffectRead, ToolName: "refund order!"}),
			[]string{"names.v1.Names"},
			[]string{"/names.v1.Names/lower", `' '`}},
		{"a name too long", middleware.NewRegistry().
			Register("/names.v1.Names/lower", middleware.Capability{SideEffect: middleware.SideEffectRead, ToolName: strings.Repeat("x", 129)}),
			[]string{"names.v1.Names"},
			[]string{"/names.v1.Names/lower", "128"}},
		{"a field named like the approval argument", middleware.NewRegistry().
			Register("/names.v1.Names/Clashing", readCapability()),
			[]string{"names.v1.Names"},
			[]string{"/names.v1.Names/Clashing", "_approval_id"}},
		{"an unknown service", nil, []string{"names.v1.Nope"}, []string{"names.v1.Nope"}},
		{"not a service", nil, []string{"names.v1.Req"}, []string{"names.v1.Req", "not a service"}},
		{"every problem at once", middleware.NewRegistry().
			Register("/names.v1.Names/Clashing", readCapability()).
			Register("/names.v1.Names/lower", middleware.Capability{SideEffect: middleware.SideEffectRead, ToolName: "bad name"}),
			[]string{"names.v1.Names", "names.v1.Nope"},
			[]string{"/names.v1.Names/Clashing", "/names.v1.Names/lower", "names.v1.Nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := build(tc.reg, tc.services...)
			if err == nil {
				t.Fatal("New succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}

	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory()))
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"nil engine": func() error {
			_, err := mcpadapter.New(nil, http.NotFoundHandler(), []string{testv1connect.TestServiceName})
			return err
		},
		"nil handler": func() error { _, err := mcpadapter.New(eng, nil, []string{testv1connect.TestServiceName}); return err },
		"no service":  func() error { _, err := mcpadapter.New(eng, http.NotFoundHandler(), nil); return err },
	} {
		if f() == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}
