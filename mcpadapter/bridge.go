package mcpadapter

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Bridge exposes the governed unary procedures of Connect services as MCP
// tools. Build one with [New]; install its tools on an MCP server with
// [Bridge.AddTools], or use [Bridge.NewServer] or [Bridge.Handler]. It is
// safe for concurrent use.
type Bridge struct {
	eng *middleware.Engine
	cfg config
	// resumable: the engine can seal (it has a result key), so calls keep
	// their arguments with the approvals they request, and the
	// approvals_resume tool is listed.
	resumable bool
	byProc    map[string]*tool
	types     interface {
		protoregistry.ExtensionTypeResolver
		protoregistry.MessageTypeResolver
	}
	tools []*tool
	// origins are the trusted origins of WithTrustedOrigins, canonical.
	origins map[string]bool
}

// tool is one governed procedure, listed as an MCP tool.
type tool struct {
	b          *Bridge
	def        *mcp.Tool
	procedure  string
	method     protoreflect.MethodDescriptor
	capability middleware.Capability
	client     *connect.Client[dynamicpb.Message, dynamicpb.Message]
}

// New builds the tools of the procedures of services that eng governs.
//
// h serves the services in process, as the application mounts them: the
// handlers their generated New…ServiceHandler functions return, with the
// agentsafe interceptor (connectadapter) and the service's own interceptors
// installed, usually the application's whole mux. Every tool call is one
// Connect request to h, so authentication, the engine and the handler run
// exactly as for any other caller.
//
// services names the services to expose, by full name
// ("orders.v1.OrderService", the generated …ServiceName constant) or by
// the path New…ServiceHandler returned ("/orders.v1.OrderService/"). Their
// descriptors are looked up in protoregistry.GlobalFiles unless
// [WithProtoFiles] says otherwise.
//
// Only procedures the engine has a capability for become tools: an
// ungoverned procedure never appears.
// Streaming procedures are left out, because a tool call has one input
// and one result.
//
// Every problem fails New, all at once, each naming its procedure: an
// unknown service, a tool name MCP does not allow (see the package
// documentation for how names are made), two procedures under one tool
// name, a request field that collides with the "_approval_id" argument, a
// trusted origin ([WithTrustedOrigins]) that is not an origin.
func New(eng *middleware.Engine, h http.Handler, services []string, opts ...Option) (*Bridge, error) {
	if eng == nil || h == nil {
		return nil, errors.New("mcpadapter: New needs an engine and a handler")
	}
	if len(services) == 0 {
		return nil, errors.New("mcpadapter: New needs at least one service")
	}
	b := &Bridge{cfg: defaultConfig(), eng: eng, byProc: map[string]*tool{}}
	if _, err := adapter.Seal(eng, nil, "probe"); err == nil {
		b.resumable = true
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&b.cfg)
		}
	}
	b.types = protoregistry.GlobalTypes
	if b.cfg.files != protoregistry.GlobalFiles {
		b.types = dynamicpb.NewTypes(b.cfg.files)
	}
	httpClient := &http.Client{Transport: inProcess{h}}
	var problems []error
	b.origins = map[string]bool{}
	for _, o := range b.cfg.trustedOrigins {
		canonical, ok := parseOrigin(o)
		if !ok {
			problems = append(problems, fmt.Errorf("mcpadapter: WithTrustedOrigins: %q is not an origin (scheme://host[:port], no path)", o))
			continue
		}
		b.origins[canonical] = true
	}
	byName := map[string]*tool{}
	for _, name := range services {
		sd, err := b.service(name)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		methods := sd.Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			proc := adapter.Procedure(md)
			c, governed := adapter.Resolve(eng, proc).Capability()
			if !governed || !c.Exposed(middleware.SurfaceMCP) || md.IsStreamingClient() || md.IsStreamingServer() {
				continue
			}
			t, err := b.newTool(httpClient, proc, md, c)
			if err != nil {
				problems = append(problems, err)
				continue
			}
			if prev, dup := byName[t.def.Name]; dup {
				if prev.procedure != proc {
					problems = append(problems, fmt.Errorf("mcpadapter: procedures %s and %s are both listed as tool %q; give one of them another tool_name", prev.procedure, proc, t.def.Name))
				}
				continue
			}
			if t.def.Name == resumeTool && b.resumable {
				problems = append(problems, fmt.Errorf("mcpadapter: %s is listed as tool %q, the name of the bridge's own tool; give it another tool_name", proc, resumeTool))
				continue
			}
			byName[t.def.Name] = t
			b.byProc[proc] = t
			b.tools = append(b.tools, t)
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return b, nil
}

