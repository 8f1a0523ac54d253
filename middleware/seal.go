package middleware

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// ResultKey is an AES key that seals stored responses (AES-GCM), named by
// ID: every sealed record carries the ID of the key that sealed it, so
// keys rotate (see [WithResultKey]).
type ResultKey struct {
	// ID names the key in the records it seals; non-empty, unique among the
	// engine's keys.
	ID string
	// Key is 16, 24 or 32 bytes: AES-128, AES-192 or AES-256.
	Key []byte
}

// WithResultKey sets the keys stored responses are sealed with: current
// seals every new record, and current and previous unseal the records
// that name them, so a key is rotated by making it previous and a new one
// current (and dropped once the results it sealed are past their
// retention). Each record is sealed with a random nonce and bound to its
// key and input digest, so a stored response cannot be moved to another
// key. [New] fails with a result store ([WithResultStore]) and no key, or
// with a malformed key. There is no default.
func WithResultKey(current ResultKey, previous ...ResultKey) Option {
	return optionFunc(func(c *config) {
		k, err := newKeyring(current, previous)
		if err != nil {
			c.problems = append(c.problems, "WithResultKey: "+err.Error())
			return
		}
		c.resultKeys = k
	})
}

// keyring seals with its current key and unseals with any of its keys.
type keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

func newKeyring(current ResultKey, previous []ResultKey) (*keyring, error) {
	k := &keyring{current: current.ID, aeads: map[string]cipher.AEAD{}}
	for _, rk := range append([]ResultKey{current}, previous...) {
		if rk.ID == "" {
			return nil, errors.New("a key needs an ID")
		}
		if _, dup := k.aeads[rk.ID]; dup {
			return nil, fmt.Errorf("two keys named %q", rk.ID)
		}
		block, err := aes.NewCipher(rk.Key)
		if err != nil {
			return nil, fmt.Errorf("key %q: want 16, 24 or 32 bytes, got %d", rk.ID, len(rk.Key))
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", rk.ID, err)
		}
		k.aeads[rk.ID] = aead
	}
	return k, nil
}

// seal encrypts plain under the current key, bound to the record's key and
// input digest; it returns the sealed bytes (nonce first) and the key's ID.
func (k *keyring) seal(plain []byte, recordKey, digest string) ([]byte, string) {
	aead := k.aeads[k.current]
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	_, _ = rand.Read(out) // crypto/rand.Read never fails on supported platforms
	return aead.Seal(out, out, plain, sealAAD(recordKey, digest)), k.current
}

// open decrypts what seal returned.
func (k *keyring) open(sealed []byte, keyID, recordKey, digest string) ([]byte, error) {
	aead, ok := k.aeads[keyID]
	if !ok {
		return nil, fmt.Errorf("the stored result is sealed with key %q, which the engine does not have (WithResultKey)", keyID)
	}
	if len(sealed) < aead.NonceSize() {
		return nil, errors.New("the stored result is truncated")
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, sealed[:n], sealed[n:], sealAAD(recordKey, digest))
	if err != nil {
		return nil, errors.New("the stored result does not open: tampered with, or moved from another key")
	}
	return plain, nil
}

// sealAAD is the additional data a record is bound to: its key and its
// input digest, each length-prefixed.
func sealAAD(recordKey, digest string) []byte {
	b := make([]byte, 0, 16+len(recordKey)+len(digest))
	b = binary.BigEndian.AppendUint64(b, uint64(len(recordKey)))
	b = append(b, recordKey...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(digest)))
	return append(b, digest...)
}
