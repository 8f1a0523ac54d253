package digest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"io"
)

// ErrUnbindable reports an input that cannot be bound faithfully to a digest.
// Errors from this package wrap it with a message saying what was wrong and
// where.
var ErrUnbindable = errors.New("input cannot be bound to a digest")

// domainTag starts every pre-image. It is part of the digest format and must
// never change: approvals stored by one version are resumed by the next.
const domainTag = "agentsafe.v1.input-digest"

// keyedTag separates [Keyed] from any other use of a deployment key.
const keyedTag = "agentsafe.v1.event-digest"

const (
	formRPC  = "rpc"
	formHTTP = "http"
	kindJSON = "json"
	kindRaw  = "raw"
)

// JSON returns the digest of a JSON input to procedure, after checking that it
// is I-JSON (see the package documentation) and canonicalizing it with
// RFC 8785. Errors wrap [ErrUnbindable].
func JSON(procedure string, body []byte) (string, error) {
	c, err := checkJSON(body, checked)
	if err != nil {
		return "", err
	}
	w := newWriter(procedure, formRPC)
	if err := w.canonical(c); err != nil {
		return "", err
	}
	return w.sum(), nil
}

// Keyed returns the form of digest that events carry when a deployment key is
// configured: "hmac-sha256:" and the lowercase hex HMAC-SHA256,
// under key, of two string fields laid out as in the digest pre-image:
// "agentsafe.v1.event-digest" and digest. A small input cannot be guessed
// back from it without the key. With an empty key, or an empty digest (nothing was bound), it
// returns digest unchanged.
func Keyed(key []byte, digest string) string {
	if len(key) == 0 || digest == "" {
		return digest
	}
	mac := hmac.New(sha256.New, key)
	w := writer{h: mac}
	w.str(keyedTag)
	w.str(digest)
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
}

// writer writes the length-prefixed fields of a pre-image.
type writer struct {
	h   hash.Hash
	buf [8]byte
}

func newWriter(procedure, form string) *writer {
	w := &writer{h: sha256.New()}
	w.str(domainTag)
	w.str(procedure)
	w.str(form)
	return w
}

func (w *writer) count(n int) {
	binary.BigEndian.PutUint64(w.buf[:], uint64(n))
	w.h.Write(w.buf[:])
}

func (w *writer) str(s string) {
	w.count(len(s))
	io.WriteString(w.h, s)
}

func (w *writer) bytes(b []byte) {
	w.count(len(b))
	w.h.Write(b)
}

func (w *writer) body(kind string, b []byte) {
	w.str(kind)
	w.bytes(b)
}

// canonical writes the body fields of a checked JSON document, streaming
// its canonical form into the hash.
func (w *writer) canonical(c *canonicalizer) error {
	w.str(kindJSON)
	w.count(int(c.size))
	return c.emit(w.h)
}

func (w *writer) sum() string {
	return "sha256:" + hex.EncodeToString(w.h.Sum(nil))
}

// AppendCanonical appends the RFC 8785 (JCS) form of the JSON document doc
// to dst, as github.com/gowebpki/jcs writes it: only what jcs refuses is
// refused (exact duplicate member names, numbers beyond the range of a
// double, invalid UTF-8, nesting deeper than 64), not the stricter I-JSON
// checks of [JSON]. Errors wrap [ErrUnbindable]. The audit verifier
// canonicalizes a stored record with it before hashing.
func AppendCanonical(dst, doc []byte) ([]byte, error) {
	c, err := checkJSON(doc, rendered)
	if err != nil {
		return dst, err
	}
	b := appender{dst}
	if err := c.emit(&b); err != nil {
		return dst, err
	}
	return b.b, nil
}

// appender is an io.Writer that appends to a slice.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) { a.b = append(a.b, p...); return len(p), nil }

// previewTag starts the pre-image of a preview digest, so that it can
// never equal an input digest. Fixed forever, as domainTag is.
const previewTag = "agentsafe.v1.preview-digest"

// Preview returns the digest that binds an approval to the state a
// capability's preview was computed from: "sha256:" and the lowercase hex
// SHA-256 of two fields laid out as in the input digest's pre-image:
// "agentsafe.v1.preview-digest" and state (nil and empty are the same).
func Preview(state []byte) string {
	// One buffer and one SHA-256 call: a preview is digested on every
	// resume, and a small state needs no allocation but the result's.
	var buf [128]byte
	pre := binary.BigEndian.AppendUint64(buf[:0], uint64(len(previewTag)))
	pre = append(pre, previewTag...)
	pre = binary.BigEndian.AppendUint64(pre, uint64(len(state)))
	sum := sha256.Sum256(append(pre, state...))
	var out [len("sha256:") + 2*sha256.Size]byte
	copy(out[:], "sha256:")
	hex.Encode(out[len("sha256:"):], sum[:])
	return string(out[:])
}
