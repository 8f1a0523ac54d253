package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/internal/digest"
	"github.com/agentsafe/agentsafe/middleware"
)

// trail is a JSON Lines audit trail written by auditlog sinks, with what a
// test needs to verify and tamper with it.
type trail struct {
	path   string
	chains []string
	key    ed25519.PrivateKey // the signer, if any
	pubkey string             // its PEM file
	kept   string             // the JSON Lines file of the kept checkpoints
}

// eventsOf is the trail of one execution, with every field an event can
// carry used somewhere.
func eventsOf(n int) []middleware.Event {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	id := fmt.Sprintf("exe_%032x", n)
	base := middleware.Event{Time: at, ExecutionID: id, Procedure: "/orders.v1.OrderService/RefundOrder",
		Actor: middleware.ActorRef{ID: "agent-7", Tenant: "acme"}, InputDigest: "hmac-sha256:" + strings.Repeat("ab", 32),
		SideEffect: middleware.SideEffectExternal, Risk: middleware.RiskHigh}
	with := func(f func(*middleware.Event)) middleware.Event { e := base; f(&e); return e }
	return []middleware.Event{
		with(func(e *middleware.Event) { e.Type = middleware.EventRequested }),
		with(func(e *middleware.Event) {
			e.Type, e.ApprovalID, e.Approver, e.Comment = middleware.EventApprovalConsumed, "apr_1", middleware.ActorRef{ID: "bob", Tenant: "acme"}, "ok, \"the customer\" called"
		}),
		with(func(e *middleware.Event) { e.Type, e.Attempt, e.ApprovalID = middleware.EventStarted, 1, "apr_1" }),
		with(func(e *middleware.Event) {
			e.Type, e.Attempt, e.PreviousErrorCode = middleware.EventRetried, 2, middleware.CodeTimeout
		}),
		with(func(e *middleware.Event) {
			e.Type, e.Code, e.Retryable, e.Attempts, e.Duration, e.Error, e.Reason = middleware.EventFailed, middleware.CodeExecutionFailed, false, 2, 1500*time.Millisecond, "gateway said no\n\tat line 3", "why not"
		}),
		with(func(e *middleware.Event) {
			e.Type, e.Attempt, e.Succeeded, e.Stack = middleware.EventAbandonedResult, 1, true, "goroutine 1"
		}),
		with(func(e *middleware.Event) { e.Type, e.ReplayOf = middleware.EventReplayed, "exe_0" }),
	}
}

