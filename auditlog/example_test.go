package auditlog_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/agentsafe/agentsafe/auditlog"
	"github.com/agentsafe/agentsafe/middleware"
)

// Keeping checkpoints elsewhere: the trail goes to one place (here a
// buffer; a file or a log shipper in production), each signed checkpoint
// to another, which whoever can write the trail cannot reach.
func Example() {
	_, key, err := ed25519.GenerateKey(nil) // in production: a key read from a secret store
	if err != nil {
		log.Fatal(err)
	}
	var trail, elsewhere bytes.Buffer
	sink, err := auditlog.New(&trail,
		auditlog.WithSigner(key),
		auditlog.WithCheckpoints(2, time.Minute),
		auditlog.OnCheckpoint(func(c auditlog.Checkpoint) {
			line, _ := json.Marshal(c) // what `agentsafe audit verify --checkpoint` reads
			elsewhere.Write(append(line, '\n'))
		}))
	if err != nil {
		log.Fatal(err)
	}
	// The engine calls Record (middleware.WithAuditSink(sink)); here by hand.
	for _, typ := range []middleware.EventType{middleware.EventRequested, middleware.EventStarted, middleware.EventCompleted} {
		sink.Record(context.Background(), middleware.Event{Type: typ, Time: time.Now(), ExecutionID: "exe_1", Procedure: "/shop.v1.Orders/Refund"})
	}
	sink.Close()
	for _, line := range bytes.Split(bytes.TrimSpace(trail.Bytes()), []byte("\n")) {
		var r struct {
			Type string `json:"type"`
			Seq  int    `json:"chain_seq"`
		}
		json.Unmarshal(line, &r)
		fmt.Println(r.Seq, r.Type)
	}
	fmt.Println(bytes.Count(elsewhere.Bytes(), []byte("\n")), "checkpoints kept elsewhere")
	// Output:
	// 1 capability.requested
	// 2 capability.started
	// 3 audit.checkpoint
	// 4 capability.completed
	// 5 audit.close
	// 2 checkpoints kept elsewhere
}