func (b *Bridge) service(name string) (protoreflect.ServiceDescriptor, error) {
	full := protoreflect.FullName(strings.Trim(name, "/"))
	d, err := b.cfg.files.FindDescriptorByName(full)
	if err != nil {
		return nil, fmt.Errorf("mcpadapter: service %q: %w", name, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("mcpadapter: %q is not a service", name)
	}
	return sd, nil
}

func (b *Bridge) newTool(httpClient *http.Client, proc string, md protoreflect.MethodDescriptor, c middleware.Capability) (*tool, error) {
	name := toolName(md, c.ToolName)
	if err := checkToolName(name); err != nil {
		return nil, fmt.Errorf("mcpadapter: %s: %w", proc, err)
	}
	in := md.Input()
	for _, arg := range []string{approvalArgument, keyArgument} {
		if fd := in.Fields().ByJSONName(arg); fd != nil || in.Fields().ByTextName(arg) != nil {
			return nil, fmt.Errorf("mcpadapter: %s: request field %q collides with the %q argument of the tool", proc, arg, arg)
		}
	}
	input := messageSchema(in)
	input.Properties[approvalArgument] = &jsonschema.Schema{Type: "string", Description: approvalArgumentDoc}
	input.Properties[keyArgument] = &jsonschema.Schema{Type: "string", Description: keyArgumentDoc, MinLength: new(1), MaxLength: new(maxKeyArgument)}
	input.PropertyOrder = append(input.PropertyOrder, approvalArgument, keyArgument)
	h := c.Hints()
	t := &tool{
		b:          b,
		procedure:  proc,
		method:     md,
		capability: c,
		def: &mcp.Tool{
			Name:         name,
			Description:  joinSentences(append([]string{c.Description}, budgetNotes(c, in)...)...),
			InputSchema:  input,
			OutputSchema: messageSchema(md.Output()),
			Annotations: &mcp.ToolAnnotations{
				ReadOnlyHint:    h.ReadOnly,
				DestructiveHint: ptr(h.Destructive),
				IdempotentHint:  h.Idempotent,
				OpenWorldHint:   ptr(h.OpenWorld),
			},
			Meta: mcp.Meta{
				metaProcedure:  proc,
				metaSideEffect: c.SideEffect.String(),
				metaRisk:       c.Risk.String(),
			},
		},
	}
	if c.Approval.Required {
		t.def.Meta[metaApprovalType] = c.Approval.Type
	}
	t.client = connect.NewClient[dynamicpb.Message, dynamicpb.Message](httpClient, "http://in-process"+proc,
		connect.WithSchema(md),
		// In process there is no network to save: no gzip.
		connect.WithAcceptCompression("gzip", nil, nil),
		connect.WithResponseInitializer(func(_ connect.Spec, msg any) error {
			m, ok := msg.(*dynamicpb.Message)
			if !ok {
				return fmt.Errorf("mcpadapter: unexpected response type %T", msg)
			}
			*m = *dynamicpb.NewMessage(md.Output())
			return nil
		}),
	)
	return t, nil
}

// AddTools installs the bridge's tools on s, replacing tools of the same
// names, and makes s's tool listings leave out the tools a policy hides
// from the caller who lists them.
func (b *Bridge) AddTools(s *mcp.Server) {
	for _, t := range b.tools {
		s.AddTool(t.def, t.call)
	}
	if b.resumable {
		s.AddTool(resumeToolDef(), b.resume)
	}
	b.filterListing(s)
}

// NewServer returns a new MCP server with the bridge's tools. A nil impl
// names the server "agentsafe".
func (b *Bridge) NewServer(impl *mcp.Implementation, opts *mcp.ServerOptions) *mcp.Server {
	if impl == nil {
		impl = &mcp.Implementation{Name: "agentsafe", Version: "v1"}
	}
	s := mcp.NewServer(impl, opts)
	b.AddTools(s)
	return s
}
