package adapter

import (
	"context"
	"net"
	"slices"
	"strings"

	"github.com/agentsafe/agentsafe/internal/seam"
	"github.com/agentsafe/agentsafe/middleware"
)

// OutgoingKey returns the key an outgoing call made with ctx should carry
// as Idempotency-Key: the execution's idempotency key, or its sub-key for
// the label set with [middleware.WithKeyLabel]. It reports false outside a
// governed execution. Client helpers of every adapter use it, through
// [KeyHosts.Key].
func OutgoingKey(ctx context.Context) (string, bool) {
	x, ok := middleware.ExecutionFromContext(ctx)
	if !ok {
		return "", false
	}
	label, _ := ctx.Value(seam.KeyLabel{}).(string)
	return x.SubKey(label), true
}

// KeyHosts lists the downstream hosts an execution's idempotency key may be
// sent to: only hosts the application lists. Every adapter's client helper
// uses it. The zero value lists none.
type KeyHosts struct{ hosts []string }

// NewKeyHosts lists hosts: each is a host name or IP address, which matches
// any port, or host:port, which matches that port only; case does not
// matter, and a bracketed IPv6 literal may be given with or without
// brackets.
func NewKeyHosts(hosts ...string) KeyHosts {
	var k KeyHosts
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			h = h[1 : len(h)-1]
		}
		if h != "" {
			k.hosts = append(k.hosts, h)
		}
	}
	return k
}

// Allows reports whether addr, a host or host:port, is listed.
func (k KeyHosts) Allows(addr string) bool {
	if addr == "" {
		return false
	}
	addr = strings.ToLower(addr)
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	} else if strings.HasPrefix(addr, "[") && strings.HasSuffix(addr, "]") {
		host = addr[1 : len(addr)-1] // an IPv6 literal without a port, as a URL's Host spells it
	}
	return slices.Contains(k.hosts, addr) || slices.Contains(k.hosts, host)
}

// Key returns the value of the Idempotency-Key an outgoing call made with
// ctx to addr should carry: [OutgoingKey] as an RFC 9651 sf-string
// ([QuoteKey]), as draft-ietf-httpapi-idempotency-key-header spells it,
// when addr is listed; else false.
func (k KeyHosts) Key(ctx context.Context, addr string) (string, bool) {
	if !k.Allows(addr) {
		return "", false
	}
	key, ok := OutgoingKey(ctx)
	if !ok {
		return "", false
	}
	return QuoteKey(key), true
}

// QuoteKey returns key as an RFC 9651 sf-string, the spelling of an
// Idempotency-Key header: in double quotes, with " and \ escaped. The
// engine reads a key in this spelling and as a bare token alike.
func QuoteKey(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if c := key[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}

// ApprovalID returns what [Call].ApprovalID is for a call whose incoming
// Agentsafe-Approval-Id has values (every field line of it, in order):
// the values joined, so that more than one is malformed (INVALID_ARGUMENT),
// never one of them taken and the other dropped.
func ApprovalID(values []string) string { return strings.Join(values, ", ") }

// CallerKey returns what [Call].IdempotencyKey is for a call whose
// incoming Idempotency-Key has values (every field line of it, in order):
// "" when it has none, so the call has no caller key; else the values
// joined, so that more than one is malformed, and an empty one too, as
// for the engine a key has 1 to 255 characters: both are refused with
// INVALID_ARGUMENT naming the header, never taken for no key.
func CallerKey(values []string) string {
	if len(values) == 0 {
		return ""
	}
	for _, v := range values {
		if strings.Trim(v, " \t") == "" {
			return `""` // there but empty: an empty sf-string, which the engine refuses
		}
	}
	return strings.Join(values, ", ")
}
