package auditlog_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"log/slog"

	"go.uber.org/goleak"

	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

// verify checks the trail at path with the auditchain verifier and
// returns its report.
func verify(t *testing.T, path string, keys []ed25519.PublicKey, kept []auditchain.Checkpoint) *auditchain.Report {
	t.Helper()
	v := auditchain.NewVerifier(keys, kept)
	if err := auditchain.VerifyFile(path, v); err != nil {
		t.Fatal(err)
	}
	return v.Finish()
}

// lockedBuffer is a bytes.Buffer safe for the sink's timer goroutine and
// the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSuffix(b.b.String(), "\n"), "\n")
}

func event(n int) middleware.Event {
	return middleware.Event{Type: middleware.EventRequested, Time: time.Now(), ExecutionID: "exe_" + string(rune('a'+n%26)), Procedure: "/p.S/M"}
}

// TestTheTrailOfAnEngineVerifies runs in a bubble, so that the engine's
// queued records are all written once every goroutine waits.
func TestTheTrailOfAnEngineVerifies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pub, key, _ := ed25519.GenerateKey(nil)
		path := filepath.Join(t.TempDir(), "trail.jsonl")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var kept []auditchain.Checkpoint
		sink, err := auditlog.New(f, auditlog.WithSigner(key), auditlog.WithCheckpoints(10, 0),
			auditlog.OnCheckpoint(func(c auditlog.Checkpoint) {
				h, _ := auditchain.ParseHash(c.Hash)
				kept = append(kept, auditchain.Checkpoint{Chain: c.Chain, Seq: c.Seq, Hash: h, Time: c.Time, Signature: c.Signature, Final: c.Final})
			}))
		if err != nil {
			t.Fatal(err)
		}
		reg := middleware.NewRegistry().Register("/p.S/Write", middleware.Capability{SideEffect: middleware.SideEffectWrite}).
			Register("/p.S/Read", middleware.Capability{SideEffect: middleware.SideEffectRead})
		eng, err := middleware.New(reg, middleware.WithProtoFiles(nil), middleware.WithAuditSink(sink), quiet)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				proc := "/p.S/Read"
				if i%2 == 0 {
					proc = "/p.S/Write"
				}
				call(t, eng, proc)
			})
		}
		wg.Wait()
		synctest.Wait() // every queued record is written
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		rep := verify(t, path, []ed25519.PublicKey{pub}, kept)
		if rep.Tampered() || len(rep.Chains) != 1 || len(rep.Unreadable) > 0 {
			t.Fatalf("the trail does not verify: %+v", rep)
		}
		c := rep.Chains[0]
		// 120 events, a checkpoint after every 10, and the last at Close.
		if c.Chain != sink.Chain() || c.Records != 133 || c.Checkpoints != 13 || c.Attested != 133 || c.AttestedBy != "signed and kept" || len(kept) != 13 || !kept[12].Final {
			t.Errorf("chain %+v, %d kept", c, len(kept))
		}
		time.Sleep(time.Second) // the engine's idle workers exit
	})
}

