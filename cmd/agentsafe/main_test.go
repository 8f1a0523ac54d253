package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/internal/pgtest"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Main(m), testenv.IgnoreIdleSinkWorkers()) }

// exampleInventory is the refund example's inventory, as its engine
// writes it (examples/refund keeps it current with its own test).
const exampleInventory = "../../examples/refund/agentsafe.json"

// agentsafe runs the command and returns its exit status and output.
func agentsafe(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestTheSnapshotOfTheExampleServiceIsByteStable(t *testing.T) {
	want, err := os.ReadFile(exampleInventory)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"testdata/orders.binpb", "testdata/orders-without-imports.binpb"} {
		t.Run(filepath.Base(set), func(t *testing.T) {
			var runs []string
			for range 3 {
				code, out, errOut := agentsafe("snapshot", "--descriptors", set, "--registry", "testdata/refund.registry.json")
				if code != exitOK {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				runs = append(runs, out)
			}
			if runs[0] != runs[1] || runs[1] != runs[2] {
				t.Fatal("three snapshots of the same input differ")
			}
			// The command, from descriptors and a file, writes what the
			// application's engine writes from its linked code.
			if runs[0] != string(want) {
				t.Errorf("the command's inventory differs from %s, the example engine's:\n%s", exampleInventory, runs[0])
			}
		})
	}
}

func TestARegistryEntryReplacesTheOption(t *testing.T) {
	reg := writeJSON(t, map[string]any{"capabilities": []map[string]any{{
		"procedure": "/orders.v1.OrderService/CancelOrder", "sideEffect": "destructive", "timeout": "5s",
		"approval": map[string]any{"required": true, "quorum": 2}, "exposure": []string{"rpc"},
	}}})
	code, out, errOut := agentsafe("snapshot", "--descriptors", "testdata/orders.binpb", "--registry", reg)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var inv registryJSON
	if err := json.Unmarshal([]byte(out), &inv); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(inv.Capabilities, func(c capabilityJSON) bool { return c.Procedure == "/orders.v1.OrderService/CancelOrder" })
	c := inv.Capabilities[i]
	// As a whole: the option's risk and type are gone with it.
	if c.Timeout != "5s" || c.Approval.Quorum != 2 || c.Approval.Type != "" || c.Risk != "low" || !slices.Equal(c.Exposure, []string{"rpc"}) || len(inv.Capabilities) != 5 {
		t.Errorf("CancelOrder: %+v", c)
	}
}

// A capability with a dedup window needs a result store in an
// application; the command's engine has one, so such a registry snapshots.
func TestADedupWindowSnapshots(t *testing.T) {
	reg := writeJSON(t, map[string]any{"capabilities": []map[string]any{{
		"procedure": "/orders.v1.OrderService/GetOrder", "sideEffect": "read", "dedup": "1m",
	}}})
	code, out, errOut := agentsafe("snapshot", "--descriptors", "testdata/orders.binpb", "--registry", reg)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `"dedup": "1m0s"`) {
		t.Errorf("the inventory has no dedup window:\n%s", out)
	}
}

