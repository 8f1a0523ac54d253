// Package replay is the stored form of a net/http response, shared by the
// engine (a Reconcile hook's *http.Response) and nethttpadapter (its
// codec): the status, the headers less hop-by-hop ones and Date, and the
// body.
package replay

import (
	"encoding/binary"
	"errors"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// version opens every encoded response, so the form can change.
const version = 1

// hopByHop are the headers that describe one connection, not the
// response (RFC 9110 §7.6.1), with Date, which a replay must not repeat:
// the server stamps its own.
var hopByHop = []string{"Connection", "Date", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// Kept reports whether header name of h is stored: neither hop-by-hop
// (those h's Connection header names included) nor Date.
func Kept(h http.Header, name string) bool {
	k := textproto.CanonicalMIMEHeaderKey(name)
	if slices.Contains(hopByHop, k) {
		return false
	}
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(f)) == k {
				return false
			}
		}
	}
	return true
}

// EncodeHTTP returns the stored form of a response: status, the headers
// [Kept] keeps (sorted, so one response always encodes the same), body.
func EncodeHTTP(status int, h http.Header, body []byte) []byte {
	keys := make([]string, 0, len(h))
	for k := range h {
		if Kept(h, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	b := []byte{version}
	b = binary.AppendUvarint(b, uint64(status))
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(h[k])))
		for _, v := range h[k] {
			b = appendString(b, v)
		}
	}
	return append(b, body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errMalformed = errors.New("replay: malformed stored response")

// DecodeHTTP reads what EncodeHTTP wrote.
func DecodeHTTP(b []byte) (status int, h http.Header, body []byte, err error) {
	if len(b) == 0 || b[0] != version {
		return 0, nil, nil, errMalformed
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := next()
		if !ok || n > uint64(len(b)) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	st, ok := next()
	if !ok || st < 100 || st > 999 {
		return 0, nil, nil, errMalformed
	}
	n, ok := next()
	if !ok || n > uint64(len(b)) {
		return 0, nil, nil, errMalformed
	}
	h = make(http.Header, n)
	for range n {
		k, ok := str()
		if !ok {
			return 0, nil, nil, errMalformed
		}
		m, ok := next()
		if !ok || m > uint64(len(b)) {
			return 0, nil, nil, errMalformed
		}
		vs := make([]string, 0, m)
		for range m {
			v, ok := str()
			if !ok {
				return 0, nil, nil, errMalformed
			}
			vs = append(vs, v)
		}
		h[k] = vs
	}
	return int(st), h, b, nil
}
