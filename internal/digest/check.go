package digest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// check validates the value at doc[i], depth containers deep: everything
// the package documentation refuses except duplicate names, which emit
// finds. It adds the value's canonical length to c.size and its members to
// c.members, and returns the offset after the value and the most members
// that emitting any object inside the value holds at once, counting those
// of its enclosing objects within the value.
func (c *canonicalizer) check(i, depth int) (end, held int, err error) {
	if i >= len(c.doc) {
		return 0, 0, c.syntaxError(i, "a value")
	}
	switch b := c.doc[i]; {
	case b == '{':
		return c.checkObject(i, depth)
	case b == '[':
		return c.checkArray(i, depth)
	case b == '"':
		end, n, bad, err := c.checkString(i)
		if err != nil {
			return 0, 0, err
		}
		if bad != 0 {
			return 0, 0, fmt.Errorf("%w: string at %s: unpaired surrogate \\u%04x", ErrUnbindable, c.location(depth), bad)
		}
		c.size += n
		return end, 0, nil
	case b == '-' || '0' <= b && b <= '9':
		end, err := c.checkNumber(i, depth)
		return end, 0, err
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(c.doc[i:], []byte(lit)) {
			c.size += int64(len(lit))
			return i + len(lit), 0, nil
		}
	}
	return 0, 0, c.syntaxError(i, "a value")
}

func (c *canonicalizer) tooDeep(depth int) error {
	return fmt.Errorf("%w: nesting deeper than %d at %s", ErrUnbindable, maxDepth, c.location(depth))
}

func (c *canonicalizer) checkObject(i, depth int) (int, int, error) {
	if depth == maxDepth {
		return 0, 0, c.tooDeep(depth)
	}
	doc := c.doc
	c.size += int64(len("{}"))
	i = c.skipSpace(i + 1)
	if i < len(doc) && doc[i] == '}' {
		return i + 1, 0, nil
	}
	count, below := 0, 0
	for {
		if i >= len(doc) || doc[i] != '"' {
			if count == 0 {
				return 0, 0, c.syntaxError(i, "a member name or '}'")
			}
			return 0, 0, c.syntaxError(i, "a member name")
		}
		c.path[depth] = step{name: i}
		end, n, bad, err := c.checkString(i)
		if err != nil {
			return 0, 0, err
		}
		if bad != 0 {
			return 0, 0, fmt.Errorf("%w: member name %s in the object at %s: unpaired surrogate \\u%04x",
				ErrUnbindable, quote(c.decodeName(i)), c.location(depth), bad)
		}
		c.size += n + int64(len(":"))
		count++
		i = c.skipSpace(end)
		if i >= len(doc) || doc[i] != ':' {
			return 0, 0, c.syntaxError(i, "':'")
		}
		end, held, err := c.check(c.skipSpace(i+1), depth+1)
		if err != nil {
			return 0, 0, err
		}
		below = max(below, held)
		i = c.skipSpace(end)
		if i < len(doc) && doc[i] == ',' {
			c.size += int64(len(","))
			i = c.skipSpace(i + 1)
			continue
		}
		if i < len(doc) && doc[i] == '}' {
			c.members += count
			return i + 1, count + below, nil
		}
		return 0, 0, c.syntaxError(i, "',' or '}'")
	}
}

func (c *canonicalizer) checkArray(i, depth int) (int, int, error) {
	if depth == maxDepth {
		return 0, 0, c.tooDeep(depth)
	}
	doc := c.doc
	c.size += int64(len("[]"))
	i = c.skipSpace(i + 1)
	if i < len(doc) && doc[i] == ']' {
		return i + 1, 0, nil
	}
	below := 0
	for k := 0; ; k++ {
		c.path[depth] = step{name: -1, index: k}
		end, held, err := c.check(i, depth+1)
		if err != nil {
			return 0, 0, err
		}
		below = max(below, held)
		i = c.skipSpace(end)
		if i < len(doc) && doc[i] == ',' {
			c.size += int64(len(","))
			i = c.skipSpace(i + 1)
			continue
		}
		if i < len(doc) && doc[i] == ']' {
			return i + 1, below, nil
		}
		return 0, 0, c.syntaxError(i, "',' or ']'")
	}
}

