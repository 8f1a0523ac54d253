package digest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// maxSafeInteger is 2^53−1, the largest integer every JSON implementation
// holds exactly (RFC 7493 §2.2).
const maxSafeInteger = "9007199254740991"

// canonicalJSON checks that doc is I-JSON as the package documentation
// defines it and returns its RFC 8785 canonical form.
func canonicalJSON(doc []byte) ([]byte, error) {
	if err := checkIJSON(doc); err != nil {
		return nil, err
	}
	return canonicalizeTrusted(doc)
}

// canonicalizeTrusted returns the RFC 8785 form of doc without the I-JSON
// checks. JCS refuses some inputs itself (numbers beyond the range of a
// double, nesting deeper than 10000); those are unbindable too.
func canonicalizeTrusted(doc []byte) ([]byte, error) {
	canonical, err := jcs.Transform(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: JSON cannot be canonicalized: %v", ErrUnbindable, err)
	}
	return canonical, nil
}

// frame is one open object or array during the validation walk.
type frame struct {
	object bool
	// names maps the case-folded form of each member name seen so far to
	// the name as written; nil until the first member.
	names map[string]string
	// key is the member whose value comes next (objects) and index the
	// element that comes next (arrays), for error locations.
	key     string
	index   int
	wantKey bool
}

// checkIJSON walks the token stream of doc with encoding/json, the decoder
// handlers use, and refuses what cannot be bound faithfully.
func checkIJSON(doc []byte) error {
	if off := invalidUTF8(doc); off >= 0 {
		return fmt.Errorf("%w: invalid UTF-8 at byte offset %d", ErrUnbindable, off)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()

	var stack []frame
	values := 0
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err == io.EOF {
			switch {
			case len(stack) > 0:
				return fmt.Errorf("%w: invalid JSON: unexpected end of input", ErrUnbindable)
			case values == 0:
				return fmt.Errorf("%w: empty JSON document", ErrUnbindable)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: invalid JSON: %v", ErrUnbindable, err)
		}
		if len(stack) == 0 && values > 0 {
			return fmt.Errorf("%w: invalid JSON: data after the top-level value at byte offset %d", ErrUnbindable, start)
		}

		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				values += closeValue(stack)
				continue
			}
			name := tok.(string) // Token guarantees a string in key position.
			if err := checkEscapes(doc[start:dec.InputOffset()]); err != nil {
				return fmt.Errorf("%w: member name %s in the object at %s: %v", ErrUnbindable, quote(name), location(stack), err)
			}
			f := &stack[n-1]
			folded := foldName(name)
			if prev, dup := f.names[folded]; dup {
				if prev == name {
					return fmt.Errorf("%w: duplicate member name %s in the object at %s", ErrUnbindable, quote(name), location(stack))
				}
				return fmt.Errorf("%w: duplicate member name %s in the object at %s (equal to %s under case folding, as encoding/json matches names)",
					ErrUnbindable, quote(name), location(stack), quote(prev))
			}
			if f.names == nil {
				f.names = make(map[string]string)
			}
			f.names[folded] = name
			f.key = name
			f.wantKey = false
			continue
		}

		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				stack = append(stack, frame{object: true, wantKey: true})
			case '[':
				stack = append(stack, frame{})
			case ']':
				stack = stack[:len(stack)-1]
				values += closeValue(stack)
			}
		case string:
			if err := checkEscapes(doc[start:dec.InputOffset()]); err != nil {
				return fmt.Errorf("%w: string at %s: %v", ErrUnbindable, location(stack), err)
			}
			values += closeValue(stack)
		case json.Number:
			if unsafeInteger(string(tok)) {
				return fmt.Errorf("%w: number %s at %s is an integer beyond ±(2^53−1)", ErrUnbindable, truncate(string(tok)), location(stack))
			}
			values += closeValue(stack)
		default: // bool, nil
			values += closeValue(stack)
		}
	}
}

