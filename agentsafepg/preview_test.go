package agentsafepg_test

import (
	"testing"

	"github.com/agentsafe/agentsafe/internal/previewrace"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// TestPreviewRace races eight engines, each with its own pool, over
// approvals bound to a preview while a writer flips the previewed state
// (SPEC §14): stale resumes run and consume nothing, no write lands
// against another state than the approved one, runs never overlap, and
// NoEffect gives the approval back.
func TestPreviewRace(t *testing.T) {
	url := migratedURL(t)
	open := func(t *testing.T) store.ApprovalStore { return openApprovals(t, newPool(t, url)) }
	t.Run("race", func(t *testing.T) { previewrace.Race(t, 8, open) })
	t.Run("NoEffect gives the approval back", func(t *testing.T) { previewrace.GivesBack(t, open) })
}