// base is the example's inventory, decoded, for the edits below.
func base(t *testing.T) registryJSON {
	t.Helper()
	inv, err := readInventory(exampleInventory)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func capability(inv *registryJSON, method string) *capabilityJSON {
	for i := range inv.Capabilities {
		if inv.Capabilities[i].Procedure == "/orders.v1.OrderService/"+method {
			return &inv.Capabilities[i]
		}
	}
	panic("no capability " + method)
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "inventory.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const cancelOrder = "/orders.v1.OrderService/CancelOrder"

// TestCheckClassifiesEveryChange: one edit per kind of change, each
// classified as SPEC §12's drift gate promises; together the cases change
// every field of the inventory (see changedFields), so a field added with
// a rule but no case here fails too.
func TestCheckClassifiesEveryChange(t *testing.T) {
	const (
		getOrder = "/orders.v1.OrderService/GetOrder"
		notify   = "/orders.v1.OrderService/NotifyCustomer"
		refund   = "/orders.v1.OrderService/RefundOrder"
		export   = "/orders.v1.OrderService/ExportReport"
	)
	newCapability := func(method, sideEffect string, exposure ...string) capabilityJSON {
		return capabilityJSON{Procedure: "/orders.v1.OrderService/" + method, SideEffect: sideEffect, Risk: "low",
			Timeout: "30s", Exposure: exposure, Retry: retryJSON{Backoff: "250ms"}, Approval: approvalJSON{Quorum: 1, ExpiresIn: "15m0s"}, Dedup: "0s"}
	}
	remove := func(inv *registryJSON, method string) {
		inv.Capabilities = slices.DeleteFunc(inv.Capabilities, func(c capabilityJSON) bool { return c.Procedure == "/orders.v1.OrderService/"+method })
	}
	covered := map[string]bool{}
	for _, tc := range []struct {
		name     string
		old, new func(*registryJSON) // nil: the example's inventory as it is
		want     []string            // "class procedure what"
	}{
		{name: "no change", want: nil},

		// Widening: a call runs more often, with less review, for longer,
		// on more surfaces, does more, or looks safer to an agent's client.
		{name: "a new write-like capability", new: func(inv *registryJSON) {
			inv.Capabilities = append(inv.Capabilities, newCapability("DeleteOrder", "destructive", "rpc", "http"))
		}, want: []string{"widening /orders.v1.OrderService/DeleteOrder new destructive capability, exposed on [rpc http]"}},
		{name: "a new read exposed on mcp", new: func(inv *registryJSON) {
			inv.Capabilities = append(inv.Capabilities, newCapability("ListOrders", "read", "rpc", "http", "mcp"))
		}, want: []string{"widening /orders.v1.OrderService/ListOrders new read capability, exposed on [rpc http mcp]"}},
		{name: "a capability that became write-like", new: func(inv *registryJSON) { capability(inv, "ExportReport").SideEffect = "external" },
			want: []string{"widening " + export + " side effect read → external: now write-like"}},
		{name: "a destructive capability that became a read", new: func(inv *registryJSON) { capability(inv, "CancelOrder").SideEffect = "read" },
			want: []string{"widening " + cancelOrder + " side effect destructive → read: looks read-only to agents' clients and loses write-like handling"}},
		{name: "a side effect changed among write-like ones", new: func(inv *registryJSON) { capability(inv, "RefundOrder").SideEffect = "destructive" },
			want: []string{"widening " + refund + " side effect write → destructive"}},
		{name: "a lower risk", new: func(inv *registryJSON) { capability(inv, "CancelOrder").Risk = "low" },
			want: []string{"widening " + cancelOrder + " risk critical → low"}},
		{name: "idempotent turned on", new: func(inv *registryJSON) { capability(inv, "CancelOrder").Idempotent = true },
			want: []string{"widening " + cancelOrder + " idempotent turned on"}},
		{name: "streaming turned on or off", new: func(inv *registryJSON) {
			capability(inv, "GetOrder").Streaming = true
		}, old: func(inv *registryJSON) { capability(inv, "ExportReport").Streaming = true },
			want: []string{"widening " + export + " streaming turned off", "widening " + getOrder + " streaming turned on"}},
		{name: "inline turned on", new: func(inv *registryJSON) { capability(inv, "RefundOrder").Inline = true },
			want: []string{"widening " + refund + " inline turned on"}},
		{name: "a longer timeout", new: func(inv *registryJSON) { capability(inv, "GetOrder").Timeout = "1m0s" },
			want: []string{"widening " + getOrder + " timeout 2s → 1m0s"}},
		{name: "an added retry", new: func(inv *registryJSON) {
			c := capability(inv, "NotifyCustomer")
			c.Retry.MaxRetries, c.Idempotent = 1, true // a write retries only when idempotent
		}, want: []string{"widening " + notify + " idempotent turned on", "widening " + notify + " retries 0 → 1"}},
		{name: "a shorter backoff", new: func(inv *registryJSON) { capability(inv, "GetOrder").Retry.Backoff = "10ms" },
			want: []string{"widening " + getOrder + " retry backoff 20ms → 10ms"}},
		{name: "a removed approval", new: func(inv *registryJSON) { capability(inv, "CancelOrder").Approval.Required = false },
			want: []string{"widening " + cancelOrder + " approval no longer required"}},
		{name: "a changed approval type", new: func(inv *registryJSON) { capability(inv, "CancelOrder").Approval.Type = "support" },
			want: []string{"widening " + cancelOrder + ` approval type "manager" → "support"`}},
		{name: "an approval type added", new: func(inv *registryJSON) { capability(inv, "NotifyCustomer").Approval.Type = "manager" },
			want: []string{"widening " + notify + ` approval type "" → "manager"`}},
		{name: "a lower quorum", old: func(inv *registryJSON) { capability(inv, "CancelOrder").Approval.Quorum = 2 },
			want: []string{"widening " + cancelOrder + " approval quorum 2 → 1"}},
		{name: "a longer approval expiry", new: func(inv *registryJSON) { capability(inv, "CancelOrder").Approval.ExpiresIn = "720h0m0s" },
			want: []string{"widening " + cancelOrder + " approval expiry 15m0s → 720h0m0s"}},
		{name: "a new exposure", new: func(inv *registryJSON) {
			c := capability(inv, "CancelOrder")
			c.Exposure = append(c.Exposure, "mcp")
		}, want: []string{"widening " + cancelOrder + " exposed on mcp"}},
		{name: "a dedup window shortened or turned off", old: func(inv *registryJSON) {
			capability(inv, "GetOrder").Dedup = "1m0s"
			capability(inv, "ExportReport").Dedup = "1m0s"
		}, new: func(inv *registryJSON) {
			capability(inv, "GetOrder").Dedup = "10s"
			capability(inv, "ExportReport").Dedup = "0s"
		}, want: []string{"widening " + export + " dedup window 1m0s → off", "widening " + getOrder + " dedup window 1m0s → 10s"}},
		{name: "a removed preview", old: func(inv *registryJSON) { capability(inv, "CancelOrder").Preview = true },
			new:  func(inv *registryJSON) { capability(inv, "CancelOrder").Preview = false },
			want: []string{"widening " + cancelOrder + " preview removed"}},
		{name: "a removed capability that required approval", new: func(inv *registryJSON) { remove(inv, "CancelOrder") },
			want: []string{"widening " + cancelOrder + " capability removed, and its approval with it: if the method is still served, it runs ungoverned"}},
		{name: "a removed write-like capability", new: func(inv *registryJSON) { remove(inv, "NotifyCustomer") },
			want: []string{"widening " + notify + " write-like capability removed: if the method is still served, it runs ungoverned"}},
		{name: "a removed policy", new: func(inv *registryJSON) { inv.Policies = []string{"approval-condition"} },
			want: []string{`widening - policy "refund-limit" removed`}},
		{name: "a budget removed", new: func(inv *registryJSON) { capability(inv, "NotifyCustomer").Budgets = nil },
			want: []string{"widening " + notify + ` budget "emails" removed`}},
		{name: "a budget raised, keyed finer, given a shorter window", new: func(inv *registryJSON) {
			capability(inv, "RefundOrder").Budgets[0].Limit = 300000
			b := &capability(inv, "NotifyCustomer").Budgets[0]
			b.Per, b.Window = "actor", "30m0s"
		}, want: []string{
			"widening " + notify + ` budget "emails" window 1h0m0s → 30m0s`,
			"widening " + notify + ` budget "emails" keyed finer, per person → per actor: each key gets the whole limit`,
			"widening " + refund + ` budget "refunds" limit 250000 → 300000`,
		}},
		{name: "a budget that reads another amount, or escalates instead of denying", new: func(inv *registryJSON) {
			capability(inv, "RefundOrder").Budgets[0].Amount = "refund.amount_cents"
			capability(inv, "NotifyCustomer").Budgets[0].Over = "require_approval"
		}, want: []string{
			"widening " + notify + ` budget "emails" over its limit deny → require_approval: a call past it may now run`,
			"widening " + refund + ` budget "refunds" amount "amount_cents" → "refund.amount_cents": what a call spends is read elsewhere, which cannot be ranked`,
		}},

		// Narrowing: the reverse.
		{name: "narrowing: an added approval and a higher quorum", new: func(inv *registryJSON) {
			c := capability(inv, "RefundOrder")
			c.Approval.Required, c.Approval.Quorum = true, 2
		}, want: []string{"narrowing " + refund + " approval now required", "narrowing " + refund + " approval quorum 1 → 2"}},
		{name: "narrowing: fewer retries, a longer backoff, a shorter timeout", new: func(inv *registryJSON) {
			c := capability(inv, "GetOrder")
			c.Retry.MaxRetries, c.Retry.Backoff, c.Timeout = 0, "1s", "1s"
		}, want: []string{"narrowing " + getOrder + " timeout 2s → 1s", "narrowing " + getOrder + " retries 2 → 0", "narrowing " + getOrder + " retry backoff 20ms → 1s"}},
		{name: "narrowing: a higher risk, idempotent turned off, a shorter expiry", new: func(inv *registryJSON) {
			c := capability(inv, "RefundOrder")
			c.Risk, c.Idempotent, c.Retry.MaxRetries, c.Approval.ExpiresIn = "critical", false, 0, "5m0s"
		}, want: []string{"narrowing " + refund + " risk high → critical", "narrowing " + refund + " idempotent turned off",
			"narrowing " + refund + " retries 1 → 0", "narrowing " + refund + " approval expiry 15m0s → 5m0s"}},
		{name: "narrowing: a preview added", old: func(inv *registryJSON) { capability(inv, "CancelOrder").Preview = false },
			new:  func(inv *registryJSON) { capability(inv, "CancelOrder").Preview = true },
			want: []string{"narrowing " + cancelOrder + " preview added"}},
		{name: "narrowing: inline turned off", old: func(inv *registryJSON) { capability(inv, "GetOrder").Inline = true },
			want: []string{"narrowing " + getOrder + " inline turned off"}},
		{name: "narrowing: a dedup window turned on or longer", old: func(inv *registryJSON) { capability(inv, "GetOrder").Dedup = "10s" },
			new: func(inv *registryJSON) {
				capability(inv, "GetOrder").Dedup = "1m0s"
				capability(inv, "ExportReport").Dedup = "1m0s"
			}, want: []string{"narrowing " + export + " dedup window off → 1m0s", "narrowing " + getOrder + " dedup window 10s → 1m0s"}},
		{name: "narrowing: an exposure, a read capability and a policy", new: func(inv *registryJSON) {
			capability(inv, "ExportReport").Exposure = []string{"rpc", "http"}
			remove(inv, "GetOrder")
			inv.Policies = append(inv.Policies, "business-hours")
		}, want: []string{`narrowing - policy "business-hours" added`,
			"narrowing " + export + " no longer exposed on mcp", "narrowing " + getOrder + " capability removed"}},

		{name: "narrowing: a budget added, lowered, keyed coarser, with a longer window, denying", new: func(inv *registryJSON) {
			c := capability(inv, "CancelOrder")
			c.Budgets = append(c.Budgets, budgetJSON{Name: "cancels", Limit: 5, Window: "24h0m0s", Per: "tenant", Over: "deny"})
			b := &capability(inv, "RefundOrder").Budgets[0]
			b.Limit, b.Per, b.Window, b.Over = 100000, "tenant", "48h0m0s", "deny"
		}, want: []string{
			"narrowing " + cancelOrder + ` budget "cancels" added: 5 per tenant over 24h0m0s`,
			"narrowing " + refund + ` budget "refunds" limit 250000 → 100000`,
			"narrowing " + refund + ` budget "refunds" window 24h0m0s → 48h0m0s`,
			"narrowing " + refund + ` budget "refunds" keyed coarser, per person → per tenant`,
			"narrowing " + refund + ` budget "refunds" over its limit require_approval → deny`,
		}},

		// Neutral.
		{name: "neutral: a description, a tool name, a new read on rpc/http, the policies' order", new: func(inv *registryJSON) {
			c := capability(inv, "GetOrder")
			c.Description, c.ToolName = "Find an order.", "find_order"
			inv.Capabilities = append(inv.Capabilities, newCapability("ListOrders", "read", "rpc", "http"))
			slices.Reverse(inv.Policies)
		}, want: []string{
			"neutral - policies reordered: [approval-condition refund-limit] → [refund-limit approval-condition]",
			`neutral ` + getOrder + ` tool name "" → "find_order"`,
			`neutral ` + getOrder + ` description "Look up an order by id." → "Find an order."`,
			"neutral /orders.v1.OrderService/ListOrders new read capability, exposed on [rpc http]",
		}},
	} {
		old, cur := base(t), base(t)
		if tc.old != nil {
			tc.old(&old)
		}
		if tc.new != nil {
			tc.new(&cur)
		}
		for _, f := range changedFields(old, cur) {
			covered[f] = true
		}
		t.Run(tc.name, func(t *testing.T) {
			changes, err := compare(old, cur)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, c.class.String()+" "+c.procedure+" "+c.what)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			code, _, errOut := agentsafe("check", writeJSON(t, old), writeJSON(t, cur))
			wantCode := exitOK
			if len(tc.want) > 0 && strings.HasPrefix(tc.want[0], "widening") {
				wantCode = exitWidening
			}
			if code != wantCode {
				t.Errorf("check exited %d, want %d (%s)", code, wantCode, errOut)
			}
		})
	}
	// The version is refused when it differs (TestExitCodes), and the
	// procedure is the key: a changed one is a removal and an addition.
	covered["version"], covered["capabilities[].procedure"] = true, true
	for _, f := range inventoryFieldPaths() {
		if !covered[f] {
			t.Errorf("no case above changes the inventory field %q: add one that shows how its rule classifies it", f)
		}
	}
}

func TestCheckPrintsATable(t *testing.T) {
	cur := base(t)
	c := capability(&cur, "CancelOrder")
	c.Exposure = append(c.Exposure, "mcp")
	capability(&cur, "GetOrder").Timeout = "1s"
	code, out, _ := agentsafe("check", exampleInventory, writeJSON(t, cur))
	const want = `CLASS      PROCEDURE                            CHANGE
widening   /orders.v1.OrderService/CancelOrder  exposed on mcp
narrowing  /orders.v1.OrderService/GetOrder     timeout 2s → 1s
1 widening, 1 narrowing, 0 neutral
`
	if code != exitWidening || out != want {
		t.Errorf("exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	widened := base(t)
	capability(&widened, "CancelOrder").Approval.Required = false
	narrowed := base(t)
	capability(&narrowed, "RefundOrder").Approval.Required = true
	var (
		wider       = writeJSON(t, widened)
		narrower    = writeJSON(t, narrowed)
		missing     = filepath.Join(dir, "missing.json")
		notJSON     = file("not.json", "{")
		v2          = file("v2.json", `{"version": 2, "policies": [], "capabilities": []}`)
		typo        = file("typo.json", `{"version": 1, "polices": [], "capabilities": []}`)
		twice       = file("twice.json", `{"version": 1, "capabilities": [{"procedure": "a", "sideEffect": "read", "timeout": "1s"}, {"procedure": "a", "sideEffect": "read", "timeout": "1s"}]}`)
		badTime     = file("badtime.json", `{"version": 1, "capabilities": [{"procedure": "a", "sideEffect": "read", "timeout": "soon"}]}`)
		okTime      = file("oktime.json", `{"version": 1, "capabilities": [{"procedure": "a", "sideEffect": "read", "timeout": "1s"}]}`)
		wrote       = file("wrote.json", `{"capabilities": [{"procedure": "POST /refunds", "sideEffect": "wrote"}]}`)
		misspelt    = file("misspelt.json", `{"capabilities": [{"procedure": "/orders.v1.OrderService/RefundOrdr", "sideEffect": "write"}]}`)
		readRoute   = file("read.json", `{"version": 1, "capabilities": [{"procedure": "POST /refunds", "sideEffect": "read", "timeout": "1s"}]}`)
		wroteInv    = file("wrote-inv.json", `{"version": 1, "capabilities": [{"procedure": "POST /refunds", "sideEffect": "Write", "timeout": "1s"}]}`)
		upperMCP    = file("upper.json", `{"version": 1, "capabilities": [{"procedure": "POST /refunds", "sideEffect": "read", "timeout": "1s", "exposure": ["MCP"]}]}`)
		unsafeRetry = file("retry.json", `{"version": 1, "capabilities": [{"procedure": "POST /refunds", "sideEffect": "write", "timeout": "1s", "retry": {"maxRetries": 1}}]}`)
		negative    = file("negative.json", `{"version": 1, "capabilities": [{"procedure": "POST /refunds", "sideEffect": "read", "timeout": "-1s"}]}`)
		route       = file("route.json", `{"policies": ["limits"], "capabilities": [{"procedure": "POST /refunds", "sideEffect": "write", "exposure": ["http", "mcp"]}]}`)
	)
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"no command", nil, exitUsage},
		{"an unknown command", []string{"inventory"}, exitUsage},
		{"help", []string{"help"}, exitOK},
		{"check: one file", []string{"check", exampleInventory}, exitUsage},
		{"check: three files", []string{"check", exampleInventory, exampleInventory, exampleInventory}, exitUsage},
		{"check: a missing file", []string{"check", missing, exampleInventory}, exitUsage},
		{"check: not JSON", []string{"check", exampleInventory, notJSON}, exitUsage},
		{"check: another version", []string{"check", v2, exampleInventory}, exitUsage},
		{"check: an unknown field", []string{"check", typo, exampleInventory}, exitUsage},
		{"check: a procedure listed twice", []string{"check", twice, exampleInventory}, exitUsage},
		{"check: a duration that is none", []string{"check", okTime, badTime}, exitUsage},
		{"check: a misspelt side effect", []string{"check", readRoute, wroteInv}, exitUsage},
		{"check: a misspelt exposure", []string{"check", readRoute, upperMCP}, exitUsage},
		{"check: a retried write that is not idempotent", []string{"check", unsafeRetry, unsafeRetry}, exitUsage},
		{"check: a negative timeout", []string{"check", negative, readRoute}, exitUsage},
		{"check: the same inventory", []string{"check", exampleInventory, exampleInventory}, exitOK},
		{"check: narrowing only", []string{"check", exampleInventory, narrower}, exitOK},
		{"check: widening", []string{"check", exampleInventory, wider}, exitWidening},
		{"snapshot: nothing to read", []string{"snapshot"}, exitUsage},
		{"snapshot: an unknown flag", []string{"snapshot", "--descriptor", "testdata/orders.binpb"}, exitUsage},
		{"snapshot: a missing set", []string{"snapshot", "--descriptors", missing}, exitUsage},
		{"snapshot: not a descriptor set", []string{"snapshot", "--descriptors", notJSON}, exitUsage},
		{"snapshot: an invalid capability", []string{"snapshot", "--registry", wrote}, exitUsage},
		{"snapshot: a registry name the descriptors lack", []string{"snapshot", "--descriptors", "testdata/orders.binpb", "--registry", misspelt}, exitUsage},
		{"snapshot: descriptors", []string{"snapshot", "--descriptors", "testdata/orders.binpb"}, exitOK},
		{"snapshot: a registry of routes alone", []string{"snapshot", "--registry", route}, exitOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := agentsafe(tc.args...)
			if code != tc.want {
				t.Errorf("agentsafe %s: exit %d, want %d (%s)", strings.Join(tc.args, " "), code, tc.want, errOut)
			}
			if code == exitUsage && errOut == "" {
				t.Error("a usage or input error says what is wrong")
			}
		})
	}
}

