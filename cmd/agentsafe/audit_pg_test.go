package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsafe/agentsafe/agentsafepg"
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
	var kept keeper
	opts = append(opts, agentsafepg.OnCheckpoint(kept.keep))
	var sinks []sink
	for range chains {
		s, err := agentsafepg.NewAuditSink(pool, opts...)
		if err != nil {
			t.Fatal(err)
		}
		tr.chains = append(tr.chains, s.Chain())
		sinks = append(sinks, sink{s.Record, func() error { return s.Close(t.Context()) }})
	}
	recordAll(t, sinks, executions)
	kept.save(t, tr.kept)
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
	"altered": "ARRAY['error:escaped']", "chain": "chain || 'x'", "chain_seq": "chain_seq + 1000", "prev": "repeat('0', 63) || '1'", "hash": "repeat('0', 63) || '1'",
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

func TestADeletedRowIsNamed(t *testing.T) {
	tr := writePGTrail(t, 2, 3, true)
	chain := tr.chains[1]
	tr.exec(t, `DELETE FROM agentsafe.audit_events WHERE chain = $1 AND chain_seq = 9`, chain)
	code, out := tr.verify(t, "--pubkey", tr.pubkey)
	if code != exitTampered || !named(out, chain, "deleted", "chain_seq 9") || findings(out) != 1 {
		t.Fatalf("exit %d; want 1 and deleted chain_seq 9 alone:\n%s", code, out)
	}
}

func TestAnInsertedRowIsNamed(t *testing.T) {
	t.Run("a forged row without a chain", func(t *testing.T) {
		tr := writePGTrail(t, 1, 2, true)
		var seq int64
		if err := tr.pool.QueryRow(t.Context(), `INSERT INTO agentsafe.audit_events (type, at, execution_id, procedure, approver_id)
			VALUES ('capability.approved', now(), 'exe_1', '/orders.v1.OrderService/RefundOrder', 'mallory') RETURNING seq`).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if want := fmt.Sprintf("row seq %d carries no chain", seq); code != exitTampered || !strings.Contains(out, want) {
			t.Fatalf("exit %d; want 1 and %q:\n%s", code, want, out)
		}
	})
	t.Run("a forged row without a chain, numbered before the chain's rows", func(t *testing.T) {
		// Whoever writes the table can choose a row's seq; a row stored
		// after migration 0008 is not legacy whatever its seq. A row
		// stored before it (recorded_at) is legacy: counted, not verified.
		tr := writePGTrail(t, 1, 2, true)
		tr.exec(t, `INSERT INTO agentsafe.audit_events (seq, type, at, execution_id, procedure, approver_id)
			OVERRIDING SYSTEM VALUE VALUES (-5, 'capability.approved', now(), 'exe_1', '/orders.v1.OrderService/RefundOrder', 'mallory')`)
		tr.exec(t, `INSERT INTO agentsafe.audit_events (seq, type, at, execution_id, procedure, recorded_at)
			OVERRIDING SYSTEM VALUE SELECT -6, 'capability.requested', applied_at - interval '1 hour', 'exe_0', '/orders.v1.OrderService/GetOrder',
				applied_at - interval '1 hour' FROM agentsafe.schema_migrations WHERE version = 8`)
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if code != exitTampered || !strings.Contains(out, "row seq -5 carries no chain") || strings.Contains(out, "row seq -6") ||
			!strings.Contains(out, "1 records written before the trail was chained") {
			t.Fatalf("exit %d; want 1, row seq -5 named, and row seq -6 counted as legacy:\n%s", code, out)
		}
	})
	t.Run("a forged row after the chain was closed, its hash computed", func(t *testing.T) {
		tr := writePGTrail(t, 1, 2, true)
		chain := tr.chains[0]
		var seq int64
		if err := tr.pool.QueryRow(t.Context(), `INSERT INTO agentsafe.audit_events (type, at, execution_id, procedure, approver_id, chain, chain_seq, prev, hash)
			SELECT 'capability.approved', at, 'exe_1', '/orders.v1.OrderService/RefundOrder', 'mallory', chain, chain_seq + 1, hash, hash
			FROM agentsafe.audit_events WHERE chain = $1 AND type = 'audit.close' RETURNING seq`, chain).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		tr.rehashFrom(t, chain, 18, nil) // what whoever writes the table can compute
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if want := fmt.Sprintf("chain_seq 18 (row %d)", seq); code != exitTampered || !named(out, chain, "inserted", want) || findings(out) != 1 {
			t.Fatalf("exit %d; want 1 and inserted %s alone:\n%s", code, want, out)
		}
	})
	t.Run("a forged copy of a row, its chain place taken", func(t *testing.T) {
		tr := writePGTrail(t, 1, 2, true)
		chain := tr.chains[0]
		// The unique index is in the way of a second record at one place;
		// whoever can write the table can drop it.
		tr.exec(t, `DROP INDEX agentsafe.audit_events_chain`)
		var seq int64
		if err := tr.pool.QueryRow(t.Context(), `INSERT INTO agentsafe.audit_events (type, at, execution_id, procedure, code, retryable, chain, chain_seq, prev, hash)
			SELECT type, at, execution_id, procedure, 'OK', false, chain, chain_seq, prev, hash FROM agentsafe.audit_events WHERE chain = $1 AND chain_seq = 5
			RETURNING seq`, chain).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if want := fmt.Sprintf("chain_seq 5 (row %d)", seq); code != exitTampered || !named(out, chain, "inserted", want) || findings(out) != 1 {
			t.Fatalf("exit %d; want 1 and inserted %s alone:\n%s", code, want, out)
		}
	})
}