// writeTrail writes a trail of chains sinks running at once, each
// recording executions executions, with a checkpoint every 5 records; a
// signer when signed; the checkpoints kept in a file of their own.
func writeTrail(t *testing.T, chains, executions int, signed bool) *trail {
	t.Helper()
	dir := t.TempDir()
	tr := &trail{path: filepath.Join(dir, "trail.jsonl"), kept: filepath.Join(dir, "kept.jsonl")}
	f, err := os.OpenFile(tr.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts := []auditlog.Option{auditlog.WithCheckpoints(5, time.Hour)}
	if signed {
		pub, key, _ := ed25519.GenerateKey(nil)
		tr.key, tr.pubkey = key, writePublicKey(t, dir, "signer.pem", pub)
		opts = append(opts, auditlog.WithSigner(key))
	}
	var kept keeper
	opts = append(opts, auditlog.OnCheckpoint(kept.keep))
	var sinks []sink
	for range chains {
		s, err := auditlog.New(f, opts...)
		if err != nil {
			t.Fatal(err)
		}
		tr.chains = append(tr.chains, s.Chain())
		sinks = append(sinks, sink{s.Record, s.Close})
	}
	recordAll(t, sinks, executions)
	kept.save(t, tr.kept)
	return tr
}

// keeper keeps the checkpoints a sink's hook hands it, as JSON Lines.
type keeper struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (k *keeper) keep(c auditlog.Checkpoint) {
	line, _ := json.Marshal(c)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.b.Write(append(line, '\n'))
}

func (k *keeper) save(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, k.b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// sink is a chained audit sink under test.
type sink struct {
	record func(context.Context, middleware.Event) error
	close  func() error
}

// recordAll has every sink record the trails of executions executions,
// all sinks at once, then closes them.
func recordAll(t *testing.T, sinks []sink, executions int) {
	t.Helper()
	var wg sync.WaitGroup
	for c, s := range sinks {
		wg.Go(func() {
			for n := range executions {
				for _, e := range eventsOf(c*1000 + n) {
					if err := s.record(t.Context(), e); err != nil {
						t.Error(err)
					}
				}
			}
			if err := s.close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func writePublicKey(t *testing.T, dir, name string, pub ed25519.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// lines reads the trail's lines.
func (tr *trail) lines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(tr.path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func (tr *trail) write(t *testing.T, lines []string) {
	t.Helper()
	if err := os.WriteFile(tr.path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// find returns the index of the line of chain at seq.
func find(t *testing.T, lines []string, chain string, seq uint64) int {
	t.Helper()
	for i, l := range lines {
		var m struct {
			Chain string `json:"chain"`
			Seq   uint64 `json:"chain_seq"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Chain == chain && m.Seq == seq {
			return i
		}
	}
	t.Fatalf("no line of chain %s at chain_seq %d", chain, seq)
	return -1
}

// decode reads a line as a map, numbers kept as written.
func decode(t *testing.T, line string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(line))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func encode(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rehash does what someone who can write the trail but holds no key can:
// from line from on, it recomputes prev and hash of every record of
// chain, and re-signs its checkpoints with resign when not nil (else
// leaves their signatures as they were).
func rehash(t *testing.T, lines []string, chain string, from int, resign ed25519.PrivateKey) {
	t.Helper()
	var prev [32]byte
	if from > 0 {
		for i := from - 1; i >= 0; i-- {
			if m := decode(t, lines[i]); m["chain"] == chain {
				h, _ := hex.DecodeString(m["hash"].(string))
				copy(prev[:], h)
				break
			}
		}
	}
	for i := from; i < len(lines); i++ {
		m := decode(t, lines[i])
		if m["chain"] != chain {
			continue
		}
		m["prev"] = hex.EncodeToString(prev[:])
		sig, signed := m["signature"]
		delete(m, "hash")
		delete(m, "signature")
		canonical, err := digest.AppendCanonical(nil, []byte(encode(t, m)))
		if err != nil {
			t.Fatal(err)
		}
		prev = sha256.Sum256(slices.Concat([]byte("agentsafe/audit/v1"), prev[:], canonical))
		m["hash"] = hex.EncodeToString(prev[:])
		if signed {
			m["signature"] = sig
			if resign != nil {
				var seq uint64
				fmt.Sscan(string(m["chain_seq"].(json.Number)), &seq)
				at, _ := time.Parse(auditchain.TimeLayout, m["time"].(string))
				m["signature"] = base64.StdEncoding.EncodeToString(ed25519.Sign(resign, auditchain.CheckpointMessage(chain, seq, prev, at)))
			}
		}
		lines[i] = encode(t, m)
	}
}

// verify runs agentsafe audit verify on the trail with extra arguments.
func (tr *trail) verify(t *testing.T, extra ...string) (int, string) {
	t.Helper()
	code, out, errOut := agentsafe(append([]string{"audit", "verify", "--file", tr.path}, extra...)...)
	if code == exitUsage {
		t.Logf("stderr: %s", errOut)
	}
	return code, out
}

// section is the part of out about chain.
func section(out, chain string) string {
	i := strings.Index(out, "chain "+chain+":")
	if i < 0 {
		return ""
	}
	rest := out[i+1:]
	if j := strings.Index(rest, "\nchain "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// named reports whether the report names a finding of kind at what
// ("chain_seq 7 (line 12)", …) in chain's section.
func named(out, chain, kind, what string) bool {
	re := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(kind) + ` +` + regexp.QuoteMeta(what) + `[:\s]`)
	return re.MatchString(section(out, chain))
}

// findings counts the kinds of finding the report names (the first of
// each kind, not the "… and N more").
func findings(out string) int {
	return len(regexp.MustCompile(`(?m)^  (modified|rewritten|deleted|inserted|reordered|cut|bad signature) +[^… ]`).FindAllString(out, -1))
}

func TestAnUntouchedTrailOfConcurrentInstancesVerifies(t *testing.T) {
	tr := writeTrail(t, 4, 12, true)
	code, out := tr.verify(t, "--pubkey", tr.pubkey)
	if code != exitOK || !strings.Contains(out, "OK: every chain verified and attested") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, c := range tr.chains {
		// 12 executions of 7 records, a checkpoint after every 5, and the
		// last at Close: 84 + 17 records.
		if !strings.Contains(section(out, c), "chain_seq 1..101, 101 records, 17 checkpoints") || !named(out, c, "attested", "chain_seq 1..101") {
			t.Errorf("chain %s is not reported whole and attested:\n%s", c, out)
		}
	}
	// The same trail, checked against its kept checkpoints instead.
	if code, out := tr.verify(t, "--checkpoint", tr.kept); code != exitOK || strings.Count(out, "a kept checkpoint covers them") != 4 {
		t.Errorf("against the kept checkpoints: exit %d:\n%s", code, out)
	}
	// Without a key or kept checkpoints nothing attests it: never reported
	// as verified.
	code, out = tr.verify(t)
	if code != exitOK || !strings.Contains(out, "unattested") || regexp.MustCompile(`(?m)^  attested`).MatchString(out) || !strings.Contains(out, "give --pubkey to check them") {
		t.Errorf("without a key: exit %d:\n%s", code, out)
	}
}

// TestEveryFieldEditedIsNamed changes each member of a record, and of a
// checkpoint, in a text editor's way (the line rewritten, members and
// escapes as encoding/json writes them).
func TestEveryFieldEditedIsNamed(t *testing.T) {
	tr := writeTrail(t, 2, 3, true)
	chain := tr.chains[0]
	orig := tr.lines(t)
	// Each execution writes 7 records, and the sink a checkpoint after
	// every 5: failed is the fifth record, the second checkpoint the
	// twelfth.
	const failedSeq, checkpointSeq = 5, 12
	failed := decode(t, orig[find(t, orig, chain, failedSeq)])
	if failed["type"] != "capability.failed" {
		t.Fatalf("chain_seq %d is a %v", failedSeq, failed["type"])
	}
	cp := decode(t, orig[find(t, orig, chain, checkpointSeq)])
	if cp["type"] != auditchain.CheckpointType {
		t.Fatalf("chain_seq %d is a %v", checkpointSeq, cp["type"])
	}
	other := func(v any) any {
		switch v := v.(type) {
		case string:
			if _, ok := auditchain.ParseHash(v); ok {
				return strings.Repeat("0", 63) + "1"
			}
			if strings.HasPrefix(v, "chn_") {
				return v[:len(v)-1] + "x"
			}
			return v + "!"
		case json.Number:
			if v == "99" {
				return json.Number("98")
			}
			return json.Number("99")
		case bool:
			return !v
		}
		t.Fatalf("a member of type %T", v)
		return nil
	}
	for _, tc := range []struct {
		record map[string]any
		seq    uint64
	}{{failed, failedSeq}, {cp, checkpointSeq}} {
		for name := range tc.record {
			t.Run(fmt.Sprint(tc.record["type"], "/", name), func(t *testing.T) {
				lines := slices.Clone(orig)
				i := find(t, lines, chain, tc.seq)
				m := decode(t, lines[i])
				m[name] = other(m[name])
				lines[i] = encode(t, m)
				tr.write(t, lines)
				code, out := tr.verify(t, "--pubkey", tr.pubkey)
				kind, what := "modified", fmt.Sprintf("chain_seq %d (line %d)", tc.seq, i+1)
				if name == "signature" {
					kind = "bad signature" // over the hash, not in it
					what = fmt.Sprintf("chain_seq 7..%d (line %d)", tc.seq, i+1)
				}
				if code != exitTampered || !named(out, chain, kind, what) {
					t.Fatalf("exit %d; want 1 and %s %s:\n%s", code, kind, what, out)
				}
				if findings(out) != 1 {
					t.Errorf("more is reported than the one edit:\n%s", out)
				}
			})
		}
	}
}

func TestADeletedRecordIsNamed(t *testing.T) {
	tr := writeTrail(t, 2, 3, true)
	chain := tr.chains[1]
	lines := tr.lines(t)
	i := find(t, lines, chain, 9)
	tr.write(t, slices.Delete(lines, i, i+1))
	code, out := tr.verify(t, "--pubkey", tr.pubkey)
	if code != exitTampered || !named(out, chain, "deleted", "chain_seq 9") || findings(out) != 1 {
		t.Fatalf("exit %d; want 1 and deleted chain_seq 9 alone:\n%s", code, out)
	}
}

func TestAnInsertedRecordIsNamed(t *testing.T) {
	tr := writeTrail(t, 2, 3, true)
	chain := tr.chains[0]
	orig := tr.lines(t)
	t.Run("a forged copy of a record", func(t *testing.T) {
		lines := slices.Clone(orig)
		i := find(t, lines, chain, 5) // capability.failed
		forged := strings.Replace(lines[i], `"code":"EXECUTION_FAILED"`, `"code":"OK"`, 1)
		if forged == lines[i] {
			t.Fatal("the edit changed nothing")
		}
		lines = slices.Insert(lines, i+1, forged)
		tr.write(t, lines)
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if want := fmt.Sprintf("chain_seq 5 (line %d)", i+2); code != exitTampered || !named(out, chain, "inserted", want) || findings(out) != 1 {
			t.Fatalf("exit %d; want 1 and inserted %s alone:\n%s", code, want, out)
		}
	})
	t.Run("the forged copy first", func(t *testing.T) {
		lines := slices.Clone(orig)
		i := find(t, lines, chain, 5)
		forged := strings.Replace(lines[i], `"code":"EXECUTION_FAILED"`, `"code":"OK"`, 1)
		lines = slices.Insert(lines, i, forged)
		tr.write(t, lines)
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if want := fmt.Sprintf("chain_seq 5 (line %d)", i+1); code != exitTampered || !named(out, chain, "inserted", want) {
			t.Fatalf("exit %d; want 1 and inserted %s:\n%s", code, want, out)
		}
	})
	t.Run("a forged record after the chain was closed, its hash computed", func(t *testing.T) {
		lines := slices.Clone(orig)
		last := find(t, lines, chain, 26) // the chain's last checkpoint, at Close
		m := decode(t, lines[find(t, lines, chain, 16)])
		m["chain_seq"], m["actor_id"] = json.Number("27"), "mallory"
		lines = append(lines, encode(t, m))
		rehash(t, lines, chain, len(lines)-1, nil)
		tr.write(t, lines)
		if !strings.Contains(lines[last], `"type":"audit.close"`) {
			t.Fatalf("chain_seq 26 is not the chain's last checkpoint: %s", lines[last])
		}
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if want := fmt.Sprintf("chain_seq 27 (line %d)", len(lines)); code != exitTampered || !named(out, chain, "inserted", want) || findings(out) != 1 {
			t.Fatalf("exit %d; want 1 and inserted %s alone:\n%s", code, want, out)
		}
	})
	t.Run("a record without a chain", func(t *testing.T) {
		lines := slices.Clone(orig)
		lines = slices.Insert(lines, 7, `{"type":"capability.approved","execution_id":"exe_1","approver_id":"mallory"}`)
		tr.write(t, lines)
		code, out := tr.verify(t, "--pubkey", tr.pubkey)
		if code != exitTampered || !strings.Contains(out, "inserted        line 8 carries no chain") {
			t.Fatalf("exit %d; want 1 and line 8 inserted:\n%s", code, out)
		}
	})
}

func TestSwappedRecordsAreNamed(t *testing.T) {
	tr := writeTrail(t, 2, 3, true)
	chain := tr.chains[0]
	for _, pair := range [][2]uint64{{7, 8}, {3, 16}} {
		t.Run(fmt.Sprint(pair), func(t *testing.T) {
			lines := tr.lines(t)
			i, j := find(t, lines, chain, pair[0]), find(t, lines, chain, pair[1])
			lines[i], lines[j] = lines[j], lines[i]
			tr.write(t, lines)
			code, out := tr.verify(t, "--pubkey", tr.pubkey)
			if want := fmt.Sprintf("chain_seq %d", pair[0]); code != exitTampered || !named(out, chain, "reordered", want) || strings.Contains(out, "modified") || strings.Contains(out, "deleted") {
				t.Fatalf("exit %d; want 1 and reordered %s alone:\n%s", code, want, out)
			}
			lines[i], lines[j] = lines[j], lines[i]
			tr.write(t, lines)
		})
	}
}

// TestATailCutAfterAKeptCheckpointIsNamed: the trail loses its last
// records, its last checkpoints with them. The checkpoints kept elsewhere
// still attest them.
func TestATailCutAfterAKeptCheckpointIsNamed(t *testing.T) {
	tr := writeTrail(t, 2, 3, true)
	chain := tr.chains[1]
	lines := tr.lines(t)
	i := find(t, lines, chain, 14)
	var cut []string
	for j, l := range lines {
		if j < i || !strings.Contains(l, chain) {
			cut = append(cut, l)
		}
	}
	tr.write(t, cut)
	code, out := tr.verify(t, "--pubkey", tr.pubkey, "--checkpoint", tr.kept)
	if code != exitTampered || !named(out, chain, "cut", "after chain_seq 13") || !strings.Contains(out, "a kept checkpoint attests chain_seq 26") {
		t.Fatalf("exit %d; want 1 and cut after chain_seq 13:\n%s", code, out)
	}
	// Without the kept checkpoints, what is left looks whole: its last
	// signed checkpoint covers it. The threat model's limit, and why the
	// docs say to keep checkpoints elsewhere.
	if code, out := tr.verify(t, "--pubkey", tr.pubkey); code != exitOK {
		t.Errorf("without the kept checkpoints: exit %d:\n%s", code, out)
	}
}

// TestADeletedChainIsNamed: every record of one chain is deleted. The
// chains left are whole, so only the checkpoints kept elsewhere show that
// a chain was there.
func TestADeletedChainIsNamed(t *testing.T) {
	tr := writeTrail(t, 2, 3, true)
	chain := tr.chains[1]
	var left []string
	for _, l := range tr.lines(t) {
		if !strings.Contains(l, chain) {
			left = append(left, l)
		}
	}
	tr.write(t, left)
	code, out := tr.verify(t, "--pubkey", tr.pubkey, "--checkpoint", tr.kept)
	if code != exitTampered || !named(out, chain, "deleted chain", "chain_seq 1..26") {
		t.Fatalf("exit %d; want 1 and chain %s named deleted:\n%s", code, chain, out)
	}
	if code, out := tr.verify(t, "--pubkey", tr.pubkey); code != exitOK {
		t.Errorf("without the kept checkpoints: exit %d:\n%s", code, out)
	}
}

func TestACheckpointSignedWithAnotherKeyIsNamed(t *testing.T) {
	tr := writeTrail(t, 1, 3, true)
	chain := tr.chains[0]
	lines := tr.lines(t)
	i := find(t, lines, chain, 12) // the second checkpoint
	_, mallory, _ := ed25519.GenerateKey(nil)
	m := decode(t, lines[i])
	h, _ := auditchain.ParseHash(m["hash"].(string))
	at, _ := time.Parse(auditchain.TimeLayout, m["time"].(string))
	m["signature"] = base64.StdEncoding.EncodeToString(ed25519.Sign(mallory, auditchain.CheckpointMessage(chain, 12, h, at)))
	lines[i] = encode(t, m)
	tr.write(t, lines)
	code, out := tr.verify(t, "--pubkey", tr.pubkey)
	if want := fmt.Sprintf("chain_seq 7..12 (line %d)", i+1); code != exitTampered || !named(out, chain, "bad signature", want) {
		t.Fatalf("exit %d; want 1 and a bad signature at %s:\n%s", code, want, out)
	}
}

// TestAnEditWithEveryLaterHashRecomputed: someone who can write the trail
// changes a record and recomputes every hash after it. A signed
// checkpoint (they cannot sign) or a kept one (they cannot reach) after
// the edit catches it; without either the chain is whole again, and only
// reported unattested.
func TestAnEditWithEveryLaterHashRecomputed(t *testing.T) {
	edit := func(t *testing.T, tr *trail, resign ed25519.PrivateKey) (chain string, line int) {
		chain = tr.chains[0]
		lines := tr.lines(t)
		i := find(t, lines, chain, 9) // a requested record, after the checkpoint at 6
		m := decode(t, lines[i])
		m["actor_id"] = "someone-else"
		lines[i] = encode(t, m)
		rehash(t, lines, chain, i, resign)
		tr.write(t, lines)
		return chain, i + 1
	}
	t.Run("signed", func(t *testing.T) {
		tr := writeTrail(t, 2, 3, true)
		_, mallory, _ := ed25519.GenerateKey(nil)
		for _, resign := range []ed25519.PrivateKey{nil, mallory} {
			chain, _ := edit(t, tr, resign)
			code, out := tr.verify(t, "--pubkey", tr.pubkey)
			if code != exitTampered || !named(out, chain, "bad signature", "chain_seq 7..12") || !named(out, chain, "attested", "chain_seq 1..6") {
				t.Fatalf("exit %d; want 1, a bad signature naming chain_seq 7..12, and 1..6 attested:\n%s", code, out)
			}
		}
	})
	t.Run("kept", func(t *testing.T) {
		tr := writeTrail(t, 2, 3, false)
		chain, _ := edit(t, tr, nil)
		code, out := tr.verify(t, "--checkpoint", tr.kept)
		if code != exitTampered || !named(out, chain, "rewritten", "chain_seq 7..12") || !named(out, chain, "attested", "chain_seq 1..6") {
			t.Fatalf("exit %d; want 1, rewritten chain_seq 7..12, and 1..6 attested:\n%s", code, out)
		}
	})
	t.Run("neither", func(t *testing.T) {
		tr := writeTrail(t, 2, 3, false)
		chain, _ := edit(t, tr, nil)
		code, out := tr.verify(t)
		if code != exitOK || !named(out, chain, "unattested", "chain_seq 1..26") || !strings.Contains(out, "not verified") {
			t.Fatalf("exit %d; want 0 and the whole chain unattested:\n%s", code, out)
		}
	})
}

func TestVerifyInputErrors(t *testing.T) {
	tr := writeTrail(t, 1, 1, true)
	dir := t.TempDir()
	notKey := filepath.Join(dir, "not-a-key.pem")
	os.WriteFile(notKey, []byte("hello"), 0o600)
	badKept := filepath.Join(dir, "kept.jsonl")
	os.WriteFile(badKept, []byte(`{"chain":"x"}`+"\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no source", []string{"audit", "verify"}, "exactly one of --file and --postgres"},
		{"two sources", []string{"audit", "verify", "--file", tr.path, "--postgres", "postgres://x"}, "exactly one of --file and --postgres"},
		{"an unknown subcommand", []string{"audit", "check"}, "usage"},
		{"a missing file", []string{"audit", "verify", "--file", filepath.Join(dir, "missing.jsonl")}, "no such file"},
		{"a key file without a key", []string{"audit", "verify", "--file", tr.path, "--pubkey", notKey}, "no PEM PUBLIC KEY block"},
		{"a malformed kept checkpoint", []string{"audit", "verify", "--file", tr.path, "--checkpoint", badKept}, "a checkpoint needs chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := agentsafe(tc.args...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut, tc.want)
			}
		})
	}
	t.Run("an unreadable line", func(t *testing.T) {
		lines := tr.lines(t)
		tr.write(t, append(lines, `{"chain": "torn`))
		code, out, errOut := agentsafe("audit", "verify", "--file", tr.path, "--pubkey", tr.pubkey)
		if code != exitUsage || !strings.Contains(errOut, fmt.Sprintf("line %d: not a JSON object", len(lines)+1)) || !strings.Contains(out, "INCOMPLETE") {
			t.Errorf("exit %d, stderr %q:\n%s", code, errOut, out)
		}
	})
}
