package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/resultstore"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

func snapshotCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sets repeated
	fs.Var(&sets, "descriptors", "a protobuf descriptor set (`file`); repeat for more")
	registry := fs.String("registry", "", "a registry `file` (JSON) whose entries replace the method options")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 || (len(sets) == 0 && *registry == "") {
		fmt.Fprint(stderr, "agentsafe snapshot: give --descriptors, --registry or both, and no arguments\n"+usage)
		return exitUsage
	}
	var out bytes.Buffer
	if err := snapshot(sets, *registry, &out); err != nil {
		fmt.Fprintf(stderr, "agentsafe snapshot: %v\n", err)
		return exitUsage
	}
	if _, err := stdout.Write(out.Bytes()); err != nil {
		fmt.Fprintf(stderr, "agentsafe snapshot: %v\n", err)
		return exitUsage
	}
	return exitOK
}

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// snapshot builds an engine from the descriptor sets and the registry
// file, exactly as an application's middleware.New would from the same
// declarations, and writes its inventory. No application code runs: the
// policies it names are placeholders that are never asked.
func snapshot(sets []string, registryFile string, w io.Writer) error {
	files, err := readDescriptorSets(sets)
	if err != nil {
		return err
	}
	reg, policies, err := readRegistry(registryFile)
	if err != nil {
		return err
	}
	eng, err := newEngine(files, reg, policies)
	if err != nil {
		return err
	}
	return eng.WriteSnapshot(w)
}

// newEngine builds the engine an application with these declarations
// would build, validating them as middleware.New does; files nil checks
// no registry name against descriptors.
func newEngine(files *protoregistry.Files, reg *middleware.Registry, policies []string) (*middleware.Engine, error) {
	opts := []middleware.Option{
		middleware.WithProtoFiles(files),
		// Stores, so that gated, deduplicated and budgeted capabilities
		// validate; nothing is ever requested, claimed, sealed or spent.
		middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "snapshot", Key: make([]byte, 32)}),
		middleware.WithBudgetStore(budgetstore.NewMemory()),
		middleware.WithLogger(slog.New(slog.DiscardHandler)),
	}
	for _, name := range policies {
		opts = append(opts, middleware.WithPolicy(placeholder(name)))
	}
	return middleware.New(reg, opts...)
}

// placeholder stands for a policy the application installs in code.
type placeholder string

func (p placeholder) Name() string { return string(p) }
func (placeholder) Decide(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) {
	return middleware.PolicyDecision{}, errors.New("agentsafe: a placeholder policy is never asked")
}

// placeholderPreview stands for a capability's Preview, which the
// application sets in code: the inventory records only that there is one.
func placeholderPreview(context.Context, middleware.PreviewInput) (middleware.Preview, error) {
	return middleware.Preview{}, errors.New("agentsafe: a placeholder preview is never called")
}

// readDescriptorSets reads descriptor sets into one set of files. A file's
// imports are found in the sets, or else among the files this command
// links (descriptor.proto, duration.proto, agentsafe/v1/options.proto), so
// a set built without its imports reads too. Nil when there are no sets:
// then the registry names are not checked against any descriptor.
func readDescriptorSets(paths []string) (*protoregistry.Files, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	files := new(protoregistry.Files)
	resolver := resolvers{files, protoregistry.GlobalFiles}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var set descriptorpb.FileDescriptorSet
		if err := proto.Unmarshal(b, &set); err != nil {
			return nil, fmt.Errorf("%s: not a descriptor set: %w", path, err)
		}
		for _, fdp := range set.GetFile() {
			if _, err := files.FindFileByPath(fdp.GetName()); err == nil {
				continue // in an earlier set too
			}
			fd, err := protodesc.NewFile(fdp, resolver)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, fdp.GetName(), err)
			}
			if err := files.RegisterFile(fd); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	return files, nil
}

// resolvers finds a file in the first place that has it.
type resolvers []*protoregistry.Files

func (rs resolvers) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	for _, r := range rs {
		if fd, err := r.FindFileByPath(path); err == nil {
			return fd, nil
		}
	}
	return nil, protoregistry.NotFound
}

func (rs resolvers) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	for _, r := range rs {
		if d, err := r.FindDescriptorByName(name); err == nil {
			return d, nil
		}
	}
	return nil, protoregistry.NotFound
}

// registryJSON is the registry file: the inventory's own form.
type registryJSON struct {
	Version      int              `json:"version,omitempty"`
	Policies     []string         `json:"policies"`
	Capabilities []capabilityJSON `json:"capabilities"`
}