// checkString validates the string whose opening quote is doc[i] and
// returns the offset after it and the length of its canonical form. bad is
// the first unpaired surrogate it escapes, or 0; a syntax error takes
// precedence, as it does in encoding/json.
func (c *canonicalizer) checkString(i int) (end int, n int64, bad rune, err error) {
	doc := c.doc
	for i++; ; {
		start := i
		i = plainRun(doc, i)
		n += int64(i - start)
		if i >= len(doc) {
			return 0, 0, 0, c.syntaxError(i, "'\"'")
		}
		switch doc[i] {
		case '"':
			return i + 1, n + int64(len(`""`)), bad, nil
		case '\\':
		default:
			return 0, 0, 0, fmt.Errorf("%w: invalid JSON: control character U+%04X in a string at byte offset %d", ErrUnbindable, doc[i], i)
		}
		if i+1 >= len(doc) {
			return 0, 0, 0, c.syntaxError(i+1, "an escape")
		}
		switch doc[i+1] {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			n += 2
			i += 2
			continue
		case '/':
			n++
			i += 2
			continue
		case 'u':
		default:
			return 0, 0, 0, fmt.Errorf("%w: invalid JSON: invalid escape %q in a string at byte offset %d", ErrUnbindable, doc[i:i+2], i)
		}
		u, ok := hex4(doc, i+2)
		if !ok {
			return 0, 0, 0, fmt.Errorf("%w: invalid JSON: invalid \\u escape in a string at byte offset %d", ErrUnbindable, i)
		}
		i += 6
		if utf16.IsSurrogate(u) {
			if u < 0xDC00 && i+1 < len(doc) && doc[i] == '\\' && doc[i+1] == 'u' {
				if low, ok := hex4(doc, i+2); ok && 0xDC00 <= low && low <= 0xDFFF {
					n += 4
					i += 6
					continue
				}
			}
			if bad == 0 {
				bad = u
			}
			continue
		}
		var canonical [6]byte
		n += int64(len(appendCanonicalRune(canonical[:0], u)))
	}
}

// PlainRun is plainRun, for the audit verifier's reader of canonical
// lines.
func PlainRun(doc []byte, i int) int { return plainRun(doc, i) }

// plainRun returns the offset of the first byte at or after doc[i] that ends
// a run of string bytes copied as they are: a quote, a backslash or a
// control character. It reads eight bytes at a time.
func plainRun(doc []byte, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= len(doc); i += 8 {
		w := binary.LittleEndian.Uint64(doc[i:])
		// A byte below 0x20 sets the high bit of some byte here (the
		// classic "has less than").
		if (w-0x20*ones)&^w&highs != 0 || hasQuoteOrBackslash(w) {
			break
		}
	}
	for ; i < len(doc); i++ {
		if b := doc[i]; b < 0x20 || b == '"' || b == '\\' {
			break
		}
	}
	return i
}

// hasQuoteOrBackslash reports whether any byte of w is '"' or '\\'.
func hasQuoteOrBackslash(w uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	quote, backslash := w^('"'*ones), w^('\\'*ones)
	return ((quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0
}

// checkNumber validates the number at doc[i] and adds its canonical length.
func (c *canonicalizer) checkNumber(i, depth int) (int, error) {
	end := scanNumber(c.doc, i)
	if end < 0 {
		return 0, fmt.Errorf("%w: invalid JSON: malformed number at byte offset %d", ErrUnbindable, i)
	}
	num := c.doc[i:end]
	if canonical, ok := canonicalInteger(num); ok {
		c.size += int64(len(canonical))
		return end, nil
	}
	lit := parseDecimal(num)
	inexact := func() error {
		return fmt.Errorf("%w: number %s at %s cannot be represented exactly as a double", ErrUnbindable, truncate(string(num[:min(len(num), 80)])), c.location(depth))
	}
	if c.mode == checked {
		if lit.unsafeInteger() {
			return 0, fmt.Errorf("%w: number %s at %s is an integer beyond ±(2^53−1)", ErrUnbindable, truncate(string(num[:min(len(num), 80)])), c.location(depth))
		}
		if lit.n > maxDigits {
			return 0, inexact()
		}
	}
	d, ok := lit.shortest(num)
	switch {
	case !ok && c.mode == checked:
		return 0, inexact()
	case !ok:
		return 0, fmt.Errorf("%w: number %s at %s is beyond the range of a double", ErrUnbindable, truncate(string(num[:min(len(num), 80)])), c.location(depth))
	case c.mode == checked && !d.equal(&lit):
		return 0, inexact()
	}
	var buf [32]byte
	c.size += int64(len(d.appendES6(buf[:0])))
	return end, nil
}

// appendCanonicalRune appends r as RFC 8785 §3.2.2.2 writes it in a string:
// the two-character escapes, \u00XX for other control characters, and
// everything else as UTF-8.
func appendCanonicalRune(b []byte, r rune) []byte {
	switch r {
	case '"':
		return append(b, '\\', '"')
	case '\\':
		return append(b, '\\', '\\')
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xF])
	}
	return utf8.AppendRune(b, r)
}
