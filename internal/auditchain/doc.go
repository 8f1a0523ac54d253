// Package auditchain is the hash chain of agentsafe's durable audit sinks
// (SPEC §15): the stored form of a record, the chain a sink writes, the
// checkpoints that attest it, and the verifier that recomputes it.
//
// # Records
//
// A record is the event's fields as a sink stores them (snake_case names,
// absent where PostgreSQL stores NULL, times in UTC at microseconds,
// durations in whole microseconds) plus its place in a chain: chain (the
// sink instance's chain id: "chn_", its start time, 128 random bits),
// chain_seq (1, 2, 3 … without gaps, given when the record is written, so a
// write that fails takes none), prev (the previous record's hash; 64 zeros
// before the first) and
//
//	hash = SHA-256("agentsafe/audit/v1" ‖ prev (32 bytes) ‖ RFC 8785 form of the record)
//
// where the record is every member but hash itself and a checkpoint's
// signature. A JSON Lines sink writes each record as one line in RFC 8785
// form with its hash (and signature) in place.
//
// # Checkpoints
//
// A checkpoint is a record of type "audit.checkpoint" in the chain
// ({chain, chain_seq, prev, time}), written every N records or T seconds.
// Its hash covers every record before it; when the sink has a signer its
// signature is Ed25519 over
//
//	"agentsafe/audit/checkpoint/v1" ‖ chain ‖ chain_seq (8 bytes, big-endian) ‖ hash (32 bytes) ‖ time (RFC 3339, UTC, six fractional digits)
//
// A sink's Close writes the chain's last checkpoint, of type "audit.close":
// a record after it was inserted.
//
// A checkpoint is valid when its signature verifies under a key the
// verifier is given, or when it equals one kept elsewhere. Records after
// the last valid checkpoint are unattested: against someone who can write
// the storage, an unsigned chain proves only that nothing was changed by
// accident.
//
// # Verification
//
// [Verifier] takes each chain's records in chain_seq order and names the
// first record modified (content that does not give its hash), rewritten
// (hashes recomputed after a change: caught where a record still links to
// an original hash, or by a checkpoint), deleted (a gap), inserted (a
// second record with one chain_seq, or a record without a chain),
// reordered (against the insertion order) or cut (the chain ends before a
// kept checkpoint), and each checkpoint whose signature does not verify.
package auditchain
