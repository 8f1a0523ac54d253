package digest

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is the deepest nesting of arrays and objects that binds.
const maxDepth = 64

// mode says which checks a document gets beyond RFC 8785's own.
type mode uint8

const (
	// checked JSON came from a client: every I-JSON check in the package
	// documentation applies.
	checked mode = iota
	// rendered JSON is protojson's rendering of a decoded message: it
	// binds as jcs.Transform would canonicalize it (exact duplicate names
	// and numbers beyond the range of a double are refused), within the
	// depth bound.
	rendered
)

// step is one step of the path from the top level to a value: a member
// name (the offset of its opening quote) or an array index.
type step struct {
	name  int // -1 in an array
	index int
}

// canonicalizer checks a JSON document and streams its RFC 8785 form. It
// works in three passes over the document, each linear in its length:
//
//  1. check validates everything but duplicate names, and computes the
//     length of the canonical form (the pre-image needs it first), the
//     number of object members, and the most members that emitting any
//     one object holds at once (its own and its enclosing objects');
//  2. index records, for every object member in document order, where its
//     name starts and how deep its object is: 5 bytes a member, and a member
//     takes at least 5 bytes of input;
//  3. emit writes the canonical form. Arrays, strings and numbers stream
//     straight from the input; an object's members are found in the index,
//     checked for duplicates and sorted by name in a scratch arena, and
//     their values emitted in that order by reading them again in place.
//
// So the memory it needs besides the input is the index and the arena,
// together at most 9 bytes per member (under 2× the input), plus a fixed
// buffer; and it never holds a canonical value, which can be longer than
// its input (1e15 becomes 1000000000000000).
type canonicalizer struct {
	doc  []byte
	mode mode

	size     int64 // of the canonical form
	members  int
	maxHeld  int
	path     [maxDepth]step
	names    []uint32 // offset of each member name's opening quote
	levels   []uint8  // nesting level of each member's object, 1 at the top
	arena    []uint32 // member indexes of the objects being emitted
	held     int      // arena in use
	out      io.Writer
	written  int64
	buf      []byte
	bufSpace [512]byte
}

// checkJSON runs the first pass over doc and returns the canonicalizer
// ready to emit it. Errors wrap [ErrUnbindable].
func checkJSON(doc []byte, m mode) (*canonicalizer, error) {
	if off := invalidUTF8(doc); off >= 0 {
		return nil, fmt.Errorf("%w: invalid UTF-8 at byte offset %d", ErrUnbindable, off)
	}
	if uint64(len(doc)) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: JSON document of %d bytes is larger than 4 GiB", ErrUnbindable, len(doc))
	}
	c := &canonicalizer{doc: doc, mode: m}
	i := c.skipSpace(0)
	if i == len(doc) {
		return nil, fmt.Errorf("%w: empty JSON document", ErrUnbindable)
	}
	end, held, err := c.check(i, 0)
	if err != nil {
		return nil, err
	}
	if end = c.skipSpace(end); end < len(doc) {
		return nil, fmt.Errorf("%w: invalid JSON: data after the top-level value at byte offset %d", ErrUnbindable, end)
	}
	c.maxHeld = held
	return c, nil
}

// emit writes the canonical form to w: the index pass, then the emit pass.
// Errors wrap [ErrUnbindable], except an internal inconsistency.
func (c *canonicalizer) emit(w io.Writer) error {
	c.index()
	c.out = w
	c.buf = c.bufSpace[:0]
	if _, _, err := c.emitValue(c.skipSpace(0), 0, 0); err != nil {
		return err
	}
	c.flush()
	if c.written != c.size {
		return fmt.Errorf("digest: internal error: canonical form is %d bytes, not the %d computed", c.written, c.size)
	}
	return nil
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func (c *canonicalizer) skipSpace(i int) int {
	for i < len(c.doc) && isSpace(c.doc[i]) {
		i++
	}
	return i
}

// syntaxError reports invalid JSON at offset i.
func (c *canonicalizer) syntaxError(i int, want string) error {
	if i >= len(c.doc) {
		return fmt.Errorf("%w: invalid JSON: unexpected end of input", ErrUnbindable)
	}
	r, _ := utf8.DecodeRune(c.doc[i:])
	return fmt.Errorf("%w: invalid JSON: unexpected %s at byte offset %d, expected %s", ErrUnbindable, strconv.QuoteRuneToASCII(r), i, want)
}

// location renders path[:depth], the position of a value, as an RFC 6901
// JSON Pointer.
func (c *canonicalizer) location(depth int) string {
	if depth == 0 {
		return "the top level"
	}
	var b strings.Builder
	for _, s := range c.path[:depth] {
		b.WriteByte('/')
		if s.name < 0 {
			b.WriteString(strconv.Itoa(s.index))
			continue
		}
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(c.decodeName(s.name)))
		if b.Len() > 64 {
			break // quote truncates it anyway
		}
	}
	return quote(b.String())
}

