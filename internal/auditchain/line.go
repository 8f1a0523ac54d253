package auditchain

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agentsafe/agentsafe/internal/digest"
)

// Entry is what verification needs of one stored record: where it is in
// the storage, its chain place as stored, and the hash its content gives.
type Entry struct {
	// Pos is the record's place in the insertion order: its line in a
	// file, its identity seq in PostgreSQL.
	Pos   int64
	Chain string
	Seq   uint64
	Prev  Hash
	// Stored is the hash the record carries; Computed the one its content
	// gives after Prev.
	Stored, Computed Hash
	// Checkpoint records: the time as stored and the signature; Final
	// for the last (the chain was closed).
	Checkpoint, Final bool
	Time              time.Time
	Signature         []byte
	// Problem, when not empty, says why the record's chain place could not
	// be read (a field missing or malformed): the record counts as
	// modified.
	Problem string
}

// ContentOK reports whether the record's content gives the hash it carries.
func (e *Entry) ContentOK() bool { return e.Problem == "" && e.Stored == e.Computed }

// errNotRecord is a line that is not a JSON object.
var errNotRecord = errors.New("not a JSON object")

// Unchained is returned for a JSON object without a chain member: a
// record written outside any chain.
var Unchained = errors.New("the record carries no chain")

// lineParser reads JSON Lines records. Lines the sinks wrote are in
// RFC 8785 form already, which a single pass checks while it finds the
// members; any other line (reformatted by hand, say) is canonicalized by
// package digest first.
type lineParser struct {
	h       hash.Hash
	chains  map[string]string // chain ids seen, so that each is allocated once
	members [48]member
	buf     []byte
}

// member is one top-level member of a line: offsets of its name (without
// the quotes) and of its value.
type member struct{ name0, name1, val0, val1 int }

// parse reads one line. An error means the line is not a record: not a
// JSON object ([errNotRecord], wrapped), or one without a chain
// ([Unchained]); a record whose chain fields are malformed is returned
// with Problem set.
func (p *lineParser) parse(line []byte, pos int64) (Entry, error) {
	e := Entry{Pos: pos}
	ms, ok := p.scanCanonical(line)
	canonical := line
	if !ok {
		c, err := digest.AppendCanonical(p.buf[:0], line)
		if err != nil {
			return e, fmt.Errorf("%w: %v", errNotRecord, err)
		}
		p.buf = c
		canonical = c
		if ms, ok = p.scanCanonical(c); !ok {
			return p.parseGeneric(e, c)
		}
	}
	var hashM, sigM *member
	var chainM, seqM, prevM, typeM, timeM *member
	for i := range ms {
		m := &ms[i]
		switch string(canonical[m.name0:m.name1]) {
		case hashName:
			hashM = m
		case signatureName:
			sigM = m
		case "chain":
			chainM = m
		case "chain_seq":
			seqM = m
		case "prev":
			prevM = m
		case "type":
			typeM = m
		case "time":
			timeM = m
		}
	}
	get := func(m *member) (string, bool) { return decodeString(canonical[m.val0:m.val1]) }
	if chainM == nil {
		return e, Unchained
	}
	var problems []string
	if raw := canonical[chainM.val0:chainM.val1]; len(raw) > 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		e.Chain = p.intern(raw[1 : len(raw)-1])
	} else if s, ok := get(chainM); ok && s != "" {
		e.Chain = s
	} else {
		return e, Unchained
	}
	if seqM == nil {
		problems = append(problems, "no chain_seq")
	} else if n, err := strconv.ParseUint(string(canonical[seqM.val0:seqM.val1]), 10, 64); err != nil || n == 0 {
		problems = append(problems, "chain_seq is not a positive integer")
	} else {
		e.Seq = n
	}
	if prevM == nil {
		problems = append(problems, "no prev")
	} else if s, _ := get(prevM); !parseHashInto(&e.Prev, s) {
		problems = append(problems, "prev is not a hash")
	}
	if hashM == nil {
		problems = append(problems, "no hash")
	} else if s, _ := get(hashM); !parseHashInto(&e.Stored, s) {
		problems = append(problems, "hash is not a hash")
	}
	if typeM != nil {
		switch string(canonical[typeM.val0:typeM.val1]) {
		case `"` + CheckpointType + `"`:
			e.Checkpoint = true
		case `"` + CloseType + `"`:
			e.Checkpoint, e.Final = true, true
		}
	}
	if e.Checkpoint {
		if timeM == nil {
			problems = append(problems, "checkpoint without a time")
		} else if s, _ := get(timeM); !parseStoredTime(&e.Time, s) {
			problems = append(problems, "checkpoint time is not "+TimeLayout)
		}
		if sigM != nil {
			s, _ := get(sigM)
			e.Signature = decodeSignature(s)
		}
	}
	if len(problems) > 0 {
		e.Problem = joinProblems(problems)
	}
	// The hash covers the line without its hash and signature members.
	p.h.Reset()
	p.h.Write([]byte(hashTag))
	p.h.Write(e.Prev[:])
	at := 0
	for _, m := range []*member{hashM, sigM} { // hash sorts before signature
		if m == nil {
			continue
		}
		from, to := m.name0-1, m.val1 // the member, from its opening quote
		if canonical[to] == ',' {
			to++ // and the comma after it
		} else if canonical[from-1] == ',' {
			from-- // or, last in the object, the comma before it
		}
		p.h.Write(canonical[at:from])
		at = to
	}
	p.h.Write(canonical[at:])
	p.h.Sum(e.Computed[:0])
	return e, nil
}

