package auditchain

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/internal/digest"
	"github.com/agentsafe/agentsafe/middleware"
)

func TestFieldsAreInTheOrderRFC8785WritesThem(t *testing.T) {
	for f := Field(1); f < numFields; f++ {
		if fields[f-1].name >= fields[f].name {
			t.Errorf("field %q comes before %q: a record's members would not be in RFC 8785 order", fields[f-1].name, fields[f].name)
		}
	}
	if !(fields[ExecutionID].name < hashName && hashName < fields[InputDigest].name) || !(fields[SideEffect].name < signatureName && signatureName < fields[Stack].name) {
		t.Error("the hash or signature member is not where a line inserts it")
	}
}

// awkward are strings RFC 8785 escapes, or must not escape.
var awkward = []string{"", "plain", `quote " and backslash \`, "controls \x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f", "é ü 漢字 😀",
	"\u2028\u2029", "<html> & ' /", "\xff\xfe not UTF-8"}

// randomRecord is a record with every field drawn at random.
func randomRecord(r *rand.Rand) Record {
	var rec Record
	for f := Field(0); f < numFields; f++ {
		if r.IntN(3) == 0 && f != Type && f != Time {
			continue
		}
		switch fields[f].kind {
		case kString:
			rec.SetString(f, awkward[r.IntN(len(awkward))]+strings.Repeat("x", r.IntN(3)))
		case kInt:
			rec.SetInt(f, r.Int64N(1<<53)-1<<52)
		case kBool:
			rec.SetBool(f, r.IntN(2) == 0)
		case kTime:
			rec.SetTime(time.Unix(r.Int64N(1<<34), r.Int64N(1e9)))
		case kStrings:
			var l []string
			for range r.IntN(3) {
				l = append(l, awkward[r.IntN(len(awkward))])
			}
			rec.SetStrings(f, l)
		}
	}
	return rec
}

func TestARecordIsWrittenInRFC8785Form(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		rec := randomRecord(r)
		got := rec.AppendCanonical([]byte("prefix"))
		if !bytes.HasPrefix(got, []byte("prefix")) {
			t.Fatal("AppendCanonical does not append")
		}
		got = got[len("prefix"):]
		want, err := digest.AppendCanonical(nil, got)
		if err != nil {
			t.Fatalf("the record is not JSON: %v\n%s", err, got)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the record is not in RFC 8785 form:\n got %s\nwant %s", got, want)
		}
	}
}

func TestFromEventStoresWhatPostgreSQLReadsBack(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 15, 0, 123456789, time.FixedZone("CET", 3600))
	e := middleware.Event{Type: middleware.EventFailed, Time: at, ExecutionID: "exe_1", Procedure: "/p.S/M",
		Actor: middleware.ActorRef{ID: "alice"}, Code: middleware.CodeTimeout, Retryable: false, Attempts: 2,
		Duration: 1500*time.Microsecond + 999, SideEffect: middleware.SideEffectWrite}
	rec := FromEvent(e)
	got := string(rec.AppendCanonical(nil))
	want := `{"actor_id":"alice","attempts":2,"code":"TIMEOUT","duration_us":1500,"execution_id":"exe_1","procedure":"/p.S/M",` +
		`"retryable":false,"risk":"low","side_effect":"write","time":"2026-12-03T09:15:00.123456Z","type":"capability.failed"}`
	if got != want {
		t.Errorf("the record is\n%s\nwant\n%s", got, want)
	}
	// Retryable only with a code, Succeeded only on abandoned_result: as
	// the table's columns are NULL otherwise.
	rec = FromEvent(middleware.Event{Type: middleware.EventStarted, Retryable: true, Succeeded: true})
	if rec.Has(Retryable) || rec.Has(Succeeded) {
		t.Error("retryable or succeeded is present on a started record")
	}
	rec = FromEvent(middleware.Event{Type: middleware.EventAbandonedResult})
	if !rec.Has(Succeeded) {
		t.Error("succeeded is absent on abandoned_result")
	}
	// A budget's fields come together, with the budget; a Retry-After in
	// microseconds; an amount no JSON number holds exactly is clamped.
	e = middleware.Event{Type: middleware.EventBudgetExceeded, Time: at, ExecutionID: "exe_2", Procedure: "/p.S/M",
		Budget: "refunds", Amount: 0, Spent: 1 << 60, Limit: 200000, RetryAfter: 90*time.Minute + 999}
	rec = FromEvent(e)
	got = string(rec.AppendCanonical(nil))
	want = `{"altered":["budget_spent:clamped"],"budget":"refunds","budget_amount":0,"budget_limit":200000,"budget_spent":9007199254740991,` +
		`"execution_id":"exe_2","procedure":"/p.S/M","retry_after_us":5400000000,"risk":"low","time":"2026-12-03T09:15:00.123456Z","type":"capability.budget_exceeded"}`
	if got != want {
		t.Errorf("the record is\n%s\nwant\n%s", got, want)
	}
	if rec = FromEvent(middleware.Event{Type: middleware.EventStarted, Amount: 5}); rec.Has(BudgetAmount) || rec.Has(RetryAfterUS) {
		t.Error("a record without a budget has budget fields")
	}
}

// sealLines seals n random records (and a checkpoint after every third)
// and returns the lines.
func sealLines(t *testing.T, n int, signer ed25519.PrivateKey) (*Writer, [][]byte) {
	t.Helper()
	w := NewWriter(Config{Signer: signer, Every: 1 << 30}, time.Now())
	r := rand.New(rand.NewPCG(3, 4))
	var lines [][]byte
	for i := range n {
		rec := randomRecord(r)
		if i%3 == 2 {
			rec = CheckpointRecord(time.Now())
		}
		ss := w.Seal(nil, []Record{rec}, true)
		lines = append(lines, bytes.Clone(ss[0].Line))
		w.Commit(ss)
	}
	return w, lines
}

func TestALineVerifies(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	w, lines := sealLines(t, 60, key)
	p := &lineParser{h: sha256.New(), chains: map[string]string{}}
	var prev Hash
	for i, line := range lines {
		if c, err := digest.AppendCanonical(nil, line); err != nil || !bytes.Equal(c, line) {
			t.Fatalf("line %d is not in RFC 8785 form (%v):\n%s", i+1, err, line)
		}
		if _, ok := p.scanCanonical(line); !ok {
			t.Fatalf("line %d is not read by the one-pass reader:\n%s", i+1, line)
		}
		e, err := p.parse(line, int64(i+1))
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if !e.ContentOK() || e.Prev != prev || e.Seq != uint64(i+1) || e.Chain != w.ID() {
			t.Fatalf("line %d reads %+v", i+1, e)
		}
		if e.Checkpoint {
			cp := Checkpoint{Chain: e.Chain, Seq: e.Seq, Hash: e.Stored, Time: e.Time, Signature: e.Signature}
			if !VerifyCheckpoint(cp, []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}) {
				t.Fatalf("line %d: the checkpoint's signature does not verify", i+1)
			}
		}
		prev = e.Stored
	}
}

// TestAReformattedLineVerifies: a line reformatted by hand (indented,
// members in another order, characters escaped) is the same record.
func TestAReformattedLineVerifies(t *testing.T) {
	_, lines := sealLines(t, 12, nil)
	p := &lineParser{h: sha256.New(), chains: map[string]string{}}
	for i, line := range lines {
		want, err := p.parse(line, 1)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		re, _ := json.MarshalIndent(m, "", "  ") // sorted, escaped for HTML, indented
		re = bytes.ReplaceAll(re, []byte(`"type"`), []byte(`"\u0074ype"`))
		got, err := p.parse(re, 1)
		if err != nil {
			t.Fatalf("line %d reformatted: %v", i+1, err)
		}
		if got.Computed != want.Computed || got.Stored != want.Stored || got.Seq != want.Seq || got.Chain != want.Chain || got.Checkpoint != want.Checkpoint {
			t.Errorf("line %d reads differently once reformatted:\n%s", i+1, re)
		}
	}
}

func FuzzOnePassReaderAcceptsOnlyRFC8785(f *testing.F) {
	_, lines := sealLines(&testing.T{}, 6, nil)
	for _, l := range lines {
		f.Add(l)
	}
	f.Add([]byte(`{"a":"\u001f","b":-12,"c":[1]}`))
	f.Add([]byte(`{"a":"\u000a"}`))
	f.Add([]byte(`{"a":9007199254740993}`))
	f.Add([]byte(`{"a":["x","y\n"],"b":[]}`))
	f.Add([]byte(`{"a":["x",1]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		p := &lineParser{h: sha256.New()}
		if _, ok := p.scanCanonical(line); !ok {
			return
		}
		c, err := digest.AppendCanonical(nil, line)
		if err != nil || !bytes.Equal(c, line) {
			t.Fatalf("the one-pass reader took %q, whose RFC 8785 form is %q (%v)", line, c, err)
		}
	})
}