// TestCheckResolvesTheDefaultsOfAHandWrittenInventory: a field left out
// means its default, as in a registry file, so it is no change at all.
func TestCheckResolvesTheDefaultsOfAHandWrittenInventory(t *testing.T) {
	cur := base(t)
	c := capability(&cur, "CancelOrder")
	c.Approval.Quorum, c.Approval.ExpiresIn, c.Retry.Backoff, c.Dedup = 0, "", "", ""
	code, out, errOut := agentsafe("check", exampleInventory, writeJSON(t, cur))
	if code != exitOK || out != "0 widening, 0 narrowing, 0 neutral\n" {
		t.Errorf("exit %d (%s), output:\n%s", code, errOut, out)
	}
}

// TestAnInventoryIsARegistryFile: the file an application's engine writes
// (Engine.WriteSnapshot) merges over descriptor sets, or stands alone, and
// reproduces itself.
func TestAnInventoryIsARegistryFile(t *testing.T) {
	want, err := os.ReadFile(exampleInventory)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"snapshot", "--descriptors", "testdata/orders.binpb", "--registry", exampleInventory},
		{"snapshot", "--registry", exampleInventory},
	} {
		if code, out, errOut := agentsafe(args...); code != exitOK || out != string(want) {
			t.Errorf("agentsafe %s: exit %d (%s), inventory:\n%s", strings.Join(args, " "), code, errOut, out)
		}
	}
}
