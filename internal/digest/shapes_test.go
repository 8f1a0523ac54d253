package digest_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// shape is a JSON document built to stress one part of checking and
// digesting: how much it allocates or how long it takes.
type shape struct {
	name     string
	doc      []byte
	accepted bool
}

// shapes returns documents of about size bytes each, ordinary and hostile.
func shapes(size int) []shape {
	chain := func(open, leaf, close string, levels int) string {
		return strings.Repeat(open, levels) + leaf + strings.Repeat(close, levels)
	}
	long := strings.Repeat("p", 1000)
	return []shape{
		{"ordinary request", realisticDocument(size), true},
		{"nesting at the limit", repeatIn("[", chain("[", "0", "]", 63)+",", "0]", size), true},
		{"nesting beyond the limit", bytes.Repeat([]byte("["), size), false},
		{"nesting beyond the limit, closed", []byte(chain("[", "0", "]", size/2)), false},
		{"objects nested at the limit", repeatIn("[", chain(`{"a":`, "0", "}", 63)+",", "0]", size), true},
		{"member chains of five bytes a member", repeatIn("[", chain(`{"":`, "0", "}", 63)+",", "0]", size), true},
		{"tree of two-member objects", []byte(tree(size)), true},
		{"one long string", []byte(`"` + strings.Repeat("x", size-2) + `"`), true},
		{"one long non-ASCII string", []byte(`"` + strings.Repeat("é", size/2-1) + `"`), true},
		{"many escapes", repeatIn(`"`, `\u00e9\n\"\ud83d\ude00\/`, `"`, size), true},
		{"control characters escaped", repeatIn(`"`, `\u0001\u001f`, `"`, size), true},
		{"many small numbers", repeatIn("[", "1,", "0]", size), true},
		{"numbers that expand", repeatIn("[", "1e15,", "0]", size), true},
		{"fractions that expand", repeatIn("[", "1e-6,", "0]", size), true},
		{"seventeen-digit numbers", repeatIn("[", "0.30000000000000004,", "0]", size), true},
		{"long number", []byte("0." + strings.Repeat("1", size-2)), false},
		{"long number of zeros", []byte("0." + strings.Repeat("0", size-2)), true},
		{"many keys in one object", manyKeys(size, func(int) string { return "" }), true},
		{"keys with a long common prefix", manyKeys(size, func(int) string { return long }), true},
		{"keys equal under case folding up to a long prefix", manyKeys(size, func(i int) string {
			if i%2 == 0 {
				return long
			}
			return strings.ToUpper(long)
		}), true},
		{"keys needing UTF-16 sort", utf16Keys(size), true},
		{"duplicate name at the end of a big object", duplicateAtEnd(size), false},
		{"many small objects", repeatIn("[", `{"a":0},`, "{}]", size), true},
		{"many empty objects", repeatIn("[", `{},`, "{}]", size), true},
		{"wide array", repeatIn("[", "null,", "null]", size), true},
		{"wide array of empty arrays", repeatIn("[", "[],", "[]]", size), true},
		{"deep objects holding a big array", []byte(chain(`{"a":`, string(repeatIn("[", "0,", "0]", size)), "}", 63)), true},
		{"deep objects holding a big object", []byte(chain(`{"a":`, string(manyKeys(size, func(int) string { return "" })), `,"z":0}`, 63)), true},
		{"whitespace", repeatIn("[", " 0 ,\n\t", "0]", size), true},
	}
}

// repeatIn returns open + unit repeated + close, about size bytes long.
func repeatIn(open, unit, close string, size int) []byte {
	n := max(1, (size-len(open)-len(close))/len(unit))
	var b bytes.Buffer
	b.Grow(len(open) + n*len(unit) + len(close))
	b.WriteString(open)
	for range n {
		b.WriteString(unit)
	}
	b.WriteString(close)
	return b.Bytes()
}

// tree returns nested objects of two members each, about size bytes.
func tree(size int) string {
	s := "0"
	for len(s)*2+10 <= size {
		s = `{"":` + s + `,"a":` + s + `}`
	}
	return s
}

// manyKeys returns one object with distinct names (prefix(i) + i) and zero
// values, about size bytes, members in descending order.
func manyKeys(size int, prefix func(int) string) []byte {
	var names []string
	total := 2
	for i := 0; total < size; i++ {
		name := prefix(i) + strconv.FormatInt(int64(i), 36)
		names = append(names, name)
		total += len(name) + 5
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i := len(names) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "%q:0", names[i])
		if i > 0 {
			b.WriteByte(',')
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// utf16Keys returns one object whose names start with characters that sort
// differently by code point and by UTF-16 code unit (U+FF5E and U+1F600).
func utf16Keys(size int) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; b.Len() < size-40; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		lead := "\uff5e"
		if i%2 == 1 {
			lead = "\U0001f600"
		}
		fmt.Fprintf(&b, `"%s%s":%d`, lead, strconv.FormatInt(int64(i/2), 36), i%10)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// duplicateAtEnd returns a big object whose last member repeats its first.
func duplicateAtEnd(size int) []byte {
	doc := manyKeys(size, func(int) string { return "" })
	first := doc[1:bytes.IndexByte(doc, ':')]
	return append(append(append(doc[:len(doc)-1], ','), first...), ":1}"...)
}

// realisticDocument returns an array of order requests, about size bytes.
func realisticDocument(size int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := 0; b.Len() < size-1100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		body := benchmarkBody(1024)
		b.Write(body)
	}
	b.WriteByte(']')
	return b.Bytes()
}
