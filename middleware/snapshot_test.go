package middleware_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/resultstore"
)

func TestWriteSnapshotIsTheResolvedInventory(t *testing.T) {
	reg := middleware.NewRegistry().
		Register("POST /refunds", middleware.Capability{SideEffect: middleware.SideEffectWrite, Risk: middleware.RiskHigh, Idempotent: true,
			Retry: middleware.Retry{MaxRetries: 1}, Approval: middleware.Approval{Required: true, Type: "manager", Quorum: 2},
			Exposure: []middleware.Surface{middleware.SurfaceMCP, middleware.SurfaceHTTP}, Description: "Refund <an> order & more",
			Budgets: []middleware.Budget{
				{Name: "refunds", Limit: 200000, Window: 24 * time.Hour, Per: "person", Amount: "/amountCents", Over: "require_approval"},
				{Name: "calls", Limit: 20, Window: time.Minute, Per: "actor"},
			}}).
		Register("/orders.v1.Orders/Get", middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: 2 * time.Second, Dedup: time.Minute, ToolName: "get", Inline: true})
	eng, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithLogger(discard),
		middleware.WithApprovalStore(approvalstore.NewMemory()), middleware.WithResultStore(resultstore.NewMemory()),
		middleware.WithResultKey(middleware.ResultKey{ID: "k", Key: bytes.Repeat([]byte{7}, 32)}), middleware.WithBudgetStore(budgetstore.NewMemory()),
		middleware.WithPolicy(always("refund-limit", middleware.Allow())),
		middleware.WithApprovalCondition(func(context.Context, middleware.ApprovalQuery) (bool, string, error) { return false, "", nil }))
	if err != nil {
		t.Fatal(err)
	}
	var first, second bytes.Buffer
	if err := eng.WriteSnapshot(&first); err != nil {
		t.Fatal(err)
	}
	if err := eng.WriteSnapshot(&second); err != nil {
		t.Fatal(err)
	}
	const want = `{
  "version": 1,
  "policies": [
    "refund-limit",
    "approval-condition"
  ],
  "capabilities": [
    {
      "procedure": "/orders.v1.Orders/Get",
      "sideEffect": "read",
      "risk": "low",
      "idempotent": false,
      "streaming": false,
      "inline": true,
      "timeout": "2s",
      "retry": {
        "maxRetries": 0,
        "backoff": "250ms"
      },
      "approval": {
        "required": false,
        "type": "",
        "quorum": 1,
        "expiresIn": "15m0s"
      },
      "exposure": [
        "rpc",
        "http"
      ],
      "dedup": "1m0s",
      "budgets": [],
      "preview": false,
      "toolName": "get",
      "description": ""
    },
    {
      "procedure": "POST /refunds",
      "sideEffect": "write",
      "risk": "high",
      "idempotent": true,
      "streaming": false,
      "inline": false,
      "timeout": "30s",
      "retry": {
        "maxRetries": 1,
        "backoff": "250ms"
      },
      "approval": {
        "required": true,
        "type": "manager",
        "quorum": 2,
        "expiresIn": "15m0s"
      },
      "exposure": [
        "http",
        "mcp"
      ],
      "dedup": "0s",
      "budgets": [
        {
          "name": "calls",
          "limit": 20,
          "window": "1m0s",
          "per": "actor",
          "amount": "",
          "over": "deny"
        },
        {
          "name": "refunds",
          "limit": 200000,
          "window": "24h0m0s",
          "per": "person",
          "amount": "/amountCents",
          "over": "require_approval"
        }
      ],
      "preview": false,
      "toolName": "",
      "description": "Refund <an> order & more"
    }
  ]
}
`
	if first.String() != want {
		t.Errorf("snapshot:\n%s\nwant:\n%s", first.String(), want)
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Error("two snapshots of one engine differ")
	}
}
