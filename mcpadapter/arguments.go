package mcpadapter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// protojsonError matches protojson's error text: a position in the input,
// then the problem. protojson separates its prefix with a non-breaking
// space on purpose, so that nobody relies on its exact text; this parse
// falls back to the whole text when it no longer matches.
var protojsonError = regexp.MustCompile(`^proto:[\s\x{00a0}]*(?:syntax error[\s\x{00a0}]*)?\(line (\d+):(\d+)\):[\s\x{00a0}]*(.*)$`)

// argumentError says what is wrong with a tool's arguments, naming the
// argument by its path ("items[2].quantity"). protojson's errors carry a
// position in the input rather than a path, and some name no field at all
// (an invalid Duration), so the position is mapped back to the argument
// it falls in.
func argumentError(args []byte, err error) string {
	m := protojsonError.FindStringSubmatch(err.Error())
	if m == nil {
		return "invalid arguments: " + strings.TrimLeft(strings.TrimPrefix(err.Error(), "proto:"), " \u00a0")
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	if path := pathAt(args, offsetOf(args, line, col)); path != "" {
		return fmt.Sprintf("invalid argument %q: %s", path, m[3])
	}
	return "invalid arguments: " + m[3]
}

// offsetOf turns protojson's 1-based line and rune column into a byte
// offset.
func offsetOf(data []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return len(data)
		}
		off += i + 1
	}
	for c := 1; c < col && off < len(data); c++ {
		_, size := utf8.DecodeRune(data[off:])
		off += size
	}
	return off
}

// pathAt returns the path of the JSON member or element at byte offset
// off of data: the key when off falls on a key, the value's path when it
// falls on a value.
func pathAt(data []byte, off int) string {
	type frame struct {
		object  bool
		key     string
		index   int
		wantKey bool
	}
	var stack []frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				fmt.Fprintf(&b, "[%d]", f.index)
			}
		}
		return b.String()
	}
	advance := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	last := ""
	for {
		tok, err := dec.Token()
		if err != nil {
			return last
		}
		passed := int(dec.InputOffset()) > off
		switch {
		case tok == json.Delim('}') || tok == json.Delim(']'):
			stack = stack[:len(stack)-1]
			if passed {
				return path()
			}
			advance()
			continue
		case len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].wantKey:
			stack[len(stack)-1].key, _ = tok.(string)
			stack[len(stack)-1].wantKey = false
			last = path()
			if passed {
				return last
			}
			continue
		}
		last = path()
		if passed {
			return last
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		default:
			advance()
		}
	}
}
