// Package storable makes any string an event can carry storable as text
// by a durable audit sink, and says what it altered to do so (SPEC §8: a
// durable sink stores any event the engine can produce).
//
// Events carry strings the engine does not choose: a handler's error that
// quotes the caller's input, an approver's comment, an actor id from the
// application's credentials. They may hold NUL bytes or bytes that are not
// UTF-8, which PostgreSQL's text refuses and JSON cannot carry, and they may
// be of any length. A sink passes each field through [Marks.Text] at its
// boundary, and stores the marks with the record:
//
//   - a field that holds a NUL byte or is not valid UTF-8 is escaped: a
//     backslash becomes `\\`, a NUL byte `\x00`, and each byte that is not
//     part of a valid UTF-8 sequence `\xNN` (two lowercase hex digits);
//     every other character is kept. Its mark is "field:escaped", and
//     undoing the escapes gives back the original bytes;
//   - a field longer than its limit is cut at a character (or escape)
//     boundary to at most the limit's bytes. Its mark is "field:truncated".
//
// A field without a mark is stored exactly as the engine produced it. The
// check costs one pass over the field and allocates nothing when the
// field needs no change.
package storable

import (
	"strings"
	"unicode/utf8"
)

// Limits of a stored field, in bytes.
const (
	// IDMax bounds identifiers and names: ids, procedures, actors, codes.
	// PostgreSQL indexes actors and executions, and an index entry must
	// stay under about 2.7 kB.
	IDMax = 1 << 10
	// TextMax bounds free text: an error, a comment, a reason.
	TextMax = 16 << 10
	// StackMax bounds a panic's stack.
	StackMax = 64 << 10
)

// Marks lists the fields of one record that were altered to store it, as
// "field:escaped" and "field:truncated", in the order they were found.
// The zero value is empty.
type Marks []string

// Text returns s as it can be stored in field: valid UTF-8 without NUL
// bytes and at most max bytes long, escaped and cut as the package doc
// says, and adds to m what it changed.
func (m *Marks) Text(field, s string, max int) string {
	escape := strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)
	if !escape && len(s) <= max {
		return s
	}
	var cut bool
	if escape {
		s, cut = escaped(s, max)
		*m = append(*m, field+":escaped")
	} else {
		s, cut = truncated(s, max), true
	}
	if cut {
		*m = append(*m, field+":truncated")
	}
	return s
}

// String returns the marks joined by commas: "" when there are none.
func (m Marks) String() string { return strings.Join(m, ",") }

// escaped returns s escaped, cut to max bytes at an escape boundary, and
// whether it was cut.
func escaped(s string, max int) (string, bool) {
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(min(len(s)+len(s)/8+4, max))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		byteEscape := r == 0 || r == utf8.RuneError && size == 1
		n := size
		switch {
		case byteEscape:
			n = len(`\x00`)
		case r == '\\':
			n = len(`\\`)
		}
		if b.Len()+n > max {
			return b.String(), true
		}
		switch {
		case byteEscape:
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String(), false
}

// truncated cuts valid UTF-8 s to at most max bytes at a character
// boundary.
func truncated(s string, max int) string {
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
