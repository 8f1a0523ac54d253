package agentsafepg

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"

	"github.com/agentsafe/agentsafe/middleware/store"
)

// The rules of the store contract (middleware/store) in Go, for naming why
// a conditional statement changed nothing: the statements apply the same
// rules in SQL, and only they write. A record here carries its status as
// of the database clock. (approvalstore's memory store applies the same
// rules; package conformance holds every store to them.)

// binding is what a consumption must match, as one value: a SHA-256 over
// the length-prefixed audience, whole actor (the length of its chain
// first), procedure, approval type, quorum (zero counted as 1) and
// digest. Create stores it; Consume's UPDATE compares it alone, and a
// refusal is named from the separate columns.
func binding(audience string, a store.Actor, procedure, typ string, q int, digest string) string {
	h := sha256.New()
	var n [8]byte
	put := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put("agentsafepg binding v1")
	put(audience)
	put(a.ID)
	put(a.Tenant)
	put(a.Kind)
	put(strconv.Itoa(len(a.OnBehalfOf)))
	for _, id := range a.OnBehalfOf {
		put(id)
	}
	put(procedure)
	put(typ)
	put(strconv.Itoa(quorum(q)))
	put(digest)
	return hex.EncodeToString(h.Sum(nil))
}

// quorum is the number of approvers q stands for: zero means 1.
func quorum(q int) int { return max(q, 1) }

// consumedApproval is what Consume returns of r.
func consumedApproval(r *store.ApprovalRecord) store.ConsumedApproval {
	return store.ConsumedApproval{ID: r.ID, Type: r.Type, Approver: r.Approver, Comment: r.Comment, DecidedAt: r.DecidedAt}
}

// listLimit is the number of records a List of f returns at most.
func listLimit(f store.ApprovalFilter) int {
	if f.Limit <= 0 {
		return defaultListLimit
	}
	return f.Limit
}
