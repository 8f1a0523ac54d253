package digest

import (
	"strconv"
)

// maxDigits is the most significant digits the shortest round-trip form of
// a double ever has.
const maxDigits = 17

// maxSafeInteger is 2^53−1, the largest integer every JSON implementation
// holds exactly (RFC 7493 §2.2).
const maxSafeInteger = "9007199254740991"

// decimal is a number reduced to its exact value: (−1 if neg) × 0.D × 10^exp,
// where D is the n significant digits, without leading or trailing zeros.
// Zero has n == 0. Only the first maxDigits digits are kept; a number with
// more is never the shortest form of a double.
type decimal struct {
	neg    bool
	n      int
	exp    int64
	digits [maxDigits]byte
}

// expLimit saturates exponents: a number of up to 2^32 digits with an
// exponent beyond it is out of any double's range either way, and the
// arithmetic below cannot overflow.
const expLimit = 1 << 40

// scanNumber returns the end of the RFC 8259 number that starts at doc[i],
// or -1 when the bytes there are not one.
func scanNumber(doc []byte, i int) int {
	// Most numbers are small integers: read them in one go.
	if j := i + 1; j < len(doc) && '1' <= doc[i] && doc[i] <= '9' {
		for j < len(doc) && '0' <= doc[j] && doc[j] <= '9' {
			j++
		}
		if j == len(doc) || doc[j] != '.' && doc[j] != 'e' && doc[j] != 'E' {
			return j
		}
	}
	digitsFrom := func(i int) int {
		for i < len(doc) && '0' <= doc[i] && doc[i] <= '9' {
			i++
		}
		return i
	}
	if i < len(doc) && doc[i] == '-' {
		i++
	}
	switch {
	case i < len(doc) && doc[i] == '0':
		i++
	case i < len(doc) && '1' <= doc[i] && doc[i] <= '9':
		i = digitsFrom(i)
	default:
		return -1
	}
	if i < len(doc) && doc[i] == '.' {
		j := digitsFrom(i + 1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(doc) && (doc[i] == 'e' || doc[i] == 'E') {
		i++
		if i < len(doc) && (doc[i] == '+' || doc[i] == '-') {
			i++
		}
		j := digitsFrom(i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

// canonicalInteger returns num as RFC 8785 writes it when num, a number that
// scanNumber accepted, is an integer of at most 15 digits without fraction
// or exponent, which is written as it is but for "-0".
func canonicalInteger(num []byte) ([]byte, bool) {
	digits := num
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) > 15 {
		return nil, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return nil, false
		}
	}
	if digits[0] == '0' {
		return digits, true // JSON allows no other leading zero
	}
	return num, true
}

// parseDecimal reduces a number that scanNumber accepted (or that
// strconv.AppendFloat wrote) to its exact value. It reads every byte once
// and allocates nothing, whatever the length of the number.
func parseDecimal(num []byte) decimal {
	var d decimal
	i := 0
	if num[0] == '-' {
		d.neg = true
		i++
	}
	// The value is the digit string A (integer then fraction digits)
	// × 10^(e − fraction digits).
	var (
		seen      int64 // digits of A read so far
		fraction  int64
		lastNZ    int64 = -1 // position in A of the last nonzero digit
		inFrac    bool
		firstNZAt int64 = -1
	)
	for ; i < len(num); i++ {
		c := num[i]
		if c == '.' {
			inFrac = true
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if inFrac {
			fraction++
		}
		if c != '0' {
			if firstNZAt < 0 {
				firstNZAt = seen
			}
			lastNZ = seen
		}
		if firstNZAt >= 0 && seen-firstNZAt < maxDigits {
			d.digits[seen-firstNZAt] = c
		}
		seen++
	}
	var e int64
	if i < len(num) { // 'e' or 'E'
		i++
		negExp := false
		if num[i] == '+' || num[i] == '-' {
			negExp = num[i] == '-'
			i++
		}
		for ; i < len(num); i++ {
			e = min(e*10+int64(num[i]-'0'), expLimit)
		}
		if negExp {
			e = -e
		}
	}
	if firstNZAt < 0 {
		return decimal{} // zero, whatever its sign
	}
	n := lastNZ - firstNZAt + 1
	d.n = int(n)
	for i := min(n, maxDigits); i < maxDigits; i++ {
		d.digits[i] = 0 // trailing zeros are not significant
	}
	// 0.D × 10^exp = D × 10^(exp−n) = A[firstNZ..lastNZ] × 10^(e − fraction + trailing zeros)
	d.exp = n + e - fraction + (seen - 1 - lastNZ)
	return d
}

// equal reports whether two decimals have the same value.
func (d *decimal) equal(o *decimal) bool {
	return d.n == o.n && d.exp == o.exp && (d.n == 0 || d.neg == o.neg) && d.digits == o.digits
}

// unsafeInteger reports whether d is an integer of magnitude above 2^53−1.
func (d *decimal) unsafeInteger() bool {
	switch {
	case d.n == 0 || d.exp < int64(d.n): // zero, or not integral
		return false
	case d.exp != int64(len(maxSafeInteger)):
		return d.exp > int64(len(maxSafeInteger))
	}
	var padded [len(maxSafeInteger)]byte
	for i := range padded {
		padded[i] = '0'
		if i < d.n {
			padded[i] = d.digits[i]
		}
	}
	return string(padded[:]) > maxSafeInteger
}

// shortest returns the decimal that RFC 8785 writes for the number num,
// already reduced to lit: the shortest form that round-trips to the double
// nearest to num. ok is false when num is beyond the range of a double. The
// number has an exact double when the result equals lit.
//
// Parsing allocates nothing unless lit has more than maxDigits digits, which
// checked JSON refuses before asking.
func (lit *decimal) shortest(num []byte) (d decimal, ok bool) {
	switch {
	case lit.n == 0:
		return *lit, true
	case lit.n <= 15 && -300 <= lit.exp && lit.exp <= 300:
		// A decimal of at most 15 significant digits in the normal range
		// is the shortest form of its nearest double: two such decimals
		// never round to the same double (DBL_DIG is 15), so a shorter
		// or closer form would be another one that does.
		return *lit, true
	case lit.n <= maxDigits && lit.exp > 310:
		return decimal{}, false
	case lit.n <= maxDigits && lit.exp < -330:
		return decimal{}, true // rounds to zero
	}
	var f float64
	var err error
	if lit.n <= maxDigits {
		// The same value in a few bytes: "0.D" "e" exp.
		var buf [32]byte
		b := append(buf[:0], '0', '.')
		b = append(b, lit.digits[:lit.n]...)
		b = append(b, 'e')
		b = strconv.AppendInt(b, lit.exp, 10)
		f, err = strconv.ParseFloat(string(b), 64)
		if lit.neg {
			f = -f
		}
	} else {
		f, err = strconv.ParseFloat(string(num), 64)
	}
	if err != nil {
		return decimal{}, false
	}
	var buf [32]byte
	return parseDecimal(strconv.AppendFloat(buf[:0], f, 'e', -1, 64)), true
}

// appendES6 appends d as ECMAScript's Number.prototype.toString writes it,
// which RFC 8785 §3.2.2.3 prescribes.
func (d *decimal) appendES6(b []byte) []byte {
	if d.n == 0 {
		return append(b, '0')
	}
	if d.neg {
		b = append(b, '-')
	}
	digits, n, k := d.digits[:d.n], d.exp, int64(d.n)
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, n-1, 10)
	}
	return b
}
