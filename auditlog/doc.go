// Package auditlog writes agentsafe's audit trail as JSON Lines to any
// io.Writer (a file, a pipe to a log shipper), hash-chained so that a
// record changed, deleted, inserted or reordered afterwards is found, and
// named, by `agentsafe audit verify --file`.
//
//	trail, err := os.OpenFile("audit.jsonl", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
//	sink, err := auditlog.New(trail, auditlog.WithSigner(key), auditlog.OnCheckpoint(keep))
//	defer sink.Close() // the chain's last checkpoint: the whole chain attested, and closed
//	eng, err := middleware.New(reg, middleware.WithAuditSink(sink))
//
// # Lines
//
// Each line is one record, a JSON object in RFC 8785 (JCS) form: the
// event's fields in snake_case ("type", "time" in RFC 3339 UTC with
// microseconds, "execution_id", "procedure", "actor_id", "code",
// "duration_us", …; fields an event does not use are left out), and its
// place in the chain:
//
//   - "chain": the sink's chain, one per Sink ("chn_", its start time and
//     128 random bits), so that instances writing to one file never wait
//     for each other;
//   - "chain_seq": 1, 2, 3 … without gaps; a record whose write fails takes
//     no number;
//   - "prev": the previous record's hash (64 zeros before the first);
//   - "hash": SHA-256("agentsafe/audit/v1" ‖ prev (32 bytes) ‖ the RFC 8785
//     form of the line without its "hash" and "signature" members), hex.
//
// # Checkpoints
//
// After every 1,000 records, and 10 seconds after the first record not
// yet covered ([WithCheckpoints]), the sink writes a checkpoint record
// ("type":"audit.checkpoint" with chain, chain_seq, prev, time), whose
// hash covers the whole chain before it. With [WithSigner] it carries an
// Ed25519 "signature" over its chain, chain_seq, hash and time (see
// [Checkpoint]); [OnCheckpoint] hands each one to the application. Close
// writes the chain's last checkpoint ("type":"audit.close"): a record
// found after it was added later.
//
// # What it proves
//
// The threat is someone who can write the trail (the file, the bucket)
// but holds neither the signing key nor the checkpoints kept elsewhere.
// Against them an unsigned chain proves little: they can change a record
// and recompute every hash after it. So:
//
//   - sign checkpoints, and keep the private key away from where the
//     trail is written; verify with the public key (--pubkey, PEM);
//   - keep the checkpoints elsewhere too (OnCheckpoint: another store, an
//     object store with retention): a signature cannot show that the tail
//     after the last checkpoint left in the trail was cut off, a kept
//     checkpoint can (--checkpoint).
//
// Records after the last valid checkpoint are unattested: the verifier
// says so and never reports them as verified. Without a signer and kept
// checkpoints, the chain shows only that nothing was changed by accident.
//
// A private key in PEM (openssl genpkey -algorithm ed25519) reads with
// x509.ParsePKCS8PrivateKey; its public key (openssl pkey -pubout) is
// what verify's --pubkey takes.
//
// # Writes
//
// Record writes its record's line (and a checkpoint due with it) in one
// Write call and returns once it is written: a strict audit sink runs a
// call only once its capability.requested and .started lines are in the
// writer. Whether the writer syncs to disk is the application's choice.
// A write that fails gives no record a number; one that stops inside a
// line leaves a torn line, which the next write ends with a newline and
// the verifier reports as unreadable.
package auditlog
