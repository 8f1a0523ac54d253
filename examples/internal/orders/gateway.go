package orders

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"sync/atomic"
)

// Gateway is a downstream payment system that treats the idempotency key as
// a deduplication token, as real payment APIs do: a refund repeated under
// the same key is applied once and answered with the same reference.
type Gateway struct {
	// LoseReplies makes the next n refunds apply and then fail as if the
	// reply was lost on the way back: the caller cannot tell it landed.
	LoseReplies atomic.Int32

	mu      sync.Mutex
	applied map[string]string // key → reference
	refunds int
}

// NewGateway returns an empty gateway.
func NewGateway() *Gateway { return &Gateway{applied: map[string]string{}} }

// Refund applies a refund once per key.
func (g *Gateway) Refund(ctx context.Context, key, orderID string, cents int64) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ref, ok := g.applied[key]; ok {
		return ref, nil
	}
	sum := sha256.Sum256([]byte(key))
	ref := "pay_" + hex.EncodeToString(sum[:6])
	g.applied[key] = ref
	g.refunds++
	if g.LoseReplies.Add(-1) >= 0 {
		return "", ErrTransient
	}
	return ref, nil
}

// Refunds counts the refunds actually applied.
func (g *Gateway) Refunds() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refunds
}
