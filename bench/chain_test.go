package bench

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
)

// BenchmarkAuditChain: a governed no-op read with a strict audit sink
// writing JSON Lines to a file, chained (auditlog, with a signer: a signed
// checkpoint every 1,000 records) against unchained (the same lines
// without chain, chain_seq, prev and hash, written the same way: one
// Write per batch, both middleware.BatchAuditSink). capability.requested
// and .started are written before the call goes on; .completed with a
// later batch, drained inside the measurement.
func BenchmarkAuditChain(b *testing.B) {
	ctx := context.Background()
	_, key, _ := ed25519.GenerateKey(nil)
	run := func(b *testing.B, sink middleware.AuditSink) {
		eng := engine(b, middleware.WithAuditSink(sink))
		defer cpu(b)()
		for b.Loop() {
			governed(ctx, eng, noop)
		}
		drained(b, eng)
	}
	b.Run("sink=unchained", func(b *testing.B) {
		f := tempFile(b)
		run(b, &plainLines{w: f})
	})
	b.Run("sink=chained", func(b *testing.B) {
		f := tempFile(b)
		s, err := auditlog.New(f, auditlog.WithSigner(key))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
}

func tempFile(b *testing.B) *os.File {
	f, err := os.Create(filepath.Join(b.TempDir(), "trail.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// plainLines is a strict audit sink writing each event as one JSON line
// with the fields auditlog writes, but no chain: the baseline the chain's
// cost is measured against. Like any durable sink (SPEC §8) it checks
// every string for what it must escape (a NUL byte, bytes that are not
// UTF-8) and for its length, as auditlog does before it hashes.
type plainLines struct {
	w   *os.File
	mu  sync.Mutex
	buf []byte
}

func (p *plainLines) Record(ctx context.Context, e middleware.Event) error {
	return p.RecordBatch(ctx, []middleware.Event{e})
}

func (p *plainLines) RecordBatch(_ context.Context, events []middleware.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.buf[:0]
	for _, e := range events {
		b = appendPlain(b, e)
	}
	p.buf = b
	_, err := p.w.Write(b)
	return err
}

// appendPlain appends e's line.
func appendPlain(b []byte, e middleware.Event) []byte {
	b = append(b, '{')
	str := func(name, v string) {
		if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) || len(v) > 16<<10 {
			v = strings.ToValidUTF8(strings.ReplaceAll(v, "\x00", `\x00`), `\xff`)
		}
		if v != "" {
			b = append(b, '"')
			b = append(b, name...)
			b = append(b, '"', ':')
			b = strconv.AppendQuote(b, v)
			b = append(b, ',')
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			b = append(b, '"')
			b = append(b, name...)
			b = append(b, '"', ':')
			b = strconv.AppendInt(b, v, 10)
			b = append(b, ',')
		}
	}
	str("actor_id", e.Actor.ID)
	str("actor_tenant", e.Actor.Tenant)
	str("approval_id", e.ApprovalID)
	num("attempt", int64(e.Attempt))
	num("attempts", int64(e.Attempts))
	if e.Code != middleware.CodeOK {
		str("code", e.Code.String())
	}
	num("duration_us", int64(e.Duration/time.Microsecond))
	str("error", e.Error)
	str("execution_id", e.ExecutionID)
	str("input_digest", e.InputDigest)
	str("procedure", e.Procedure)
	str("risk", e.Risk.String())
	str("side_effect", e.SideEffect.String())
	b = append(b, `"time":"`...)
	b = e.Time.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
	b = append(b, `","type":`...)
	b = strconv.AppendQuote(b, string(e.Type))
	return append(b, '}', '\n')
}

// BenchmarkAuditVerify: `agentsafe audit verify --file` (the command, built
// once) over a signed trail of 200,000 event records written by auditlog,
// reporting records verified per second, process start included.
func BenchmarkAuditVerify(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "agentsafe")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/agentsafe/agentsafe/cmd/agentsafe").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	pubPath := filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "trail.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	s, err := auditlog.New(f, auditlog.WithSigner(key))
	if err != nil {
		b.Fatal(err)
	}
	const executions = 200_000 / 4
	at := time.Now()
	for n := range executions {
		id := newID()
		base := middleware.Event{Time: at.Add(time.Duration(n) * time.Millisecond), ExecutionID: id, Procedure: "/orders.v1.OrderService/RefundOrder",
			Actor: middleware.ActorRef{ID: "agent-7", Tenant: "acme"}, InputDigest: "hmac-sha256:" + id[4:] + id[4:],
			SideEffect: middleware.SideEffectExternal, Risk: middleware.RiskHigh}
		for _, e := range []middleware.Event{
			{Type: middleware.EventRequested},
			{Type: middleware.EventStarted, Attempt: 1},
			{Type: middleware.EventRetried, Attempt: 2, PreviousErrorCode: middleware.CodeTimeout},
			{Type: middleware.EventFailed, Attempts: 2, Code: middleware.CodeExecutionFailed, Duration: 1500 * time.Millisecond, Error: "the gateway declined the charge"},
		} {
			ev := base
			ev.Type, ev.Attempt, ev.Attempts, ev.PreviousErrorCode, ev.Code, ev.Duration, ev.Error = e.Type, e.Attempt, e.Attempts, e.PreviousErrorCode, e.Code, e.Duration, e.Error
			if err := s.Record(context.Background(), ev); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	records := 4*executions + 4*executions/1000 // and a checkpoint every 1,000
	b.ResetTimer()
	for b.Loop() {
		if out, err := exec.Command(bin, "audit", "verify", "--file", path, "--pubkey", pubPath).CombinedOutput(); err != nil {
			b.Fatalf("verify: %v\n%s", err, out)
		}
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAuditChainConnect: the same comparison for a governed Connect
// call over loopback HTTP/1.1 (the test service's Read), the call a
// service makes.
func BenchmarkAuditChainConnect(b *testing.B) {
	_, key, _ := ed25519.GenerateKey(nil)
	run := func(b *testing.B, sink middleware.AuditSink) {
		eng, err := middleware.New(middleware.NewRegistry().Register(testv1connect.TestServiceGatedProcedure,
			middleware.Capability{SideEffect: middleware.SideEffectWrite}), quiet, middleware.WithAuditSink(sink))
		if err != nil {
			b.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle(testv1connect.NewTestServiceHandler(connectRead{}, connect.WithInterceptors(connectadapter.NewInterceptor(eng))))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		client := testv1connect.NewTestServiceClient(srv.Client(), srv.URL)
		req := &testv1.Request{Id: "42"}
		ctx := context.Background()
		defer cpu(b)()
		for b.Loop() {
			if _, err := client.Read(ctx, connect.NewRequest(req)); err != nil {
				b.Fatal(err)
			}
		}
		drained(b, eng)
	}
	b.Run("sink=unchained", func(b *testing.B) { run(b, &plainLines{w: tempFile(b)}) })
	b.Run("sink=chained", func(b *testing.B) {
		s, err := auditlog.New(tempFile(b), auditlog.WithSigner(key))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
}
