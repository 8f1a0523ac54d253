package digest

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"unicode/utf8"
)

// An index entry's level is the nesting level of the member's object, 1 at
// the top; lastMember marks the last member of its object.
const (
	levelMask  = 0x7f
	lastMember = 0x80
)

// index records where every member name starts, how deep its object is,
// and whether it is the object's last member, in document order, for a
// document that check accepted.
func (c *canonicalizer) index() {
	if c.members == 0 {
		return
	}
	c.names = make([]uint32, 0, c.members)
	c.levels = make([]uint8, 0, c.members)
	c.arena = make([]uint32, c.maxHeld)
	doc := c.doc
	var (
		objects uint64 // bit l−1 is set when the container at level l is an object
		latest  [maxDepth + 1]int32
		level   int
		name    bool
	)
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case '{':
			level++
			objects |= 1 << (level - 1)
			latest[level] = -1
			name = true
		case '[':
			level++
			objects &^= 1 << (level - 1)
			name = false
		case '}':
			if at := latest[level]; at >= 0 {
				c.levels[at] |= lastMember
			}
			level--
		case ']':
			level--
		case ',':
			name = objects&(1<<(level-1)) != 0
		case '"':
			if name {
				latest[level] = int32(len(c.names))
				c.names = append(c.names, uint32(i))
				c.levels = append(c.levels, uint8(level))
				name = false
			}
			i = c.stringEnd(i) - 1
		}
	}
}

// stringEnd returns the offset after the string whose opening quote is
// doc[i], in a document that check accepted.
func (c *canonicalizer) stringEnd(i int) int {
	for i++; ; i += 2 { // past a quote, then past each escape's backslash and the byte after it
		i = plainRun(c.doc, i)
		if c.doc[i] == '"' {
			return i + 1
		}
	}
}

// nextAtLevel returns the index of the first entry at or after r whose
// object is at level, or len(levels). It reads eight entries at a time.
func nextAtLevel(levels []uint8, r int, level uint8) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; r+8 <= len(levels); r += 8 {
		w := binary.LittleEndian.Uint64(levels[r:])&(levelMask*ones) ^ uint64(level)*ones
		if (w-ones)&^w&highs != 0 { // a zero byte: an entry at level
			break
		}
	}
	for ; r < len(levels) && levels[r]&levelMask != level; r++ {
	}
	return r
}

// emitValue writes the canonical form of the value at doc[i], depth
// containers deep. rec is the index of the first member name after i, and
// next the one after the value.
func (c *canonicalizer) emitValue(i, depth, rec int) (end, next int, err error) {
	doc := c.doc
	switch doc[i] {
	case '{':
		return c.emitObject(i, depth, rec)
	case '[':
		return c.emitArray(i, depth, rec)
	case '"':
		return c.emitString(i), rec, nil
	case 't':
		c.write(doc[i : i+len("true")])
		return i + len("true"), rec, nil
	case 'f':
		c.write(doc[i : i+len("false")])
		return i + len("false"), rec, nil
	case 'n':
		c.write(doc[i : i+len("null")])
		return i + len("null"), rec, nil
	}
	end = scanNumber(doc, i)
	if canonical, ok := canonicalInteger(doc[i:end]); ok {
		c.write(canonical)
		return end, rec, nil
	}
	lit := parseDecimal(doc[i:end])
	d, _ := lit.shortest(doc[i:end])
	c.reserve(32)
	c.buf = d.appendES6(c.buf)
	return end, rec, nil
}

func (c *canonicalizer) emitArray(i, depth, rec int) (int, int, error) {
	doc := c.doc
	c.put('[')
	i = c.skipSpace(i + 1)
	for k := 0; doc[i] != ']'; k++ {
		if k > 0 {
			c.put(',')
			i = c.skipSpace(i + 1)
		}
		c.path[depth] = step{name: -1, index: k}
		end, next, err := c.emitValue(i, depth+1, rec)
		if err != nil {
			return 0, 0, err
		}
		i, rec = c.skipSpace(end), next
	}
	c.put(']')
	return i + 1, rec, nil
}

// emitObject writes an object with its members sorted by name. Its members
// are the index entries from rec on at its level, up to the one marked as
// its last member; the entries between them belong to objects inside its
// values.
func (c *canonicalizer) emitObject(i, depth, rec int) (int, int, error) {
	doc := c.doc
	c.put('{')
	i = c.skipSpace(i + 1)
	if doc[i] == '}' {
		c.put('}')
		return i + 1, rec, nil
	}
	level := uint8(depth + 1)
	if rec >= len(c.names) || int(c.names[rec]) != i || c.levels[rec]&levelMask != level {
		return 0, 0, errInternal
	}
	base := c.held
	for r := rec; ; r = nextAtLevel(c.levels, r+1, level) {
		if r == len(c.levels) || c.held == len(c.arena) {
			return 0, 0, errInternal
		}
		c.arena[c.held] = uint32(r)
		c.held++
		if c.levels[r]&lastMember != 0 {
			break
		}
	}
	members := c.arena[base:c.held]
	last := members[len(members)-1] // in document order
	if err := c.checkDuplicates(members, depth); err != nil {
		return 0, 0, err
	}
	slices.SortFunc(members, func(a, b uint32) int { return c.compareNames(a, b, false) })

	end, next := 0, 0
	for k, m := range members {
		if k > 0 {
			c.put(',')
		}
		at := int(c.names[m])
		c.path[depth] = step{name: at}
		colon := c.skipSpace(c.emitString(at))
		c.put(':')
		valueEnd, valueNext, err := c.emitValue(c.skipSpace(colon+1), depth+1, int(m)+1)
		if err != nil {
			return 0, 0, err
		}
		if m == last {
			end, next = c.skipSpace(valueEnd)+1, valueNext // past the closing brace
		}
	}
	c.put('}')
	c.held = base
	return end, next, nil
}