func TestSwappedRowsAreNamed(t *testing.T) {
	for _, pair := range [][2]int{{7, 8}, {3, 16}} {
		t.Run(fmt.Sprint(pair), func(t *testing.T) {
			tr := writePGTrail(t, 2, 3, true)
			chain := tr.chains[0]
			conn, err := tr.pool.Acquire(t.Context()) // the swap's temporary table is the session's
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			a, b := tr.row(t, chain, pair[0]), tr.row(t, chain, pair[1])
			swapOn(t, conn.Conn(), a, b)
			code, out := tr.verify(t, "--pubkey", tr.pubkey)
			if want := fmt.Sprintf("chain_seq %d", pair[0]); code != exitTampered || !named(out, chain, "reordered", want) || findings(out) != 1 {
				t.Fatalf("exit %d; want 1 and reordered %s alone:\n%s", code, want, out)
			}
		})
	}
}

// swapOn exchanges the contents of two rows on conn, as plain SQL does
// it: every column but seq (the insertion order) and recorded_at.
func swapOn(t *testing.T, conn *pgx.Conn, a, b int64) {
	t.Helper()
	ctx := t.Context()
	rows, err := conn.Query(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = 'agentsafe' AND table_name = 'audit_events' AND column_name NOT IN ('seq', 'recorded_at') ORDER BY ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	list := strings.Join(cols, ", ")
	for _, sql := range []string{
		`CREATE TEMP TABLE swap AS SELECT * FROM agentsafe.audit_events WHERE seq IN ($1, $2)`,
		`UPDATE agentsafe.audit_events SET chain_seq = -seq WHERE seq IN ($1, $2)`, // out of the unique index's way
		fmt.Sprintf(`UPDATE agentsafe.audit_events SET (%[1]s) = (SELECT %[1]s FROM swap WHERE seq = $2) WHERE seq = $1`, list),
		fmt.Sprintf(`UPDATE agentsafe.audit_events SET (%[1]s) = (SELECT %[1]s FROM swap WHERE seq = $1) WHERE seq = $2`, list),
		`DROP TABLE swap`,
	} {
		args := []any{a, b}
		if strings.HasPrefix(sql, "DROP") {
			args = nil
		}
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func TestATableCutAfterAKeptCheckpointIsNamed(t *testing.T) {
	tr := writePGTrail(t, 2, 3, true)
	chain := tr.chains[1]
	tr.exec(t, `DELETE FROM agentsafe.audit_events WHERE chain = $1 AND chain_seq > 13`, chain)
	code, out := tr.verify(t, "--pubkey", tr.pubkey, "--checkpoint", tr.kept)
	if code != exitTampered || !named(out, chain, "cut", "after chain_seq 13") || !strings.Contains(out, "a kept checkpoint attests chain_seq 26") {
		t.Fatalf("exit %d; want 1 and cut after chain_seq 13:\n%s", code, out)
	}
	if code, out := tr.verify(t, "--pubkey", tr.pubkey); code != exitOK {
		t.Errorf("without the kept checkpoints (the threat model's limit): exit %d:\n%s", code, out)
	}
}

func TestADeletedChainOfRowsIsNamed(t *testing.T) {
	tr := writePGTrail(t, 2, 3, true)
	chain := tr.chains[1]
	tr.exec(t, `DELETE FROM agentsafe.audit_events WHERE chain = $1`, chain)
	code, out := tr.verify(t, "--pubkey", tr.pubkey, "--checkpoint", tr.kept)
	if code != exitTampered || !named(out, chain, "deleted chain", "chain_seq 1..26") {
		t.Fatalf("exit %d; want 1 and chain %s named deleted:\n%s", code, chain, out)
	}
	if code, out := tr.verify(t, "--pubkey", tr.pubkey); code != exitOK {
		t.Errorf("without the kept checkpoints (the threat model's limit): exit %d:\n%s", code, out)
	}
}

func TestACheckpointRowSignedWithAnotherKeyIsNamed(t *testing.T) {
	tr := writePGTrail(t, 1, 3, true)
	chain := tr.chains[0]
	var h string
	var at time.Time
	seq := tr.row(t, chain, 12)
	if err := tr.pool.QueryRow(t.Context(), `SELECT hash, at FROM agentsafe.audit_events WHERE seq = $1`, seq).Scan(&h, &at); err != nil {
		t.Fatal(err)
	}
	hash, _ := auditchain.ParseHash(h)
	_, mallory, _ := ed25519.GenerateKey(nil)
	tr.exec(t, `UPDATE agentsafe.audit_events SET signature = $2 WHERE seq = $1`, seq, ed25519.Sign(mallory, auditchain.CheckpointMessage(chain, 12, hash, at)))
	code, out := tr.verify(t, "--pubkey", tr.pubkey)
	if want := fmt.Sprintf("chain_seq 7..12 (row %d)", seq); code != exitTampered || !named(out, chain, "bad signature", want) {
		t.Fatalf("exit %d; want 1 and a bad signature at %s:\n%s", code, want, out)
	}
}

// rehashFrom does what someone who can write the table but holds no key
// can: from chain_seq from on, it recomputes prev and hash of every row of
// chain (re-signing checkpoints with resign when not nil).
func (tr *pgTrail) rehashFrom(t *testing.T, chain string, from int, resign ed25519.PrivateKey) {
	t.Helper()
	type row struct {
		seq int64
		rec auditchain.Record
	}
	var rows []row
	var prev auditchain.Hash
	err := auditpg.Read(t.Context(), tr.pool, fmt.Sprintf("chain = '%s'", chain), func(e auditchain.Entry, r *auditchain.Record, err error) {
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq == uint64(from-1) {
			prev = e.Stored
		}
		if e.Seq >= uint64(from) {
			rows = append(rows, row{e.Pos, *r})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		r.rec.SetPrev(prev)
		h := auditchain.Sum(prev, r.rec.AppendCanonical(nil))
		var sig []byte
		if resign != nil && r.rec.String(auditchain.Type) == auditchain.CheckpointType {
			sig = ed25519.Sign(resign, auditchain.CheckpointMessage(chain, uint64(r.rec.Int(auditchain.ChainSeq)), h, r.rec.TimeValue()))
		}
		tr.exec(t, `UPDATE agentsafe.audit_events SET prev = $2, hash = $3, signature = coalesce($4, signature) WHERE seq = $1`, r.seq, prev.String(), h.String(), sig)
		prev = h
	}
}

func TestARowEditWithEveryLaterHashRecomputed(t *testing.T) {
	edit := func(t *testing.T, tr *pgTrail, resign ed25519.PrivateKey) string {
		chain := tr.chains[0]
		tr.exec(t, `UPDATE agentsafe.audit_events SET actor_id = 'someone-else' WHERE chain = $1 AND chain_seq = 9`, chain)
		tr.rehashFrom(t, chain, 9, resign)
		return chain
	}
	t.Run("signed", func(t *testing.T) {
		tr := writePGTrail(t, 2, 3, true)
		_, mallory, _ := ed25519.GenerateKey(nil)
		chain := edit(t, tr, mallory)
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if code != exitTampered || !named(out, chain, "bad signature", "chain_seq 7..12") || !named(out, chain, "attested", "chain_seq 1..6") {
			t.Fatalf("exit %d; want 1, a bad signature naming chain_seq 7..12, and 1..6 attested:\n%s", code, out)
		}
	})
	t.Run("kept", func(t *testing.T) {
		tr := writePGTrail(t, 2, 3, false)
		chain := edit(t, tr, nil)
		code, out := tr.verify(t, "--checkpoint", tr.kept)
		if code != exitTampered || !named(out, chain, "rewritten", "chain_seq 7..12") || !named(out, chain, "attested", "chain_seq 1..6") {
			t.Fatalf("exit %d; want 1, rewritten chain_seq 7..12, and 1..6 attested:\n%s", code, out)
		}
	})
	t.Run("neither", func(t *testing.T) {
		tr := writePGTrail(t, 2, 3, false)
		chain := edit(t, tr, nil)
		code, out := tr.verify(t)
		if code != exitOK || !named(out, chain, "unattested", "chain_seq 1..26") {
			t.Fatalf("exit %d; want 0 and the whole chain unattested:\n%s", code, out)
		}
	})
}

func TestVerifyPostgresInputErrors(t *testing.T) {
	t.Run("no server", func(t *testing.T) {
		code, _, errOut := agentsafe("audit", "verify", "--postgres", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
		if code != exitUsage || !strings.Contains(errOut, "--postgres") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("no schema", func(t *testing.T) {
		code, _, errOut := agentsafe("audit", "verify", "--postgres", pgtest.Database(t))
		if code != exitUsage || !strings.Contains(errOut, "audit_events") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("an unreadable row", func(t *testing.T) {
		tr := writePGTrail(t, 1, 1, true)
		tr.exec(t, `UPDATE agentsafe.audit_events SET at = 'infinity' WHERE chain_seq = 2`)
		code, out, errOut := agentsafe("audit", "verify", "--postgres", tr.url, "--pubkey", tr.pubkey)
		// A time that is not one reads as a modified record: it is in the
		// chain, named, and never a crash.
		if code != exitTampered || !named(out, tr.chains[0], "modified", "chain_seq 2") {
			t.Errorf("exit %d, stderr %q:\n%s", code, errOut, out)
		}
	})
}
