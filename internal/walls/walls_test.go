// Package walls holds the test that keeps the tree to the import rules of
// docs/ARCHITECTURE.md: one table of what each part may and may not import,
// checked against `go list -deps`.
package walls

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentsafe/agentsafe"

// frameworks are what the engine and its SPI packages must never link:
// the frameworks adapters translate, and the stores' clients.
var frameworks = []string{
	"connectrpc.com/connect",
	"github.com/twitchtv/twirp",
	"google.golang.org/grpc",
	"github.com/modelcontextprotocol/go-sdk",
	"github.com/redis/go-redis",
	"github.com/jackc/pgx",
}

var adapters = []string{"connectadapter", "twirpadapter", "nethttpadapter", "grpcadapter", "mcpadapter"}

var stores = []string{"approvalstore", "resultstore", "budgetstore", "agentsafepg"}

// wall is one rule: packages matching who must not depend on any package
// matching what (directly or not, per transitive), except those allowed.
type wall struct {
	rule       string
	who        func(pkg string) bool
	what       func(dep string) bool
	allow      func(pkg, dep string) bool
	transitive bool
}

func under(p string) func(string) bool {
	return func(pkg string) bool { return pkg == module+"/"+p || strings.HasPrefix(pkg, module+"/"+p+"/") }
}

func is(p string) func(string) bool { return func(pkg string) bool { return pkg == module+"/"+p } }

func anyOf(ps []string) func(string) bool {
	return func(pkg string) bool { return slices.ContainsFunc(ps, func(p string) bool { return under(p)(pkg) }) }
}

func framework(dep string) bool {
	return slices.ContainsFunc(frameworks, func(f string) bool { return dep == f || strings.HasPrefix(dep, f+"/") })
}

func ours(dep string) bool { return strings.HasPrefix(dep, module+"/") }

var walls = []wall{
	{
		rule: "the engine (middleware, and its SPI packages) imports no framework and no store client",
		who:  func(p string) bool { return under("middleware")(p) }, what: framework, transitive: true,
	},
	{
		rule: "the engine imports no adapter, store, extension or test kit: only its SPI leaf, internal/ and the proto package",
		who:  is("middleware"), what: ours, transitive: false,
		allow: func(_, dep string) bool {
			return under("internal")(dep) || is("middleware/store")(dep) || under("proto")(dep)
		},
	},
	{
		rule: "the store SPI is a leaf: it imports nothing of the module but internal/ids",
		who:  is("middleware/store"), what: ours, transitive: true,
		allow: func(_, dep string) bool { return is("internal/ids")(dep) },
	},
	{
		rule: "the adapter SPI imports the engine, its leaves and internal/ only",
		who:  is("middleware/adapter"), what: ours, transitive: false,
		allow: func(_, dep string) bool {
			return is("middleware")(dep) || is("middleware/store")(dep) || under("internal")(dep) || under("proto")(dep)
		},
	},
	{
		rule: "adapters never import each other; a bridge imports the one adapter it sits on (mcpadapter on connectadapter)",
		who:  anyOf(adapters), what: anyOf(adapters), transitive: false,
		allow: func(pkg, dep string) bool {
			return under("mcpadapter")(pkg) && is("connectadapter")(dep) || strings.HasPrefix(dep, pkg)
		},
	},
	{
		rule: "stores import the store SPI, never the engine or an adapter (agentsafepg's audit sink names the engine's Event, and auditlog's Checkpoint)",
		who:  anyOf(stores), what: ours, transitive: false,
		allow: func(pkg, dep string) bool {
			return is("middleware/store")(dep) || under("internal")(dep) || strings.HasPrefix(dep, pkg) ||
				is("agentsafepg")(pkg) && (is("middleware")(dep) || is("auditlog")(dep))
		},
	},
	{
		rule: "only agentsafepg (and the audit trail's PostgreSQL columns, and the command that verifies them) links pgx: importing approvalstore, resultstore, budgetstore or auditlog never does",
		who: func(p string) bool {
			return !under("agentsafepg")(p) && !under("internal/pgtest")(p) && !under("internal/auditpg")(p) &&
				!under("cmd/agentsafe")(p) && !under("examples")(p)
		},
		what: func(dep string) bool {
			return dep == "github.com/jackc/pgx/v5" || strings.HasPrefix(dep, "github.com/jackc/pgx/v5/")
		},
		transitive: true,
	},
	{
		rule: "extensions see only the engine: no adapter, no store implementation",
		who:  anyOf([]string{"approvalconsole", "agentsafeotel", "agentsafecel"}), what: anyOf(append(slices.Clone(adapters), stores...)), transitive: true,
	},
	{
		rule: "conformance knows the engine and the seams (memory stores as defaults), never a concrete adapter",
		who:  under("conformance"), what: anyOf(adapters), transitive: true,
	},
	{
		rule: "examples and benchmarks use only public API",
		who:  anyOf([]string{"examples", "bench"}), what: under("internal"), transitive: false,
	},
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// packages lists every package of the module (tests are not held to the
// walls: they may use any stores and test kits), with its direct imports
// and all its dependencies.
func packages(t *testing.T) []listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-deps", "-json=ImportPath,Imports,Deps", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if ours(p.ImportPath) {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

func TestWalls(t *testing.T) {
	pkgs := packages(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages of the module; the walls would check nothing", len(pkgs))
	}
	for _, w := range walls {
		t.Run(w.rule, func(t *testing.T) {
			for _, p := range pkgs {
				if !w.who(p.ImportPath) {
					continue
				}
				deps := p.Imports
				if w.transitive {
					deps = p.Deps
				}
				for _, d := range deps {
					if w.what(d) && !(w.allow != nil && w.allow(p.ImportPath, d)) && d != p.ImportPath {
						t.Errorf("%s imports %s: %s", strings.TrimPrefix(p.ImportPath, module+"/"), d, w.rule)
					}
				}
			}
		})
	}
}

// TestWallsCatchABreach shows that a rule can fail: the same check, run on
// an invented package list in which one adapter imports another.
func TestWallsCatchABreach(t *testing.T) {
	breach := []listed{{ImportPath: module + "/twirpadapter", Imports: []string{module + "/connectadapter"}}}
	var caught []string
	for _, w := range walls {
		for _, p := range breach {
			if !w.who(p.ImportPath) {
				continue
			}
			for _, d := range p.Imports {
				if w.what(d) && !(w.allow != nil && w.allow(p.ImportPath, d)) {
					caught = append(caught, fmt.Sprintf("%s → %s", p.ImportPath, d))
				}
			}
		}
	}
	if len(caught) != 1 {
		t.Errorf("twirpadapter importing connectadapter was caught %d times, want once: %v", len(caught), caught)
	}
}
