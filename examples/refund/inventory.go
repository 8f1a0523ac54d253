package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/budgetstore"
	"github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1/ordersv1connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// inventoryFile is the service's committed inventory: what a CI job
// compares a change against (see the README's "Inventory and drift gate").
const inventoryFile = "agentsafe.json"

// inventory prints what the engine governs, then plays the drift gate: a
// change that exposes CancelOrder to agents over MCP, caught by
// `agentsafe check`.
func (a *scriptedAgent) inventory(ctx context.Context, r *report) error {
	var cur bytes.Buffer
	if err := a.s.eng.WriteSnapshot(&cur); err != nil {
		return err
	}
	r.Inventory = cur.Bytes()
	fmt.Fprintf(a.out, "   the inventory (%s), as eng.WriteSnapshot writes it:\n", inventoryFile)
	for line := range strings.Lines(cur.String()) {
		fmt.Fprint(a.out, "   | ", line)
	}

	widened, err := widenedInventory(a.s.eng)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "refund-inventory")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	old, new := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	if err := os.WriteFile(old, cur.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(new, widened, 0o644); err != nil {
		return err
	}
	fmt.Fprint(a.out, "\n   a change exposes CancelOrder on MCP too; the CI job runs\n   $ go run github.com/agentsafe/agentsafe/cmd/agentsafe check old.json new.json\n")
	r.Check, r.CheckExit, err = check(ctx, old, new)
	if err != nil {
		fmt.Fprintf(a.out, "   (could not run it here: %v)\n", err)
		return nil
	}
	for line := range strings.Lines(r.Check) {
		fmt.Fprint(a.out, "   | ", line)
	}
	fmt.Fprintf(a.out, "   exit status %d: the job fails, and a reviewer decides\n", r.CheckExit)
	return nil
}

// widenedInventory is the inventory of the same service after a change
// that exposes CancelOrder on MCP: a registry entry replaces its method
// option, as an edit of orders.proto would.
func widenedInventory(eng *middleware.Engine) ([]byte, error) {
	var cancel, refund middleware.Capability
	for proc, c := range eng.Capabilities() {
		switch proc {
		case ordersv1connect.OrderServiceCancelOrderProcedure:
			cancel = c
		case ordersv1connect.OrderServiceRefundOrderProcedure:
			refund = c
		}
	}
	cancel.Exposure = []middleware.Surface{middleware.SurfaceRPC, middleware.SurfaceHTTP, middleware.SurfaceMCP}
	widened, err := newEngine(middleware.NewRegistry().Register(ordersv1connect.OrderServiceCancelOrderProcedure, cancel), approvalstore.NewMemory(),
		middleware.WithPreview(ordersv1connect.OrderServiceRefundOrderProcedure, refund.Preview), // unchanged
		middleware.WithBudgetStore(budgetstore.NewMemory()), middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = widened.WriteSnapshot(&b)
	return b.Bytes(), err
}

// check runs the drift gate, as a CI job would, and returns its table and
// exit status.
func check(ctx context.Context, old, new string) (string, int, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return "", 0, err
	}
	cmd := exec.CommandContext(ctx, "go", "run", "github.com/agentsafe/agentsafe/cmd/agentsafe", "check", old, new)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok && slices.Contains([]int{0, 1}, exit.ExitCode()) {
		return string(out), exit.ExitCode(), nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return string(out), 0, nil
}