func TestAFailedWriteLeavesNoGap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trail.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &flakyWriter{w: f}
	sink, err := auditlog.New(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, fail := range []int{-1, 0, -1, 7, -1, -1} { // -1 writes; n >= 0 writes n bytes and fails
		w.fail = fail
		err := sink.Record(ctx, event(i))
		if (fail >= 0) != (err != nil) {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	w.fail = -1
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, path, nil, nil)
	// Four records and the last checkpoint are in the chain, 1..5 without
	// a gap; the line torn at 7 bytes is unreadable, and the next one
	// starts on a line of its own.
	if rep.Tampered() || len(rep.Chains) != 1 || rep.Chains[0].Last != 5 || rep.Chains[0].Records != 5 || len(rep.Unreadable) != 1 {
		t.Fatalf("report: %+v, chains %+v", rep, rep.Chains[0])
	}
}

// flakyWriter fails a write after fail bytes (when fail >= 0).
type flakyWriter struct {
	w    *os.File
	fail int
}

func (w *flakyWriter) Write(p []byte) (int, error) {
	if w.fail < 0 {
		return w.w.Write(p)
	}
	n, _ := w.w.Write(p[:min(w.fail, len(p))])
	return n, errors.New("disk full")
}

func TestACheckpointIsWrittenIntervalAfterTheFirstRecordItCovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf lockedBuffer
		var mu sync.Mutex
		var kept []auditlog.Checkpoint
		got := func() []auditlog.Checkpoint {
			mu.Lock()
			defer mu.Unlock()
			return append([]auditlog.Checkpoint(nil), kept...)
		}
		sink, err := auditlog.New(&buf, auditlog.WithCheckpoints(100, 10*time.Second),
			auditlog.OnCheckpoint(func(c auditlog.Checkpoint) { mu.Lock(); kept = append(kept, c); mu.Unlock() }))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		sink.Record(ctx, event(1))
		time.Sleep(4 * time.Second)
		sink.Record(ctx, event(2))
		time.Sleep(6*time.Second - time.Nanosecond)
		synctest.Wait()
		if n := len(buf.lines()); n != 2 || len(got()) != 0 {
			t.Fatalf("before the interval: %d lines, %d checkpoints", n, len(got()))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		lines := buf.lines()
		cps := got()
		if len(lines) != 3 || !strings.Contains(lines[2], `"type":"audit.checkpoint"`) || len(cps) != 1 || cps[0].Seq != 3 {
			t.Fatalf("at the interval: %q, checkpoints %+v", lines, cps)
		}
		var line map[string]any
		json.Unmarshal([]byte(lines[2]), &line)
		if line["hash"] != cps[0].Hash || line["chain"] != sink.Chain() {
			t.Errorf("the hook's checkpoint %+v is not the line %s", cps[0], lines[2])
		}
		// Nothing new: no checkpoint, however long the sink waits.
		time.Sleep(time.Minute)
		synctest.Wait()
		if len(buf.lines()) != 3 {
			t.Error("a checkpoint was written with no record to cover")
		}
		sink.Record(ctx, event(3))
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		if lines := buf.lines(); len(lines) != 5 || !strings.Contains(lines[4], `"type":"audit.close"`) || len(got()) != 2 || !got()[1].Final {
			t.Fatalf("Close did not write the last checkpoint: %q", lines)
		}
		if err := sink.Record(ctx, event(4)); !errors.Is(err, auditlog.ErrClosed) {
			t.Errorf("a record after Close: %v", err)
		}
		if err := sink.Close(); err != nil {
			t.Errorf("a second Close: %v", err)
		}
		time.Sleep(time.Minute) // no timer is left to fire
	})
}

func TestNewRefusesAKeyThatIsNotEd25519(t *testing.T) {
	if _, err := auditlog.New(&bytes.Buffer{}, auditlog.WithSigner(ed25519.PrivateKey("short"))); err == nil || !strings.Contains(err.Error(), "Ed25519") {
		t.Errorf("New with a 5-byte key: %v", err)
	}
	if _, err := auditlog.New(nil); err == nil {
		t.Error("New with no writer succeeded")
	}
}

var quiet = middleware.WithLogger(slog.New(slog.DiscardHandler))

// call makes one governed call of proc, as an adapter would.
func call(t *testing.T, eng *middleware.Engine, proc string) {
	t.Helper()
	_, _, err := adapter.Execute(context.Background(), adapter.Resolve(eng, proc), adapter.Call[any]{},
		func(context.Context) (any, error) { return nil, nil })
	if err != nil {
		t.Error(err)
	}
}

// TestABatchCutShortIsNotWrittenTwice: a batch's write stops after its
// first line; the engine sends the batch again; the first record is not
// written twice, and the chain has no gap.
func TestABatchCutShortIsNotWrittenTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trail.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &flakyWriter{w: f, fail: -1}
	sink, err := auditlog.New(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	batch := []middleware.Event{event(1), event(2), event(3)}
	batch[0].Type, batch[1].Type, batch[2].Type = middleware.EventCompleted, middleware.EventRetried, middleware.EventCompleted
	var one bytes.Buffer
	probe, _ := auditlog.New(&one)
	probe.Record(ctx, batch[0])
	w.fail = one.Len() + 10 // the first line, and part of the second
	if err := sink.RecordBatch(ctx, batch); err == nil {
		t.Fatal("a batch cut short reported no failure")
	}
	w.fail = -1
	if err := sink.RecordBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, path, nil, nil)
	if rep.Tampered() || len(rep.Chains) != 1 || rep.Chains[0].Records != 4 || len(rep.Unreadable) != 1 {
		t.Fatalf("report %+v, chain %+v: want 3 records and a checkpoint, one torn line", rep, rep.Chains[0])
	}
}
