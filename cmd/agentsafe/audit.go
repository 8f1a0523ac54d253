package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsafe/agentsafe/internal/auditchain"
	"github.com/agentsafe/agentsafe/internal/auditpg"
)

const auditUsage = `usage:
  agentsafe audit verify --file TRAIL.jsonl [--pubkey KEY.pem]... [--checkpoint KEPT.jsonl]...
  agentsafe audit verify --postgres URL     [--pubkey KEY.pem]... [--checkpoint KEPT.jsonl]...

verify recomputes every hash chain of an audit trail (a JSON Lines file
written by auditlog, or agentsafepg's table) and names, per chain, the first
record modified, deleted, inserted, reordered or cut, any checkpoint whose
signature does not verify, and the records no valid checkpoint covers
(unattested: never reported as verified). A checkpoint is valid when its
signature verifies under a --pubkey (PEM, PKIX) or when it matches one of
the checkpoints kept elsewhere (--checkpoint, JSON Lines as OnCheckpoint
gives them). With --postgres it also checks that every decided, consumed or
outcome-recorded approval and every stored result has its records in a
valid chain. Exit status: 0 clean, 1 tampered, 2 usage or input error.
`

// stringsFlag is a repeatable flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func auditCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprint(stderr, auditUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("agentsafe audit verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		file, postgres    string
		pubkeys, keptList stringsFlag
	)
	fs.StringVar(&file, "file", "", "the JSON Lines trail")
	fs.StringVar(&postgres, "postgres", "", "the PostgreSQL database (postgres://…)")
	fs.Var(&pubkeys, "pubkey", "a PEM file of Ed25519 public keys (PKIX) that sign checkpoints")
	fs.Var(&keptList, "checkpoint", "a JSON Lines file of checkpoints kept elsewhere")
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, auditUsage)
		return exitOK
	} else if err != nil {
		fmt.Fprintf(stderr, "agentsafe audit verify: %v\n%s", err, auditUsage)
		return exitUsage
	}
	if fs.NArg() > 0 || (file == "") == (postgres == "") {
		fmt.Fprintf(stderr, "agentsafe audit verify: give exactly one of --file and --postgres, and nothing else\n%s", auditUsage)
		return exitUsage
	}
	var problems []string
	var keys []ed25519.PublicKey
	for _, p := range pubkeys {
		ks, err := readPublicKeys(p)
		if err != nil {
			problems = append(problems, err.Error())
		}
		keys = append(keys, ks...)
	}
	var kept []auditchain.Checkpoint
	for _, p := range keptList {
		cs, err := readCheckpoints(p)
		if err != nil {
			problems = append(problems, err.Error())
		}
		kept = append(kept, cs...)
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "agentsafe audit verify: %s\n", strings.Join(problems, "\n  "))
		return exitUsage
	}
	v := auditchain.NewVerifier(keys, kept)
	where, pos := file, "line"
	var err error
	if file != "" {
		err = auditchain.VerifyFile(file, v)
	} else {
		where, pos = "PostgreSQL", "row"
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err = verifyPostgres(ctx, postgres, v)
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentsafe audit verify: %v\n", err)
		return exitUsage
	}
	rep := v.Finish()
	printReport(stdout, where, pos, rep, len(keys) > 0, len(kept) > 0)
	switch {
	case rep.Tampered():
		return exitTampered
	case len(rep.Unreadable) > 0:
		for _, u := range rep.Unreadable {
			fmt.Fprintf(stderr, "agentsafe audit verify: unreadable: %s\n", u)
		}
		return exitUsage
	}
	return exitOK
}

// exitTampered is verify's status when it found something.
const exitTampered = 1

// readPublicKeys reads every PUBLIC KEY block of a PEM file: Ed25519
// keys in PKIX form (openssl pkey -pubout writes them).
func readPublicKeys(path string) ([]ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--pubkey: %w", err)
	}
	var keys []ed25519.PublicKey
	for n := 1; ; n++ {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("--pubkey %s: PEM block %d is a %q, not a PUBLIC KEY", path, n, block.Type)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--pubkey %s: PEM block %d: %w", path, n, err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("--pubkey %s: PEM block %d is a %T key, not Ed25519", path, n, k)
		}
		keys = append(keys, ek)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--pubkey %s: no PEM PUBLIC KEY block", path)
	}
	return keys, nil
}

// keptCheckpoint is a checkpoint as auditlog.Checkpoint's JSON form, or
// a checkpoint record's line, writes it.
type keptCheckpoint struct {
	Chain     string `json:"chain"`
	Seq       uint64 `json:"chain_seq"`
	Hash      string `json:"hash"`
	Time      string `json:"time"`
	Signature []byte `json:"signature"`
	Final     bool   `json:"final"`
	Type      string `json:"type"` // a checkpoint record's line: audit.close is final
}