// checkDuplicates refuses two members of one object with the same name, or,
// for checked JSON, names equal under case folding. It names the first
// member in document order whose name repeats an earlier one, as a reader
// going through the object would find it. It reorders members.
func (c *canonicalizer) checkDuplicates(members []uint32, depth int) error {
	if len(members) < 2 {
		return nil
	}
	fold := c.mode == checked
	slices.SortFunc(members, func(a, b uint32) int {
		return cmp.Or(c.compareNames(a, b, fold), cmp.Compare(a, b))
	})
	dup, first := -1, -1
	for k, group := 1, 0; k < len(members); k++ {
		if c.compareNames(members[k-1], members[k], fold) != 0 {
			group = k
			continue
		}
		if k == group+1 && (dup < 0 || int(members[k]) < dup) {
			dup, first = int(members[k]), int(members[group])
		}
	}
	if dup < 0 {
		return nil
	}
	name, prev := c.decodeName(int(c.names[dup])), c.decodeName(int(c.names[first]))
	if c.compareNames(uint32(dup), uint32(first), false) == 0 {
		return fmt.Errorf("%w: duplicate member name %s in the object at %s", ErrUnbindable, quote(name), c.location(depth))
	}
	return fmt.Errorf("%w: duplicate member name %s in the object at %s (equal to %s under case folding, as encoding/json matches names)",
		ErrUnbindable, quote(name), c.location(depth), quote(prev))
}

// compareNames orders the names of members a and b by their UTF-16 code
// units (RFC 8785 §3.2.3), or, with fold, by their runes case-folded. It
// decodes escapes as it goes and allocates nothing.
func (c *canonicalizer) compareNames(a, b uint32, fold bool) int {
	doc := c.doc
	i, j := int(c.names[a])+1, int(c.names[b])+1
	for {
		switch x, y := doc[i], doc[j]; {
		case x == y && x != '"' && x != '\\':
		case x < utf8.RuneSelf && y < utf8.RuneSelf && x != '\\' && y != '\\':
			if d := cmp.Compare(asciiKey(x, fold), asciiKey(y, fold)); d != 0 || x == '"' {
				return d
			}
		default:
			// A character that is escaped or not ASCII. The bytes before
			// it are equal, so both sides back up alike to the start of
			// a character whose first bytes matched.
			for !utf8.RuneStart(doc[i]) {
				i, j = i-1, j-1
			}
			ra, nextI := c.nextRune(i)
			rb, nextJ := c.nextRune(j)
			if fold {
				ra, rb = foldRune(ra), foldRune(rb)
			} else {
				ra, rb = utf16Key(ra), utf16Key(rb)
			}
			if ra != rb {
				return cmp.Compare(ra, rb) // the end of a name (-1) sorts first
			}
			if ra < 0 {
				return 0
			}
			i, j = nextI, nextJ
			continue
		}
		// Equal so far. Equal bytes outside escapes are equal characters,
		// and so are ASCII letters equal but for case when folding: skip
		// them eight at a time.
		for i, j = i+1, j+1; i+8 <= len(doc) && j+8 <= len(doc); i, j = i+8, j+8 {
			x, y := binary.LittleEndian.Uint64(doc[i:]), binary.LittleEndian.Uint64(doc[j:])
			if x != y && (!fold || !isASCII(x|y) || upperASCII(x) != upperASCII(y)) || hasQuoteOrBackslash(x) {
				break
			}
		}
	}
}

// isASCII reports whether every byte of w is ASCII.
func isASCII(w uint64) bool { return w&0x8080808080808080 == 0 }

// upperASCII maps the bytes a–z of w, all ASCII, to A–Z.
func upperASCII(w uint64) uint64 {
	const ones = 0x0101010101010101
	atLeastA := w + (0x80-'a')*ones   // high bit set where a byte is >= 'a'
	aboveZ := w + (0x80-('z'+1))*ones // high bit set where a byte is > 'z'
	lower := atLeastA &^ aboveZ & (0x80 * ones)
	return w - lower>>2 // 0x80>>2 is 'a'−'A'
}

// asciiKey orders an ASCII byte of a name as compareNames does; the closing
// quote sorts first.
func asciiKey(b byte, fold bool) int {
	switch {
	case b == '"':
		return -1
	case fold && 'a' <= b && b <= 'z':
		return int(b - ('a' - 'A'))
	}
	return int(b)
}

// emitString writes the string whose opening quote is doc[i] in canonical
// form and returns the offset after it.
func (c *canonicalizer) emitString(i int) int {
	doc := c.doc
	c.put('"')
	for i++; ; {
		start := i
		i = plainRun(doc, i)
		c.write(doc[start:i])
		if doc[i] == '"' {
			c.put('"')
			return i + 1
		}
		r, next := c.nextRune(i)
		c.reserve(utf8.UTFMax + 2)
		c.buf = appendCanonicalRune(c.buf, r)
		i = next
	}
}

func (c *canonicalizer) put(b byte) {
	c.reserve(1)
	c.buf = append(c.buf, b)
}

// reserve makes room for n bytes in the buffer.
func (c *canonicalizer) reserve(n int) {
	if cap(c.buf)-len(c.buf) < n {
		c.flush()
	}
}

func (c *canonicalizer) write(p []byte) {
	if len(p) > cap(c.buf)-len(c.buf) {
		c.flush()
		if len(p) >= cap(c.buf) {
			c.out.Write(p)
			c.written += int64(len(p))
			return
		}
	}
	c.buf = append(c.buf, p...)
}

func (c *canonicalizer) flush() {
	c.out.Write(c.buf)
	c.written += int64(len(c.buf))
	c.buf = c.buf[:0]
}