// closeValue records that a complete value was read inside the innermost
// open container, and reports 1 when it was the top-level value.
func closeValue(stack []frame) int {
	if len(stack) == 0 {
		return 1
	}
	f := &stack[len(stack)-1]
	if f.object {
		f.wantKey = true
	} else {
		f.index++
	}
	return 0
}

// location renders the position of the value about to be read as an
// RFC 6901 JSON Pointer.
func location(stack []frame) string {
	if len(stack) == 0 {
		return "the top level"
	}
	var b strings.Builder
	for i, f := range stack {
		last := i == len(stack)-1
		switch {
		case f.object && last && f.wantKey:
			// The location of the object itself.
		case f.object:
			b.WriteByte('/')
			b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(f.key))
		default:
			b.WriteByte('/')
			b.WriteString(strconv.Itoa(f.index))
		}
	}
	if b.Len() == 0 {
		return "the top level"
	}
	return quote(b.String())
}

// foldName returns a key that is equal for two names exactly when
// strings.EqualFold says they are equal: each rune is replaced by the
// smallest rune of its simple case folding orbit. encoding/json matches
// member names to struct fields with this equivalence.
func foldName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
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

// checkEscapes refuses \u escapes of unpaired surrogates in raw, the bytes
// the decoder consumed for one string token (leading separators and
// whitespace included; they hold no backslash). encoding/json would decode
// them to U+FFFD, so two different inputs would reach the handler alike.
func checkEscapes(raw []byte) error {
	if bytes.IndexByte(raw, '\\') < 0 {
		return nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i >= len(raw) || raw[i] != 'u' {
			continue // a two-character escape; the decoder checked it
		}
		u, ok := hex4(raw, i+1)
		if !ok {
			return errors.New("malformed \\u escape")
		}
		i += 4
		switch {
		case u >= 0xDC00 && u <= 0xDFFF:
			return fmt.Errorf("unpaired surrogate \\u%04x", u)
		case u >= 0xD800 && u <= 0xDBFF:
			if i+2 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return fmt.Errorf("unpaired surrogate \\u%04x", u)
			}
			low, ok := hex4(raw, i+3)
			if !ok || low < 0xDC00 || low > 0xDFFF {
				return fmt.Errorf("unpaired surrogate \\u%04x", u)
			}
			i += 6
		}
	}
	return nil
}

func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw[at:at+4]), 16, 16)
	return rune(v), err == nil
}

// unsafeInteger reports whether the JSON number token num has an integral
// value of magnitude above 2^53−1. It works on the decimal digits, so the
// answer is exact for any spelling and any exponent, and costs no big-number
// arithmetic an attacker could inflate.
func unsafeInteger(num string) bool {
	num = strings.TrimPrefix(num, "-")
	mantissa, expPart, _ := strings.Cut(strings.ToLower(num), "e")
	intPart, fracPart, _ := strings.Cut(mantissa, ".")

	// value = digits × 10^exp, with digits stripped of leading and trailing
	// zeros.
	digits := strings.TrimLeft(intPart+fracPart, "0")
	if digits == "" {
		return false // zero
	}
	var exp int64
	if expPart != "" {
		e, err := strconv.ParseInt(strings.TrimPrefix(expPart, "+"), 10, 32)
		if err != nil {
			// Beyond ±2^31: a huge integer or a tiny fraction.
			return !strings.HasPrefix(expPart, "-")
		}
		exp = e
	}
	exp -= int64(len(fracPart))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	digits = trimmed

	if exp < 0 {
		return false // not integral
	}
	width := int64(len(digits)) + exp // decimal digits of the integer
	switch {
	case width < int64(len(maxSafeInteger)):
		return false
	case width > int64(len(maxSafeInteger)):
		return true
	default:
		return digits+strings.Repeat("0", int(exp)) > maxSafeInteger
	}
}

// quote renders s for an error message: bounded so that a hostile document
// cannot flood logs, and in ASCII so that look-alikes (K and the Kelvin sign
// U+212A) read differently.
func quote(s string) string {
	return strconv.QuoteToASCII(truncateTo(s, 64))
}

func truncate(s string) string { return truncateTo(s, 64) }

func truncateTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
