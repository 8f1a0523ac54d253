package auditlog

import (
	"time"

	"github.com/agentsafe/agentsafe/internal/auditchain"
)

// Checkpoint attests a chain through one of its records: the checkpoint
// record itself, at chain_seq Seq, whose Hash covers every record before
// it through the chain. Signature, when the sink has a signer, is
// Ed25519 over "agentsafe/audit/checkpoint/v1" ‖ Chain ‖ Seq as 8 bytes
// big-endian ‖ Hash (32 bytes) ‖ Time in RFC 3339, UTC, with six
// fractional digits.
//
// Its JSON form (encoding/json) is what `agentsafe audit verify
// --checkpoint FILE` reads, one checkpoint a line.
type Checkpoint struct {
	Chain     string    `json:"chain"`
	Seq       uint64    `json:"chain_seq"`
	Hash      string    `json:"hash"` // lowercase hex
	Time      time.Time `json:"time"`
	Signature []byte    `json:"signature,omitempty"`
	// Final: the chain's last checkpoint, written when its sink closed; a
	// record after it was inserted.
	Final bool `json:"final,omitempty"`
}

func checkpointOf(c auditchain.Checkpoint) Checkpoint {
	return Checkpoint{Chain: c.Chain, Seq: c.Seq, Hash: c.Hash.String(), Time: c.Time, Signature: c.Signature, Final: c.Final}
}
