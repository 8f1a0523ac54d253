package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/internal/pgtest"
	"github.com/agentsafe/agentsafe/middleware"
)

// poisoned is an event no text column or JSON string can hold as it is:
// NUL bytes, bytes that are not UTF-8, a 1 MiB error.
func poisoned() middleware.Event {
	e := eventsOf(7)[4] // capability.failed
	e.Error = "declined: \x00\xff\xfe " + strings.Repeat("e", 1<<20)
	e.Comment = "ok\x00"
	e.Actor.ID = "agent-\xc3"
	return e
}

// TestAPoisonedRecordIsStoredEscapedAndVerifies: both durable sinks store
// the poisoned record, escaped and cut, listing what they altered, and
// its chain verifies.
func TestAPoisonedRecordIsStoredEscapedAndVerifies(t *testing.T) {
	events := append(eventsOf(6)[:2], poisoned())
	events = append(events, eventsOf(6)[2:]...)
	wantAltered := []string{"actor_id:escaped", "comment:escaped", "error:escaped", "error:truncated"}
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "trail.jsonl")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		s, err := auditlog.New(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecordBatch(t.Context(), events); err != nil {
			t.Fatal(err)
		}
		s.Close()
		b, _ := os.ReadFile(path)
		var rec struct {
			Error, Comment string
			ActorID        string   `json:"actor_id"`
			Altered        []string `json:"altered"`
		}
		line := bytes.Split(b, []byte("\n"))[2]
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(rec.Error, `declined: \x00\xff\xfe eee`) || len(rec.Error) > 16<<10 || rec.Comment != `ok\x00` || rec.ActorID != `agent-\xc3` ||
			strings.Join(rec.Altered, ",") != strings.Join(wantAltered, ",") {
			t.Errorf("the poisoned record is stored as error %.40q (%d bytes), comment %q, actor %q, altered %q", rec.Error, len(rec.Error), rec.Comment, rec.ActorID, rec.Altered)
		}
		code, out, _ := agentsafe("audit", "verify", "--file", path)
		if code != exitOK || findings(out) != 0 {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Database(t)
		pool, err := pgxpool.New(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if err := agentsafepg.Migrate(t.Context(), pool); err != nil {
			t.Fatal(err)
		}
		s, err := agentsafepg.NewAuditSink(pool, agentsafepg.WithCheckpoints(0, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RecordBatch(t.Context(), events); err != nil {
			t.Fatal(err)
		}
		s.Close(t.Context())
		var errText string
		var altered []string
		if err := pool.QueryRow(t.Context(), `SELECT error, altered FROM agentsafe.audit_events WHERE chain_seq = 3`).Scan(&errText, &altered); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(errText, `declined: \x00\xff\xfe eee`) || strings.Join(altered, ",") != strings.Join(wantAltered, ",") {
			t.Errorf("the poisoned record is stored as error %.40q, altered %q", errText, altered)
		}
		code, out, _ := agentsafe("audit", "verify", "--postgres", url)
		if code != exitOK || findings(out) != 0 {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
}
