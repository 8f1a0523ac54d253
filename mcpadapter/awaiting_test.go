package mcpadapter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func consoleLink(id string) string { return "https://console.example/console/approvals/" + id }

// awaitingMeta decodes _meta["agentsafe/awaitingApproval"] as a client
// sees it.
func awaitingMeta(r *mcp.CallToolResult) (map[string]any, bool) {
	m, ok := r.Meta["agentsafe/awaitingApproval"].(map[string]any)
	return m, ok
}

// TestApprovalHintsInToolResults: a call that waits for a human's
// decision says where a person decides it and until when: in the
// envelope, the text, the headers and _meta["agentsafe/awaitingApproval"].
func TestApprovalHintsInToolResults(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*mcpadapter.Bridge, *mcp.ClientOptions) *mcp.ClientSession) {
		f := newFixture(t, fixtureConfig{engineOpts: []middleware.Option{middleware.WithApprovalURL(consoleLink)}, bridgeOpts: []mcpadapter.Option{bearer(agent.ID)}})
		cs := connect(f.bridge, nil)
		args := map[string]any{"id": "refund-1", "amount": 12000}
		check := func(r *mcp.CallToolResult, want middleware.Code) string {
			t.Helper()
			env, _ := mcpadapter.ReadEnvelope(r)
			if env.Error == nil || env.Error.Code != want {
				t.Fatalf("envelope %+v, want %s", env, want)
			}
			id, link := env.ApprovalID, consoleLink(env.ApprovalID)
			rec, err := f.eng.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			expires := rec.ExpiresAt.UTC().Format(time.RFC3339) // the wire's precision
			if env.ApprovalURL != link || env.ExpiresAt.UTC().Format(time.RFC3339) != expires || env.ExpiresAt.IsZero() {
				t.Errorf("%s: the envelope must carry the approval's URL and expiry: %+v", want, env)
			}
			if envelopeText(t, r).ApprovalURL != link {
				t.Errorf("%s: the envelope's text must carry the URL: %v", want, text(r))
			}
			if texts := text(r); len(texts) != 2 || !strings.Contains(texts[1], link) {
				t.Errorf("%s: the text for the model must give the link: %q", want, texts)
			}
			h := mcpadapter.ReadHeader(r)
			if h.Get(adapter.HeaderApprovalURL) != link || h.Get(adapter.HeaderApprovalExpires) != expires {
				t.Errorf("%s: headers %v", want, h)
			}
			m, ok := awaitingMeta(r)
			if !ok || m["approvalId"] != id || m["approvalUrl"] != link || m["expiresAt"] != expires {
				t.Errorf("%s: _meta[agentsafe/awaitingApproval] = %v", want, r.Meta["agentsafe/awaitingApproval"])
			}
			return id
		}
		id := check(callTool(t, cs, "gated", args), middleware.CodeApprovalRequired)
		args["_approval_id"] = id
		check(callTool(t, cs, "gated", args), middleware.CodeApprovalPending)
		if _, err := f.eng.Decide(context.Background(), id, store.Decision{Approve: true, Approver: manager}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []*mcp.CallToolResult{callTool(t, cs, "gated", args), callTool(t, cs, "gated", args)} {
			if _, ok := awaitingMeta(r); ok {
				t.Errorf("only a call that waits for a decision says so: %v", r.Meta)
			}
		}
	})
}
