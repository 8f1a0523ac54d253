package approvalstore_test

import (
	"testing"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/internal/previewrace"
	"github.com/agentsafe/agentsafe/internal/redistest"
	"github.com/agentsafe/agentsafe/middleware/store"
)

// TestRedisPreviewRace races eight engines, each with its own Redis client,
// over approvals bound to a preview while a writer flips the previewed
// state (SPEC §14): stale resumes run and consume nothing, no write lands
// against another state than the approved one, runs never overlap, and
// NoEffect gives the approval back.
func TestRedisPreviewRace(t *testing.T) {
	srv := redistest.Start(t)
	prefix := newPrefix() // one deployment: every engine's store shares it
	open := func(t *testing.T) store.ApprovalStore {
		s, err := approvalstore.NewRedis(srv.Client(), approvalstore.WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("race", func(t *testing.T) { previewrace.Race(t, 16, open) })
	t.Run("NoEffect gives the approval back", func(t *testing.T) { previewrace.GivesBack(t, open) })
}

// TestMemoryPreviewRace is the same race on the memory store, whose
// engines share one process.
func TestMemoryPreviewRace(t *testing.T) {
	m := approvalstore.NewMemory()
	open := func(*testing.T) store.ApprovalStore { return m }
	t.Run("race", func(t *testing.T) { previewrace.Race(t, 16, open) })
	t.Run("NoEffect gives the approval back", func(t *testing.T) { previewrace.GivesBack(t, open) })
}