// decodeName returns the string at doc[at], its opening quote, for error
// messages: escapes decoded, unpaired surrogates as U+FFFD.
func (c *canonicalizer) decodeName(at int) string {
	var b strings.Builder
	for i := at + 1; ; {
		r, next := c.nextRune(i)
		if r < 0 || b.Len() > 64 {
			return b.String()
		}
		b.WriteRune(r)
		i = next
	}
}

// nextRune decodes the character at doc[i] inside a string that check
// accepted, or one with unpaired surrogates (decoded as U+FFFD). At the
// closing quote it returns -1.
func (c *canonicalizer) nextRune(i int) (r rune, next int) {
	doc := c.doc
	switch b := doc[i]; {
	case b == '"':
		return -1, i
	case b < utf8.RuneSelf && b != '\\':
		return rune(b), i + 1
	case b >= utf8.RuneSelf:
		r, size := utf8.DecodeRune(doc[i:])
		return r, i + size
	}
	switch doc[i+1] {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
	default: // " \ /
		return rune(doc[i+1]), i + 2
	}
	u, _ := hex4(doc, i+2)
	if !utf16.IsSurrogate(u) {
		return u, i + 6
	}
	if u < 0xDC00 && i+11 < len(doc) && doc[i+6] == '\\' && doc[i+7] == 'u' {
		if low, ok := hex4(doc, i+8); ok && 0xDC00 <= low && low <= 0xDFFF {
			return utf16.DecodeRune(u, low), i + 12
		}
	}
	return utf8.RuneError, i + 6
}

// hex4 decodes the four hex digits at doc[at:].
func hex4(doc []byte, at int) (rune, bool) {
	if at+4 > len(doc) {
		return 0, false
	}
	var r rune
	for _, c := range doc[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// foldRune returns the smallest rune of r's simple case folding orbit: two
// names are equal under strings.EqualFold, which encoding/json uses to match
// names to struct fields, exactly when their runes fold alike.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' {
			r -= 'a' - 'A'
		}
		return r
	}
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return least
}

// utf16Key orders runes as their UTF-16 code units do (RFC 8785 §3.2.3):
// the characters U+E000–U+FFFF come after every supplementary character,
// whose high surrogate is below them.
func utf16Key(r rune) rune {
	if 0xE000 <= r && r <= 0xFFFF {
		return r + 0x200000
	}
	return r
}

// invalidUTF8 returns the offset of the first byte of doc that is not part
// of a valid UTF-8 sequence, or -1.
func invalidUTF8(doc []byte) int {
	if utf8.Valid(doc) {
		return -1
	}
	for off := 0; off < len(doc); {
		r, size := utf8.DecodeRune(doc[off:])
		if r == utf8.RuneError && size <= 1 {
			return off
		}
		off += size
	}
	return -1
}

// errInternal reports a bug: the passes disagree about the document.
var errInternal = errors.New("digest: internal error: the index does not match the document")

// quote renders s for an error message: bounded so that a hostile document
// cannot flood logs, and in ASCII so that look-alikes (K and the Kelvin sign
// U+212A) read differently.
func quote(s string) string {
	if t := truncate(s); t != s {
		return strconv.QuoteToASCII(strings.TrimSuffix(t, "…")) + "…"
	}
	return strconv.QuoteToASCII(s)
}

// truncate bounds s to 64 bytes for an error message.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
