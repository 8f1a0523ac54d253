package main

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/middleware"
)

// auditTrail writes the demo's whole audit trail as JSON Lines to a file
// (-audit FILE), hash-chained, with checkpoints signed by a key made for
// the run. Beside it: FILE.pub, the public key verify takes, and
// FILE.checkpoints, the signed checkpoints. A service keeps both where
// whoever can write the trail cannot: the key in a secret store, the
// checkpoints in another store (see package auditlog).
type auditTrail struct {
	path        string
	file, kept  *os.File
	sink        *auditlog.Sink
	keptErr     error
	checkpoints int
}

func openAuditTrail(path string) (*auditTrail, error) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return nil, fmt.Errorf("-audit: %w", err)
	}
	t := &auditTrail{path: path}
	if t.file, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err != nil {
		return nil, fmt.Errorf("-audit: %w", err)
	}
	if t.kept, err = os.OpenFile(path+".checkpoints", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err != nil {
		t.file.Close()
		return nil, fmt.Errorf("-audit: %w", err)
	}
	t.sink, err = auditlog.New(t.file, auditlog.WithSigner(key), auditlog.WithCheckpoints(50, time.Second),
		auditlog.OnCheckpoint(func(c auditlog.Checkpoint) {
			line, err := json.Marshal(c)
			if err == nil {
				_, err = t.kept.Write(append(line, '\n'))
			}
			if err != nil && t.keptErr == nil {
				t.keptErr = err
			}
			t.checkpoints++
		}))
	if err != nil {
		t.file.Close()
		t.kept.Close()
		return nil, err
	}
	return t, nil
}

// option puts the trail on the engine: as its strict audit sink, or as
// one more event sink when another sink is strict (-postgres).
func (t *auditTrail) option(strict bool) middleware.Option {
	if strict {
		return middleware.WithAuditSink(t.sink)
	}
	return middleware.WithEventSink(t.sink)
}

// close waits until the engine has handed the trail every event (its
// sinks are fed asynchronously), writes the last checkpoint and closes
// the files.
func (t *auditTrail) close(eng *middleware.Engine) error {
	if eng != nil {
		waitForSink(eng, "auditlog.Sink")
	}
	err := t.sink.Close()
	for _, e := range []error{t.keptErr, t.kept.Close(), t.file.Close()} {
		if err == nil {
			err = e
		}
	}
	return err
}

// waitForSink waits, at most five seconds, until the sink named like
// name has taken as many events as the busiest of the engine's sinks.
func waitForSink(eng *middleware.Engine, name string) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var mine, most uint64
		for _, s := range eng.Stats().Sinks {
			n := s.Delivered + s.Dropped
			if strings.Contains(s.Sink, name) {
				mine = n
			}
			most = max(most, n)
		}
		if mine >= most {
			return
		}
	}
}

// printVerify ends the story: how to check the trail.
func (t *auditTrail) printVerify(out io.Writer) {
	fmt.Fprintf(out, `
The whole audit trail is in %[1]s: one JSON line per event, hash-chained,
with signed checkpoints (the public key in %[1]s.pub, the checkpoints also
kept in %[1]s.checkpoints). Verify it:

  go run ./cmd/agentsafe audit verify --file %[1]s --pubkey %[1]s.pub --checkpoint %[1]s.checkpoints

It exits 0. Change a record (sed -i 's/"code":"TIMEOUT"/"code":"OK"/' %[1]s),
delete one, or cut the file short, and it names the record and exits 1.
`, t.path)
}