// readCheckpoints reads a JSON Lines file of kept checkpoints.
func readCheckpoints(path string) ([]auditchain.Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--checkpoint: %w", err)
	}
	defer f.Close()
	var out []auditchain.Checkpoint
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var k keptCheckpoint
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&k); err != nil {
			return nil, fmt.Errorf("--checkpoint %s: line %d: %w", path, n, err)
		}
		h, ok := auditchain.ParseHash(k.Hash)
		t, terr := time.Parse(time.RFC3339Nano, k.Time)
		if k.Chain == "" || k.Seq == 0 || !ok || terr != nil {
			return nil, fmt.Errorf("--checkpoint %s: line %d: a checkpoint needs chain, chain_seq, hash (hex) and time (RFC 3339)", path, n)
		}
		out = append(out, auditchain.Checkpoint{Chain: k.Chain, Seq: k.Seq, Hash: h, Time: t, Signature: k.Signature,
			Final: k.Final || k.Type == auditchain.CloseType})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--checkpoint %s: %w", path, err)
	}
	return out, nil
}

// printReport writes what verification found, a chain at a time.
func printReport(w io.Writer, where, pos string, rep *auditchain.Report, keys, kept bool) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	fmt.Fprintf(bw, "%s: %s in %s\n", where, plural(rep.Records, "record"), plural(len(rep.Chains), "chain"))
	if rep.Legacy > 0 {
		fmt.Fprintf(bw, "  %d records written before the trail was chained: not verified\n", rep.Legacy)
	}
	name := func(f auditchain.Finding) string {
		s := "chain_seq " + seqSpan(f.From, f.To)
		if f.Kind == auditchain.Cut {
			s = fmt.Sprintf("after chain_seq %d", f.From)
		}
		if f.Pos != 0 {
			s += fmt.Sprintf(" (%s %d)", pos, f.Pos)
		}
		return s
	}
	tampered, unattested := 0, uint64(0)
	for _, c := range rep.Chains {
		fmt.Fprintf(bw, "chain %s: chain_seq %s, %s, %s\n", c.Chain, seqSpan(c.First, c.Last), plural(c.Records, "record"), plural(c.Checkpoints, "checkpoint"))
		// The first finding of each kind, and how many more there are.
		for i, f := range c.Findings {
			if i > 0 && c.Findings[i-1].Kind == f.Kind {
				continue
			}
			fmt.Fprintf(bw, "  %-13s %s: %s\n", f.Kind, name(f), f.Detail)
			if n := c.Count(f.Kind); n > 1 {
				fmt.Fprintf(bw, "  %-13s … and %d more\n", f.Kind, n-1)
			}
		}
		if c.Tampered() {
			tampered++
		}
		if c.Attested > 0 {
			fmt.Fprintf(bw, "  %-13s chain_seq %s: a %s checkpoint covers them\n", "attested", seqSpan(c.First, c.Attested), c.AttestedBy)
		}
		if c.Last > c.Attested && c.Records > 0 {
			why := "after the last valid checkpoint"
			if c.Attested == 0 {
				why = "no valid checkpoint covers them"
				switch {
				case c.SignedUnchecked:
					why += " (the checkpoints are signed: give --pubkey to check them)"
				case !keys && !kept:
					why += " (give --pubkey or --checkpoint)"
				}
			}
			fmt.Fprintf(bw, "  %-13s chain_seq %s: %s; not verified\n", "unattested", seqSpan(c.Attested+1, c.Last), why)
			unattested += c.Last - c.Attested
		}
	}
	for _, f := range rep.Unchained {
		fmt.Fprintf(bw, "%-15s %s\n", f.Kind, f.Detail)
	}
	if rep.Loose > len(rep.Unchained) {
		fmt.Fprintf(bw, "%-15s … and %d more records without a chain\n", auditchain.Inserted, rep.Loose-len(rep.Unchained))
	}
	for _, f := range rep.Extra {
		fmt.Fprintf(bw, "%-15s %s\n", f.Kind, f.Detail)
	}
	switch {
	case rep.Tampered():
		fmt.Fprintf(bw, "TAMPERED: %d of %d chains have findings", tampered, len(rep.Chains))
		if n := rep.Loose + len(rep.Extra); n > 0 {
			fmt.Fprintf(bw, ", and %d findings outside them", n)
		}
		fmt.Fprintln(bw)
	case len(rep.Unreadable) > 0:
		fmt.Fprintf(bw, "INCOMPLETE: %d unreadable records\n", len(rep.Unreadable))
	case unattested > 0:
		fmt.Fprintf(bw, "OK: no tampering found; %d records are unattested (not verified)\n", unattested)
	default:
		fmt.Fprintln(bw, "OK: every chain verified and attested")
	}
}

// plural writes n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func seqSpan(from, to uint64) string {
	if from == to {
		return fmt.Sprint(from)
	}
	return fmt.Sprintf("%d..%d", from, to)
}

// verifyPostgres feeds v agentsafepg's trail and its cross-checks.
func verifyPostgres(ctx context.Context, url string, v *auditchain.Verifier) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("--postgres: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("--postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// One snapshot: rows written while verify reads do not make gaps.
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("--postgres: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := auditpg.Verify(ctx, tx, v); err != nil {
		return fmt.Errorf("--postgres: %w", err)
	}
	return nil
}