// decodeSignature reads a checkpoint's signature; one that is not
// base64 reads as a signature that verifies under no key (never as none).
func decodeSignature(s string) []byte {
	sig, err := base64.StdEncoding.DecodeString(s)
	if err != nil || sig == nil {
		return []byte("not a signature")
	}
	return sig
}

// intern returns b as a string, allocated once per distinct value.
func (p *lineParser) intern(b []byte) string {
	if s, ok := p.chains[string(b)]; ok {
		return s
	}
	s := string(b)
	p.chains[s] = s
	return s
}

func joinProblems(ps []string) string {
	var b bytes.Buffer
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p)
	}
	return b.String()
}

// parseHashInto reads s into h.
func parseHashInto(h *Hash, s string) bool {
	v, ok := ParseHash(s)
	*h = v
	return ok
}

// parseStoredTime reads a time written with TimeLayout.
func parseStoredTime(t *time.Time, s string) bool {
	v, err := time.Parse(TimeLayout, s)
	if err != nil || len(s) != len(TimeLayout) {
		return false
	}
	*t = v
	return true
}

// scanCanonical reads line as an object in the RFC 8785 form the sinks
// write: no whitespace, ASCII member names in strictly increasing order,
// strings escaped as RFC 8785 escapes them, integers of at most 2^53−1,
// true, false and null, and arrays of strings; nothing else nested. It reports false for anything
// else, which may still be JSON (package digest decides).
func (p *lineParser) scanCanonical(line []byte) ([]member, bool) {
	n := len(line)
	if n < 2 || line[0] != '{' || line[n-1] != '}' || !utf8.Valid(line) {
		return nil, false
	}
	ms := p.members[:0]
	i := 1
	var last []byte
	for {
		if i >= n-1 || line[i] != '"' || len(ms) == len(p.members) {
			return nil, false
		}
		i++
		name0 := i
		for i < n && line[i] != '"' {
			if c := line[i]; c < 0x20 || c >= 0x7f || c == '\\' {
				return nil, false
			}
			i++
		}
		if i >= n {
			return nil, false
		}
		name := line[name0:i]
		if last != nil && bytes.Compare(last, name) >= 0 {
			return nil, false
		}
		last = name
		i++
		if i >= n || line[i] != ':' {
			return nil, false
		}
		i++
		val0 := i
		end, ok := scanValue(line, i)
		if !ok {
			return nil, false
		}
		ms = append(ms, member{name0, val0 - 2, val0, end})
		i = end
		if i >= n {
			return nil, false
		}
		if line[i] == '}' {
			if i != n-1 {
				return nil, false
			}
			return ms, true
		}
		if line[i] != ',' {
			return nil, false
		}
		i++
	}
}

