package nethttpadapter_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/nethttpadapter"
)

// The approval hints travel in the JSON envelope of the body too, for
// clients that read only the body: 428 with "approvalUrl" and "expiresAt"
// (RFC 3339), next to the headers.
func TestApprovalHintsInTheJSONBody(t *testing.T) {
	t.Parallel()
	gated := middleware.Capability{SideEffect: middleware.SideEffectWrite, Approval: middleware.Approval{Required: true}}
	reg := middleware.NewRegistry().Register("refund", gated)
	link := func(id string) string { return "https://console.example/approvals/" + id }
	h := newHarness(t, reg, func(eng *middleware.Engine) http.Handler {
		return nethttpadapter.Wrap(eng, "refund", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	},
		middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithActor(func(context.Context) (middleware.Actor, error) { return middleware.Actor{ID: "agent-7"}, nil }),
		middleware.WithApprovalURL(link))
	resp, err := h.client.Post(h.srv.URL, "application/json", strings.NewReader(`{"amount":42}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var got struct {
		ApprovalID  string `json:"approvalId"`
		ApprovalURL string `json:"approvalUrl"`
		ExpiresAt   string `json:"expiresAt"`
	}
	if resp.StatusCode != http.StatusPreconditionRequired || json.Unmarshal(body, &got) != nil {
		t.Fatalf("status %d, body %s: want 428 with the JSON envelope", resp.StatusCode, body)
	}
	expires, perr := time.Parse(time.RFC3339, got.ExpiresAt)
	if got.ApprovalURL != link(got.ApprovalID) || perr != nil || time.Until(expires) < 14*time.Minute {
		t.Errorf("the JSON envelope must carry approvalUrl and expiresAt: %s", body)
	}
	if resp.Header.Get(adapter.HeaderApprovalURL) != got.ApprovalURL || resp.Header.Get(adapter.HeaderApprovalExpires) == "" {
		t.Errorf("the headers must carry the hints too: %v", resp.Header)
	}
}