// capabilityJSON is one capability as inventories write it.
type capabilityJSON struct {
	Procedure   string       `json:"procedure"`
	SideEffect  string       `json:"sideEffect"`
	Risk        string       `json:"risk"`
	Idempotent  bool         `json:"idempotent"`
	Streaming   bool         `json:"streaming"`
	Inline      bool         `json:"inline"`
	Timeout     string       `json:"timeout"`
	Retry       retryJSON    `json:"retry"`
	Approval    approvalJSON `json:"approval"`
	Exposure    []string     `json:"exposure"`
	Dedup       string       `json:"dedup"`
	Budgets     []budgetJSON `json:"budgets"`
	Preview     bool         `json:"preview"`
	ToolName    string       `json:"toolName"`
	Description string       `json:"description"`
}

// budgetJSON is one budget of a capability.
type budgetJSON struct {
	Name   string `json:"name"`
	Limit  int64  `json:"limit"`
	Window string `json:"window"`
	Per    string `json:"per"`
	Amount string `json:"amount"`
	Over   string `json:"over"`
}

type retryJSON struct {
	MaxRetries int    `json:"maxRetries"`
	Backoff    string `json:"backoff"`
}

type approvalJSON struct {
	Required  bool   `json:"required"`
	Type      string `json:"type"`
	Quorum    int    `json:"quorum"`
	ExpiresIn string `json:"expiresIn"`
}

// readRegistry reads the registry file ("" for none) into a registry and
// the names of the application's policies.
func readRegistry(path string) (*middleware.Registry, []string, error) {
	if path == "" {
		return nil, nil, nil
	}
	var r registryJSON
	if err := decodeFile(path, &r); err != nil {
		return nil, nil, err
	}
	if r.Version != 0 && r.Version != 1 {
		return nil, nil, fmt.Errorf("%s: version %d; this command reads version 1", path, r.Version)
	}
	reg, err := r.registry(path)
	return reg, r.Policies, err
}

// registry is the file's capabilities as a registry; path names the file
// in problems.
func (r registryJSON) registry(path string) (*middleware.Registry, error) {
	reg := middleware.NewRegistry()
	var problems []error
	for i, c := range r.Capabilities {
		capability, err := c.capability()
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: capabilities[%d] %q: %w", path, i, c.Procedure, err))
			continue
		}
		reg.Register(c.Procedure, capability)
	}
	return reg, errors.Join(problems...)
}

// decodeFile decodes one JSON value from a file, refusing unknown fields
// (a misspelt one would otherwise be silently ignored) and trailing data.
func decodeFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: more than one JSON value", path)
	}
	return nil
}

func (c capabilityJSON) capability() (middleware.Capability, error) {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	dur := func(field, s string) time.Duration {
		if s == "" {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			bad("%s: %v", field, err)
		}
		return d
	}
	out := middleware.Capability{
		Idempotent:  c.Idempotent,
		Streaming:   c.Streaming,
		Inline:      c.Inline,
		Timeout:     dur("timeout", c.Timeout),
		Retry:       middleware.Retry{MaxRetries: c.Retry.MaxRetries, Backoff: dur("retry.backoff", c.Retry.Backoff)},
		Approval:    middleware.Approval{Required: c.Approval.Required, Type: c.Approval.Type, Quorum: c.Approval.Quorum, ExpiresIn: dur("approval.expiresIn", c.Approval.ExpiresIn)},
		Dedup:       dur("dedup", c.Dedup),
		ToolName:    c.ToolName,
		Description: c.Description,
	}
	if c.Preview {
		out.Preview = placeholderPreview
	}
	var ok bool
	if out.SideEffect, ok = parseName(c.SideEffect, middleware.SideEffectNone, middleware.SideEffectExternal); !ok {
		bad("sideEffect %q: want none, read, write, destructive or external", c.SideEffect)
	}
	if c.Risk != "" {
		if out.Risk, ok = parseName(c.Risk, middleware.RiskLow, middleware.RiskCritical); !ok {
			bad("risk %q: want low, medium, high or critical", c.Risk)
		}
	}
	for _, e := range c.Exposure {
		s, ok := parseName(e, middleware.SurfaceRPC, middleware.SurfaceMCP)
		if !ok {
			bad("exposure %q: want rpc, http or mcp", e)
		}
		out.Exposure = append(out.Exposure, s)
	}
	for i, b := range c.Budgets {
		mb := middleware.Budget{Name: b.Name, Limit: b.Limit, Amount: b.Amount, Window: dur(fmt.Sprintf("budgets[%d].window", i), b.Window)}
		switch mb.Per = b.Per; b.Per {
		case "actor", "person", "tenant", "audience":
		default:
			bad("budgets[%d].per %q: want actor, person, tenant or audience", i, b.Per)
		}
		switch mb.Over = b.Over; b.Over {
		case "", "deny", "require_approval":
		default:
			bad("budgets[%d].over %q: want deny or require_approval", i, b.Over)
		}
		out.Budgets = append(out.Budgets, mb)
	}
	return out, errors.Join(problems...)
}

// parseName finds the value between first and last whose String is name.
func parseName[T interface {
	~uint8
	String() string
}](name string, first, last T) (T, bool) {
	for v := first; v <= last; v++ {
		if v.String() == name {
			return v, true
		}
	}
	return 0, false
}
