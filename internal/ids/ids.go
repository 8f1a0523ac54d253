// Package ids makes the identifiers agentsafe hands out: a prefix and 128
// random bits in lowercase hex ("exe_…", "idk_…", "apr_…"), and keys derived
// from other keys so that one input always gives one output.
package ids

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// HexLen is the number of hex digits after an identifier's prefix.
const HexLen = 32

// New returns prefix followed by 128 bits from crypto/rand in hex.
func New(prefix string) string {
	var raw [HexLen / 2]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails on supported platforms
	return encode(prefix, raw[:])
}

// Pair returns two new identifiers, with prefixes a and b, from one read
// of crypto/rand and in one allocation (the two share it): an execution id
// and its idempotency key are made on every governed call.
func Pair(a, b string) (string, string) {
	var raw [HexLen]byte
	_, _ = rand.Read(raw[:])
	var digits [2 * HexLen]byte
	hex.Encode(digits[:], raw[:])
	var sb strings.Builder
	sb.Grow(len(a) + len(b) + 2*HexLen)
	sb.WriteString(a)
	sb.Write(digits[:HexLen])
	sb.WriteString(b)
	sb.Write(digits[HexLen:])
	s := sb.String()
	return s[:len(a)+HexLen], s[len(a)+HexLen:]
}

// Derive returns prefix followed by the first 128 bits of a SHA-256 over the
// length-prefixed parts: stable for the same parts, and distinct for
// different ones however they split.
func Derive(prefix string, parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	return encode(prefix, h.Sum(sum[:0])[:HexLen/2])
}

// encode writes prefix and raw in hex with a single allocation: ids are
// made on every governed call.
func encode(prefix string, raw []byte) string {
	var digits [HexLen]byte
	hex.Encode(digits[:], raw)
	var b strings.Builder
	b.Grow(len(prefix) + HexLen)
	b.WriteString(prefix)
	b.Write(digits[:])
	return b.String()
}

// Valid reports whether s is prefix followed by exactly HexLen lowercase hex
// digits.
func Valid(prefix, s string) bool {
	if len(s) != len(prefix)+HexLen || s[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
