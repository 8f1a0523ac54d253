package middleware

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
	"time"
)

// snapshotVersion is the version of the inventory format WriteSnapshot
// writes; readers refuse others.
const snapshotVersion = 1

// snapshot is the inventory WriteSnapshot writes: field order, key names
// and sorting are the format, so that one engine always writes the same
// bytes and a diff of two inventories reads as a change of governance.
type snapshot struct {
	Version      int                  `json:"version"`
	Policies     []string             `json:"policies"`
	Capabilities []snapshotCapability `json:"capabilities"`
}

type snapshotCapability struct {
	Procedure   string           `json:"procedure"`
	SideEffect  string           `json:"sideEffect"`
	Risk        string           `json:"risk"`
	Idempotent  bool             `json:"idempotent"`
	Streaming   bool             `json:"streaming"`
	Inline      bool             `json:"inline"`
	Timeout     string           `json:"timeout"`
	Retry       snapshotRetry    `json:"retry"`
	Approval    snapshotApproval `json:"approval"`
	Exposure    []string         `json:"exposure"`
	Dedup       string           `json:"dedup"`
	Budgets     []snapshotBudget `json:"budgets"`
	Preview     bool             `json:"preview"`
	ToolName    string           `json:"toolName"`
	Description string           `json:"description"`
}

type snapshotBudget struct {
	Name   string `json:"name"`
	Limit  int64  `json:"limit"`
	Window string `json:"window"`
	Per    string `json:"per"`
	Amount string `json:"amount"`
	Over   string `json:"over"`
}

type snapshotRetry struct {
	MaxRetries int    `json:"maxRetries"`
	Backoff    string `json:"backoff"`
}

type snapshotApproval struct {
	Required  bool   `json:"required"`
	Type      string `json:"type"`
	Quorum    int    `json:"quorum"`
	ExpiresIn string `json:"expiresIn"`
}

// WriteSnapshot writes the engine's inventory to w as indented JSON: every
// capability it governs, sorted by procedure, with its defaults resolved
// (timeout, backoff, approval expiry and quorum, the surfaces it is
// exposed on), and the names of its policies in the order they are asked
// ("approval-condition" for [WithApprovalCondition]). The same engine
// always writes the same bytes, so the file can be committed and compared:
// the agentsafe command (cmd/agentsafe) writes the same inventory from
// descriptor sets and a registry file without running the application,
// and its check subcommand classifies every difference between two
// inventories as widening, narrowing or neutral, for a CI drift gate.
//
// Format, version 1: {"version": 1, "policies": [names], "capabilities":
// [{"procedure", "sideEffect", "risk", "idempotent", "streaming",
// "inline", "timeout", "retry": {"maxRetries", "backoff"}, "approval":
// {"required", "type", "quorum", "expiresIn"}, "exposure":
// ["rpc"|"http"|"mcp"], "dedup", "budgets": [{"name", "limit", "window",
// "per", "amount", "over"}], "preview", "toolName", "description"}]};
// budgets sorted by name; "preview" says whether the capability has a
// Preview, which descriptors cannot carry; durations as Go writes them
// ("1m30s"), "0s" for none.
func (e *Engine) WriteSnapshot(w io.Writer) error {
	s := snapshot{Version: snapshotVersion, Policies: []string{}, Capabilities: []snapshotCapability{}}
	for _, np := range e.cfg.policies {
		s.Policies = append(s.Policies, np.name)
	}
	for proc, c := range e.Capabilities() {
		quorum := c.Approval.Quorum
		if quorum == 0 {
			quorum = 1
		}
		exposure := []string{}
		for _, surface := range []Surface{SurfaceRPC, SurfaceHTTP, SurfaceMCP} {
			if c.Exposed(surface) {
				exposure = append(exposure, surface.String())
			}
		}
		s.Capabilities = append(s.Capabilities, snapshotCapability{
			Procedure:   proc,
			SideEffect:  c.SideEffect.String(),
			Risk:        c.Risk.String(),
			Idempotent:  c.Idempotent,
			Streaming:   c.Streaming,
			Inline:      c.Inline,
			Timeout:     duration(c.Timeout),
			Retry:       snapshotRetry{MaxRetries: c.Retry.MaxRetries, Backoff: duration(c.Retry.Backoff)},
			Approval:    snapshotApproval{Required: c.Approval.Required, Type: c.Approval.Type, Quorum: quorum, ExpiresIn: duration(c.Approval.ExpiresIn)},
			Exposure:    exposure,
			Dedup:       duration(c.Dedup),
			Budgets:     snapshotBudgets(c.Budgets),
			Preview:     c.Preview != nil,
			ToolName:    c.ToolName,
			Description: c.Description,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(s) // Capabilities iterates in procedure order
}

func duration(d time.Duration) string { return d.String() }

// snapshotBudgets lists budgets by name, as the inventory writes them.
func snapshotBudgets(bs []Budget) []snapshotBudget {
	out := make([]snapshotBudget, 0, len(bs))
	for _, b := range bs {
		out = append(out, snapshotBudget{Name: b.Name, Limit: b.Limit, Window: duration(b.Window), Per: b.Per, Amount: b.Amount, Over: b.over()})
	}
	slices.SortFunc(out, func(a, b snapshotBudget) int { return strings.Compare(a.Name, b.Name) })
	return out
}
