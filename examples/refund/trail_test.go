package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/internal/auditpg"
	"github.com/agentsafe/agentsafe/internal/pgtest"
)

// TestTheStorysAuditTrailVerifies runs the story with -audit (and with
// -postgres too, where the file is an event sink beside the strict one in
// PostgreSQL) and checks the trails as `agentsafe audit verify` does, with
// the key and kept checkpoints the demo leaves beside the file.
func TestTheStorysAuditTrailVerifies(t *testing.T) {
	t.Run("memory", func(t *testing.T) { checkAuditTrail(t, storeConfig{}) })
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Start(t).URL()
		checkAuditTrail(t, storeConfig{postgres: url})
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		v := auditchain.NewVerifier(nil, nil)
		if err := auditpg.Verify(t.Context(), conn, v); err != nil {
			t.Fatal(err)
		}
		if rep := v.Finish(); rep.Tampered() || len(rep.Chains) != 1 || rep.Records < 40 {
			t.Errorf("the PostgreSQL trail: %+v", rep)
		}
	})
}

func checkAuditTrail(t *testing.T, where storeConfig) {
	path := filepath.Join(t.TempDir(), "trail.jsonl")
	where.audit = path
	if err := run(where, false, false, "", io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path + ".checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kept []auditchain.Checkpoint
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var c struct {
			Chain     string    `json:"chain"`
			Seq       uint64    `json:"chain_seq"`
			Hash      string    `json:"hash"`
			Time      time.Time `json:"time"`
			Signature []byte    `json:"signature"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		h, _ := auditchain.ParseHash(c.Hash)
		kept = append(kept, auditchain.Checkpoint{Chain: c.Chain, Seq: c.Seq, Hash: h, Time: c.Time, Signature: c.Signature})
	}
	v := auditchain.NewVerifier([]ed25519.PublicKey{pub.(ed25519.PublicKey)}, kept)
	if err := auditchain.VerifyFile(path, v); err != nil {
		t.Fatal(err)
	}
	rep := v.Finish()
	if rep.Tampered() || len(rep.Chains) != 1 || len(rep.Unreadable) > 0 || len(kept) == 0 {
		t.Fatalf("the trail does not verify: %+v", rep)
	}
	// Every event of the story, a final one for each requested, and the
	// whole chain attested by the last checkpoint, signed and kept.
	c := rep.Chains[0]
	if c.Records < 40 || c.Attested != c.Last || c.AttestedBy != "signed and kept" {
		t.Errorf("chain %+v", c)
	}
	trail, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, line := range bytes.Split(bytes.TrimSpace(trail), []byte("\n")) {
		var r struct{ Type string }
		json.Unmarshal(line, &r)
		types[r.Type]++
	}
	finals := types["capability.completed"] + types["capability.failed"] + types["capability.cancelled"] + types["capability.replayed"]
	if types["capability.requested"] == 0 || finals != types["capability.requested"] || types["capability.approved"] == 0 {
		t.Errorf("the trail is not the whole story: %v", types)
	}
}