// scanValue reads one canonical scalar from line[i:] and returns where it
// ends.
func scanValue(line []byte, i int) (int, bool) {
	n := len(line)
	if i >= n {
		return i, false
	}
	switch c := line[i]; {
	case c == '[':
		// An array of strings (a record's altered fields).
		i++
		if i < n && line[i] == ']' {
			return i + 1, true
		}
		for i < n && line[i] == '"' {
			end, ok := scanValue(line, i)
			if !ok || end >= n {
				return end, false
			}
			switch line[end] {
			case ']':
				return end + 1, true
			case ',':
				i = end + 1
			default:
				return end, false
			}
		}
		return i, false
	case c == '"':
		i++
		for i < n {
			if i = digest.PlainRun(line, i); i >= n {
				break
			}
			c := line[i]
			switch {
			case c == '"':
				return i + 1, true
			case c < 0x20:
				return i, false
			case c == '\\':
				if i+1 >= n {
					return i, false
				}
				switch line[i+1] {
				case '"', '\\', 'b', 'f', 'n', 'r', 't':
					i += 2
				case 'u':
					// Only a control character without a short escape.
					if i+5 >= n || line[i+2] != '0' || line[i+3] != '0' || (line[i+4] != '0' && line[i+4] != '1') || !lowerHex(line[i+5]) {
						return i, false
					}
					switch v := unhex(line[i+4])<<4 | unhex(line[i+5]); v {
					case '\b', '\f', '\n', '\r', '\t':
						return i, false
					}
					i += 6
				default:
					return i, false
				}
			default:
				i++
			}
		}
		return i, false
	case c == '-' || c >= '0' && c <= '9':
		start := i
		if c == '-' {
			i++
		}
		d0 := i
		for i < n && line[i] >= '0' && line[i] <= '9' {
			i++
		}
		digits := line[d0:i]
		if len(digits) == 0 || len(digits) > 16 || digits[0] == '0' && (len(digits) > 1 || c == '-') {
			return i, false
		}
		if v, err := strconv.ParseInt(string(line[start:i]), 10, 64); err != nil || v > 1<<53-1 || v < -(1<<53-1) {
			return i, false
		}
		return i, true
	case bytes.HasPrefix(line[i:], []byte("true")):
		return i + 4, true
	case bytes.HasPrefix(line[i:], []byte("false")):
		return i + 5, true
	case bytes.HasPrefix(line[i:], []byte("null")):
		return i + 4, true
	}
	return i, false
}

// plain marks the bytes a canonical string holds as they are: all but
// the quote, the backslash and the control characters.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

func lowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// decodeString decodes a canonical JSON string value (with its quotes);
// false when the value is not a string.
func decodeString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v[1:len(v)-1], '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false
	}
	return s, true
}

// parseGeneric reads a canonical record that scanCanonical does not (it
// nests, or has names beyond ASCII): the chain fields through
// encoding/json, the hash over the canonical form without the hash and
// signature members.
func (p *lineParser) parseGeneric(e Entry, canonical []byte) (Entry, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &m); err != nil {
		return e, fmt.Errorf("%w: %v", errNotRecord, err)
	}
	str := func(name string) (string, bool) {
		raw, ok := m[name]
		if !ok {
			return "", false
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	}
	chain, ok := str("chain")
	if !ok || chain == "" {
		return e, Unchained
	}
	e.Chain = chain
	var problems []string
	if n, err := strconv.ParseUint(string(m["chain_seq"]), 10, 64); err != nil || n == 0 {
		problems = append(problems, "chain_seq is not a positive integer")
	} else {
		e.Seq = n
	}
	if s, _ := str("prev"); !parseHashInto(&e.Prev, s) {
		problems = append(problems, "prev is not a hash")
	}
	if s, _ := str(hashName); !parseHashInto(&e.Stored, s) {
		problems = append(problems, "hash is not a hash")
	}
	if s, _ := str("type"); IsCheckpoint(s) {
		e.Checkpoint, e.Final = true, s == CloseType
		if s, _ := str("time"); !parseStoredTime(&e.Time, s) {
			problems = append(problems, "checkpoint time is not "+TimeLayout)
		}
		if s, ok := str(signatureName); ok {
			e.Signature = decodeSignature(s)
		} else if _, ok := m[signatureName]; ok {
			e.Signature = decodeSignature("")
		}
	}
	if len(problems) > 0 {
		e.Problem = joinProblems(problems)
	}
	delete(m, hashName)
	delete(m, signatureName)
	rest, err := json.Marshal(m)
	if err == nil {
		rest, err = digest.AppendCanonical(nil, rest)
	}
	if err != nil {
		return e, fmt.Errorf("%w: %v", errNotRecord, err)
	}
	e.Computed = sumRecord(p.h, e.Prev, rest)
	return e, nil
}
