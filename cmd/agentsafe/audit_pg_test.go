package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/internal/auditpg"
	"github.com/agentsafe/agentsafe/internal/pgtest"
)

// pgTrail is a trail in PostgreSQL written by chained audit sinks.
type pgTrail struct {
	url    string
	pool   *pgxpool.Pool
	chains []string
	pubkey string // the signer's PEM file, when signed
	kept   string // the kept checkpoints
}

// writePGTrail migrates a fresh database and has chains sinks write
// executions executions each, at once, with a checkpoint every 5 records.
func writePGTrail(t *testing.T, chains, executions int, signed bool) *pgTrail {
	t.Helper()
	url := pgtest.Database(t)
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := agentsafepg.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := &pgTrail{url: url, pool: pool, kept: filepath.Join(dir, "kept.jsonl")}
	opts := []agentsafepg.AuditOption{agentsafepg.WithCheckpoints(5, 0)}
	if signed {
		pub, key, _ := ed25519.GenerateKey(nil)
		tr.pubkey = writePublicKey(t, dir, "signer.pem", pub)
		opts = append(opts, agentsafepg.WithSigner(key))
	}
	var mu sync.Mutex
	var kept []byte
	opts = append(opts, agentsafepg.OnCheckpoint(func(c auditlog.Checkpoint) {
		b, _ := json.Marshal(c)
		mu.Lock()
		kept = append(append(kept, b...), '\n')
		mu.Unlock()
	}))
	var wg sync.WaitGroup
	for c := range chains {
		s, err := agentsafepg.NewAuditSink(pool, opts...)
		if err != nil {
			t.Fatal(err)
		}
		tr.chains = append(tr.chains, s.Chain())
		wg.Go(func() {
			for n := range executions {
				for _, e := range eventsOf(c*1000 + n) {
					if err := s.Record(t.Context(), e); err != nil {
						t.Error(err)
					}
				}
			}
			if err := s.Close(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := os.WriteFile(tr.kept, kept, 0o600); err != nil {
		t.Fatal(err)
	}
	return tr
}

func (tr *pgTrail) verify(t *testing.T, extra ...string) (int, string) {
	t.Helper()
	code, out, errOut := agentsafe(append([]string{"audit", "verify", "--postgres", tr.url}, extra...)...)
	if code == exitUsage {
		t.Logf("stderr: %s", errOut)
	}
	return code, out
}

// exec runs plain SQL, as whoever can write the table would.
func (tr *pgTrail) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := tr.pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// row is the seq of chain's record at chainSeq.
func (tr *pgTrail) row(t *testing.T, chain string, chainSeq int) int64 {
	t.Helper()
	var seq int64
	if err := tr.pool.QueryRow(t.Context(), `SELECT seq FROM agentsafe.audit_events WHERE chain = $1 AND chain_seq = $2`, chain, chainSeq).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	return seq
}

// columns are the columns of a record whose values an UPDATE can change,
// with a value each to set it to (seq and recorded_at are the
// database's, and not part of the record).
var columns = map[string]string{
	"type": "'capability.completed'", "at": "at + interval '1 microsecond'", "execution_id": "'exe_forged'",
	"procedure": "'/x.Y/Z'", "actor_id": "'mallory'", "actor_tenant": "'evil'", "input_digest": "'sha256:00'",
	"side_effect": "'read'", "risk": "'low'", "attempt": "7", "attempts": "7", "previous_error_code": "'OK'",
	"code": "'OK'", "retryable": "NOT coalesce(retryable, false)", "duration": "interval '1 second'", "approval_id": "'apr_forged'",
	"approver_id": "'mallory'", "approver_tenant": "'evil'", "comment": "'fine'", "reason": "'none'",
	"succeeded": "NOT coalesce(succeeded, false)", "error": "'none'", "stack": "'none'", "replay_of": "'exe_0'",
	"chain": "chain || 'x'", "chain_seq": "chain_seq + 1000", "prev": "repeat('0', 63) || '1'", "hash": "repeat('0', 63) || '1'",
}

// TestAnUntouchedTableOfConcurrentSinksVerifies: several sinks writing
// one table at once.
func TestAnUntouchedTableOfConcurrentSinksVerifies(t *testing.T) {
	tr := writePGTrail(t, 4, 6, true)
	code, out := tr.verify(t, "--pubkey", tr.pubkey, "--checkpoint", tr.kept)
	if code != exitOK || !strings.Contains(out, "OK: every chain verified and attested") || strings.Count(out, "signed and kept checkpoint covers") != 4 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestEveryColumnUpdatedIsNamed(t *testing.T) {
	tr := writePGTrail(t, 1, 3, true)
	chain := tr.chains[0]
	// chain_seq 5 is a capability.failed record; 12 a checkpoint.
	var typ string
	tr.pool.QueryRow(t.Context(), `SELECT type FROM agentsafe.audit_events WHERE chain = $1 AND chain_seq = 5`, chain).Scan(&typ)
	if typ != "capability.failed" {
		t.Fatalf("chain_seq 5 is a %s", typ)
	}
	for col, value := range columns {
		t.Run(col, func(t *testing.T) {
			seq := tr.row(t, chain, 5)
			tx, err := tr.pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.WithoutCancel(t.Context()))
			if _, err := tx.Exec(t.Context(), fmt.Sprintf(`UPDATE agentsafe.audit_events SET %s = %s WHERE seq = $1`, col, value), seq); err != nil {
				t.Fatal(err)
			}
			code, out := verifyIn(t, tx)
			what := fmt.Sprintf("chain_seq 5 (row %d)", seq)
			if code != exitTampered || !named(out, chain, "modified", what) || findings(out) != 1 {
				t.Fatalf("exit %d; want 1 and modified %s alone:\n%s", code, what, out)
			}
		})
	}
	t.Run("signature", func(t *testing.T) {
		seq := tr.row(t, chain, 12)
		tr.exec(t, `UPDATE agentsafe.audit_events SET signature = '\x00'::bytea || signature WHERE seq = $1`, seq)
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if what := fmt.Sprintf("chain_seq 7..12 (row %d)", seq); code != exitTampered || !named(out, chain, "bad signature", what) {
			t.Fatalf("exit %d; want 1 and a bad signature at %s:\n%s", code, what, out)
		}
	})
}

// verifyIn runs verify on what tx sees (an UPDATE it has not committed),
// so that each column's test starts from the untouched table.
func verifyIn(t *testing.T, tx pgx.Tx) (int, string) {
	t.Helper()
	v := auditchain.NewVerifier(nil, nil)
	if err := auditpg.Verify(t.Context(), tx, v); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep := v.Finish()
	printReport(&out, "PostgreSQL", "row", rep, false, false)
	if rep.Tampered() {
		return exitTampered, out.String()
	}
	return exitOK, out.String()
}
