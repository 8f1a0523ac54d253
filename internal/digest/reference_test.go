package digest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// referenceIJSON is an independent, slow statement of the I-JSON checks in
// the package documentation, for the differential fuzz target: it walks the
// document with encoding/json, the decoder handlers use, and decides numbers
// with exact rational arithmetic. It returns nil for a document that binds
// (given that RFC 8785 canonicalizes it), and how deep a well-formed
// document nests.
func referenceIJSON(doc []byte) (depth int, err error) {
	if !utf8.Valid(doc) {
		return 0, errors.New("invalid UTF-8")
	}
	var problem error // the first I-JSON problem; the walk goes on to measure depth
	note := func(err error) {
		if problem == nil {
			problem = err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	type frame struct {
		object  bool
		names   map[string]bool
		wantKey bool
	}
	var stack []frame
	values := 0
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 || values == 0 {
				return depth, errors.New("incomplete")
			}
			if depth > 64 {
				note(errors.New("nesting deeper than 64"))
			}
			return depth, problem
		}
		if err != nil {
			return depth, err
		}
		if len(stack) == 0 && values > 0 {
			return depth, errors.New("trailing data")
		}
		closed := func() {
			if len(stack) == 0 {
				values++
				return
			}
			f := &stack[len(stack)-1]
			f.wantKey = f.object
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				closed()
				continue
			}
			name := tok.(string)
			if err := referenceEscapes(doc[start:dec.InputOffset()]); err != nil {
				note(err)
			}
			folded := referenceFold(name)
			if stack[n-1].names[folded] {
				note(fmt.Errorf("duplicate name %q", name))
			}
			if stack[n-1].names == nil {
				stack[n-1].names = make(map[string]bool)
			}
			stack[n-1].names[folded] = true
			stack[n-1].wantKey = false
			continue
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{', '[':
				stack = append(stack, frame{object: tok == '{', wantKey: tok == '{'})
				depth = max(depth, len(stack))
			default:
				stack = stack[:len(stack)-1]
				closed()
			}
		case string:
			if err := referenceEscapes(doc[start:dec.InputOffset()]); err != nil {
				note(err)
			}
			closed()
		case json.Number:
			if err := referenceNumber(string(tok)); err != nil {
				note(err)
			}
			closed()
		default:
			closed()
		}
	}
}

// referenceFold maps a name to a key that is equal for two names exactly
// when strings.EqualFold says they are equal.
func referenceFold(name string) string {
	var b strings.Builder
	for _, r := range name {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// referenceEscapes refuses \u escapes of unpaired surrogates in the raw
// bytes of one string token.
func referenceEscapes(raw []byte) error {
	s := string(raw)
	for i := strings.IndexByte(s, '\\'); i >= 0 && i < len(s); {
		if s[i] != '\\' {
			i++
			continue
		}
		if s[i+1] != 'u' {
			i += 2
			continue
		}
		u, _ := strconv.ParseUint(s[i+2:i+6], 16, 16)
		i += 6
		switch {
		case 0xDC00 <= u && u <= 0xDFFF:
			return errors.New("unpaired low surrogate")
		case 0xD800 <= u && u <= 0xDBFF:
			if !strings.HasPrefix(s[i:], `\u`) {
				return errors.New("unpaired high surrogate")
			}
			low, _ := strconv.ParseUint(s[i+2:i+6], 16, 16)
			if low < 0xDC00 || low > 0xDFFF {
				return errors.New("unpaired high surrogate")
			}
			i += 6
		}
	}
	return nil
}

// referenceNumber refuses integers beyond ±(2^53−1) and numbers whose exact
// value differs from that of the shortest round-trip form of their nearest
// double, with big.Rat arithmetic.
func referenceNumber(num string) error {
	value, beyond := referenceRat(num)
	switch {
	case beyond > 0:
		return errors.New("an integer beyond any double")
	case beyond < 0:
		return errors.New("a fraction below any double")
	case value.IsInt() && new(big.Int).Abs(value.Num()).Cmp(big.NewInt(1<<53-1)) > 0:
		return errors.New("unsafe integer")
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return err
	}
	if short, _ := referenceRat(strconv.FormatFloat(f, 'g', -1, 64)); value.Cmp(short) != 0 {
		return errors.New("not exactly a double")
	}
	return nil
}

// referenceRat returns the exact value of a JSON number, unless it is
// nonzero and its magnitude is beyond 10^400 (beyond > 0) or below 10^−400
// (beyond < 0), where no double is exact and big.Rat would need an
// attacker-sized exponent.
func referenceRat(num string) (value *big.Rat, beyond int) {
	mantissa, exp, _ := strings.Cut(strings.ToLower(num), "e")
	intPart, frac, _ := strings.Cut(strings.TrimPrefix(mantissa, "-"), ".")
	first := strings.IndexFunc(intPart+frac, func(r rune) bool { return r != '0' })
	if first < 0 {
		return new(big.Rat), 0
	}
	var e int64
	if exp != "" {
		// ParseInt saturates on overflow; beyond 400 + len(num) the
		// magnitude is beyond 400 whatever the digits.
		e, _ = strconv.ParseInt(exp, 10, 64)
		e = max(-401-int64(len(num)), min(e, 401+int64(len(num))))
	}
	// The value is in [10^(magnitude−1), 10^magnitude).
	switch magnitude := e + int64(len(intPart)) - int64(first); {
	case magnitude > 400:
		return nil, 1
	case magnitude < -400:
		return nil, -1
	}
	value, _ = new(big.Rat).SetString(num)
	return value, 0
}
