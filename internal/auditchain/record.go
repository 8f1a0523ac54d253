package auditchain

import (
	"encoding/hex"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agentsafe/agentsafe/internal/storable"
	"github.com/agentsafe/agentsafe/middleware"
)

// Field is one field of a stored record. The fields are numbered in the
// order of their names, which is the order RFC 8785 writes them in, so a
// record is written by walking them once.
type Field uint8

// The fields of a record, in name order. Type, Time, ExecutionID and
// Procedure are present on every event record; the others only when they
// hold something (PostgreSQL stores NULL for them otherwise). A
// checkpoint record has Chain, ChainSeq, Prev, Time and Type.
const (
	ActorID Field = iota
	ActorTenant
	Altered
	ApprovalID
	ApproverID
	ApproverTenant
	Attempt
	Attempts
	Budget
	BudgetAmount
	BudgetLimit
	BudgetSpent
	Chain
	ChainSeq
	Code
	Comment
	DurationUS
	Error
	ExecutionID
	InputDigest
	Prev
	PreviousErrorCode
	Procedure
	Reason
	ReplayOf
	RetryAfterUS
	Retryable
	Risk
	SideEffect
	Stack
	Succeeded
	Time
	Type
	numFields
)

// kind is how a field's value is written.
type kind uint8

const (
	kString kind = iota
	kInt
	kBool
	kTime
	kHash
	kStrings
)

var fields = [numFields]struct {
	name string
	kind kind
}{
	ActorID:           {"actor_id", kString},
	ActorTenant:       {"actor_tenant", kString},
	Altered:           {"altered", kStrings},
	ApprovalID:        {"approval_id", kString},
	ApproverID:        {"approver_id", kString},
	ApproverTenant:    {"approver_tenant", kString},
	Attempt:           {"attempt", kInt},
	Attempts:          {"attempts", kInt},
	Budget:            {"budget", kString},
	BudgetAmount:      {"budget_amount", kInt},
	BudgetLimit:       {"budget_limit", kInt},
	BudgetSpent:       {"budget_spent", kInt},
	Chain:             {"chain", kString},
	ChainSeq:          {"chain_seq", kInt},
	Code:              {"code", kString},
	Comment:           {"comment", kString},
	DurationUS:        {"duration_us", kInt},
	Error:             {"error", kString},
	ExecutionID:       {"execution_id", kString},
	InputDigest:       {"input_digest", kString},
	Prev:              {"prev", kHash},
	PreviousErrorCode: {"previous_error_code", kString},
	Procedure:         {"procedure", kString},
	Reason:            {"reason", kString},
	ReplayOf:          {"replay_of", kString},
	RetryAfterUS:      {"retry_after_us", kInt},
	Retryable:         {"retryable", kBool},
	Risk:              {"risk", kString},
	SideEffect:        {"side_effect", kString},
	Stack:             {"stack", kString},
	Succeeded:         {"succeeded", kBool},
	Time:              {"time", kTime},
	Type:              {"type", kString},
}

// Name is the field's name in a stored record.
func (f Field) Name() string { return fields[f].name }

// The members a line carries besides the record's fields: they are not
// hashed (the hash cannot cover itself, and a checkpoint's signature is
// over its hash).
const (
	hashName      = "hash"
	signatureName = "signature"
)

// The types of checkpoint records: CloseType is the last checkpoint of a
// chain, written when its sink closes; no record may follow it.
const (
	CheckpointType = "audit.checkpoint"
	CloseType      = "audit.close"
)

// IsCheckpoint reports whether a record of type typ is a checkpoint.
func IsCheckpoint(typ string) bool { return typ == CheckpointType || typ == CloseType }

// IsCheckpoint reports whether r is a checkpoint record.
func (r *Record) IsCheckpoint() bool { return IsCheckpoint(r.strs[Type]) }

// TimeLayout is how a record's time is written: RFC 3339 in UTC with
// exactly six fractional digits, PostgreSQL's precision.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// Record is one audit record as a durable sink stores it: each field
// absent or holding a value, in the form it is read back (times at
// microsecond precision, strings as stored).
type Record struct {
	set  uint64
	strs [numFields]string
	ints [numFields]int64
	time time.Time
	prev Hash
	list []string // Altered
}

// Has reports whether f is present.
func (r *Record) Has(f Field) bool { return r.set&(1<<f) != 0 }

// Del makes f absent.
func (r *Record) Del(f Field) { r.set &^= 1 << f }

// SetString sets the string field f to s, present even when empty.
func (r *Record) SetString(f Field, s string) { r.strs[f] = s; r.set |= 1 << f }

// SetInt sets the integer field f.
func (r *Record) SetInt(f Field, n int64) { r.ints[f] = n; r.set |= 1 << f }

// SetBool sets the boolean field f.
func (r *Record) SetBool(f Field, b bool) {
	r.ints[f] = 0
	if b {
		r.ints[f] = 1
	}
	r.set |= 1 << f
}

// SetTime sets the record's time, truncated to microseconds, in UTC.
func (r *Record) SetTime(t time.Time) { r.time = StoredTime(t); r.set |= 1 << Time }

// SetStrings sets the list field f (Altered), present even when empty.
func (r *Record) SetStrings(f Field, l []string) { r.list = l; r.set |= 1 << f }

// Strings returns the list field f (nil when absent).
func (r *Record) Strings(Field) []string { return r.list }

// SetPrev sets the prev field.
func (r *Record) SetPrev(h Hash) { r.prev = h; r.set |= 1 << Prev }

// PrevValue returns the prev field (zero when absent).
func (r *Record) PrevValue() Hash { return r.prev }

// String returns the string field f ("" when absent).
func (r *Record) String(f Field) string { return r.strs[f] }

// Int returns the integer field f (0 when absent).
func (r *Record) Int(f Field) int64 { return r.ints[f] }

// Bool returns the boolean field f (false when absent).
func (r *Record) Bool(f Field) bool { return r.ints[f] != 0 }

// TimeValue returns the record's time (the zero time when absent).
func (r *Record) TimeValue() time.Time { return r.time }

// StoredTime is t as PostgreSQL stores a timestamptz: truncated to
// microseconds, in UTC.
func StoredTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

// setNonEmpty sets the string field f when s is not empty: what the
// PostgreSQL sink stores as NULL is absent.
func (r *Record) setNonEmpty(f Field, s string) {
	if s != "" {
		r.SetString(f, s)
	}
}

// The range of PostgreSQL's timestamptz: 4713 BC to 294276 AD. Both
// sinks clamp to it, so that one event is one record in either.
var (
	minTime = time.Date(-4712, time.November, 24, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(294276, time.December, 31, 23, 59, 59, 999999000, time.UTC)
)

// FromEvent returns the record of e as the durable sinks store it: each
// string made storable by package storable (escaped where it holds a NUL
// byte or bytes that are not UTF-8, cut at its limit: 1 KiB for ids, names
// and codes, 16 KiB for an error, a comment or a reason, 64 KiB for a
// stack), a time PostgreSQL cannot represent clamped to its range, what
// was altered listed in Altered ("error:escaped", "at:clamped", …); what
// the PostgreSQL sink stores as NULL absent; times and durations at
// microsecond precision.
func FromEvent(e middleware.Event) Record {
	var r Record
	r.setEvent(e)
	return r
}

// AppendEvents appends the records of events to recs, as [FromEvent]
// makes them (built in place: a record is large).
func AppendEvents(recs []Record, events []middleware.Event) []Record {
	for _, e := range events {
		recs = append(recs, Record{})
		recs[len(recs)-1].setEvent(e)
	}
	return recs
}

// setEvent makes r, a zero record, the record of e.
func (r *Record) setEvent(e middleware.Event) {
	var m storable.Marks
	id := func(field, v string) string { return m.Text(field, v, storable.IDMax) }
	text := func(field, v string) string { return m.Text(field, v, storable.TextMax) }
	r.SetString(Type, id("type", string(e.Type)))
	r.SetString(ExecutionID, id("execution_id", e.ExecutionID))
	r.SetString(Procedure, id("procedure", e.Procedure))
	switch {
	case e.Time.Before(minTime):
		r.SetTime(minTime)
		m = append(m, "at:clamped")
	case e.Time.After(maxTime):
		r.SetTime(maxTime)
		m = append(m, "at:clamped")
	default:
		r.SetTime(e.Time)
	}
	r.setNonEmpty(ActorID, id("actor_id", e.Actor.ID))
	r.setNonEmpty(ActorTenant, id("actor_tenant", e.Actor.Tenant))
	r.setNonEmpty(InputDigest, id("input_digest", e.InputDigest))
	if e.SideEffect != middleware.SideEffectUnspecified {
		r.SetString(SideEffect, e.SideEffect.String())
	}
	r.setNonEmpty(Risk, e.Risk.String())
	if e.Attempt != 0 {
		r.SetInt(Attempt, int64(clampInt32(e.Attempt)))
	}
	if e.Attempts != 0 {
		r.SetInt(Attempts, int64(clampInt32(e.Attempts)))
	}
	if e.PreviousErrorCode != middleware.CodeOK {
		r.SetString(PreviousErrorCode, e.PreviousErrorCode.String())
	}
	if e.Code != middleware.CodeOK {
		r.SetString(Code, e.Code.String())
		r.SetBool(Retryable, e.Retryable)
	}
	if us := e.Duration / time.Microsecond; us != 0 {
		r.SetInt(DurationUS, int64(us))
	}
	r.setNonEmpty(ApprovalID, id("approval_id", e.ApprovalID))
	r.setNonEmpty(ApproverID, id("approver_id", e.Approver.ID))
	r.setNonEmpty(ApproverTenant, id("approver_tenant", e.Approver.Tenant))
	r.setNonEmpty(Comment, text("comment", e.Comment))
	r.setNonEmpty(Reason, text("reason", e.Reason))
	if e.Type == middleware.EventAbandonedResult {
		r.SetBool(Succeeded, e.Succeeded)
	}
	r.setNonEmpty(Error, text("error", e.Error))
	r.setNonEmpty(ReplayOf, id("replay_of", e.ReplayOf))
	r.setNonEmpty(Stack, m.Text("stack", e.Stack, storable.StackMax))
	if e.Budget != "" {
		r.SetString(Budget, id("budget", e.Budget))
		r.SetInt(BudgetAmount, exactInt(&m, "budget_amount", e.Amount))
		r.SetInt(BudgetSpent, exactInt(&m, "budget_spent", e.Spent))
		r.SetInt(BudgetLimit, exactInt(&m, "budget_limit", e.Limit))
	}
	if us := e.RetryAfter / time.Microsecond; us != 0 {
		r.SetInt(RetryAfterUS, int64(us))
	}
	if len(m) > 0 {
		r.SetStrings(Altered, m)
	}
}

// exactInt is n within ±(2^53−1), the integers RFC 8785 writes exactly
// (a JSON number is a double), noting field as clamped in m when it was
// not: a budget's amounts are int64.
func exactInt(m *storable.Marks, field string, n int64) int64 {
	const most = 1<<53 - 1
	if n > most || n < -most {
		*m = append(*m, field+":clamped")
		return max(min(n, most), -most)
	}
	return n
}

// clampInt32 is n within int32, as PostgreSQL's integer holds it: counts
// the engine keeps small.
func clampInt32(n int) int32 {
	return int32(max(min(n, math.MaxInt32), math.MinInt32))
}

// encoded is a record's RFC 8785 form and where a line inserts the hash and
// the signature members: before the first member whose name sorts after
// theirs (a record always has a type, which sorts after both).
type encoded struct {
	canonical     []byte
	hashAt, sigAt int
}

// appendCanonical appends the RFC 8785 form of r to dst and says where
// the hash and signature members go.
func (r *Record) appendCanonical(dst []byte) ([]byte, encoded) {
	start := len(dst)
	hashAt, sigAt := -1, -1
	dst = append(dst, '{')
	first := true
	for f := Field(0); f < numFields; f++ {
		if r.set&(1<<f) == 0 {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if hashAt < 0 && f >= afterHash {
			hashAt = len(dst) - start
		}
		if sigAt < 0 && f >= afterSignature {
			sigAt = len(dst) - start
		}
		dst = append(dst, quotedNames[f]...)
		switch fields[f].kind {
		case kString:
			dst = appendString(dst, r.strs[f])
		case kInt:
			dst = strconv.AppendInt(dst, r.ints[f], 10)
		case kBool:
			dst = strconv.AppendBool(dst, r.ints[f] != 0)
		case kTime:
			dst = append(dst, '"')
			dst = appendTime(dst, r.time)
			dst = append(dst, '"')
		case kHash:
			dst = append(dst, '"')
			dst = hex.AppendEncode(dst, r.prev[:])
			dst = append(dst, '"')
		case kStrings:
			dst = append(dst, '[')
			for i, v := range r.list {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendString(dst, v)
			}
			dst = append(dst, ']')
		}
	}
	dst = append(dst, '}')
	return dst, encoded{canonical: dst[start:], hashAt: hashAt, sigAt: sigAt}
}

// The first fields whose names sort after "hash" and "signature".
const (
	afterHash      = InputDigest
	afterSignature = Stack
)

// quotedNames are the fields' names as a record writes them: `"name":`.
var quotedNames = func() (q [numFields]string) {
	for f := range q {
		q[f] = `"` + fields[f].name + `":`
	}
	return q
}()

// appendTime appends t (in UTC, at microseconds) as TimeLayout writes
// it, without time.Format's parsing of the layout: records are written
// on every call.
func appendTime(dst []byte, t time.Time) []byte {
	year, month, day := t.Date()
	hour, min, sec := t.Clock()
	if year < 0 || year > 9999 {
		return t.AppendFormat(dst, TimeLayout)
	}
	us := t.Nanosecond() / 1000
	dst = appendDigits(dst, year, 4)
	dst = append(dst, '-')
	dst = appendDigits(dst, int(month), 2)
	dst = append(dst, '-')
	dst = appendDigits(dst, day, 2)
	dst = append(dst, 'T')
	dst = appendDigits(dst, hour, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, min, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, sec, 2)
	dst = append(dst, '.')
	dst = appendDigits(dst, us, 6)
	return append(dst, 'Z')
}

// appendDigits appends v in exactly n decimal digits.
func appendDigits(dst []byte, v, n int) []byte {
	var b [8]byte
	for i := n - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, b[:n]...)
}

// AppendCanonical appends the RFC 8785 form of r to dst: what its hash
// covers.
func (r *Record) AppendCanonical(dst []byte) []byte {
	dst, _ = r.appendCanonical(dst)
	return dst
}

const hexDigits = "0123456789abcdef"

// appendString appends s as RFC 8785 writes a string: only the quote, the
// backslash and the control characters escaped (the latter as \b, \t, \n,
// \f, \r or \u00xx). Records hold valid UTF-8 (the sinks escape what is
// not); a byte that is not is written as U+FFFD, so the output is JSON
// whatever comes in.
func appendString(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		return appendStringSlow(dst, s)
	}
	// Valid UTF-8 is written as it is but for the quote, the backslash and
	// the controls, found eight bytes at a time.
	dst = append(dst, '"')
	start := 0
	for i := plainRun(s, 0); i < len(s); i = plainRun(s, i) {
		dst = append(dst, s[start:i]...)
		dst = append(dst, escapes[s[i]]...)
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainRun returns the offset of the first byte at or after s[i] that a
// string escapes: a quote, a backslash or a control character (as
// package digest's PlainRun, over a string).
func plainRun(s string, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		quote, backslash := w^('"'*ones), w^('\\'*ones)
		if (w-0x20*ones)&^w&highs != 0 || ((quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b == '"' || b == '\\' {
			break
		}
	}
	return i
}

// escapes are the RFC 8785 escapes of the quote, the backslash and the
// control characters.
var escapes = func() (t [256]string) {
	for c := range 0x20 {
		t[c] = `\u00` + string(hexDigits[c>>4]) + string(hexDigits[c&0xf])
	}
	t['\b'], t['\t'], t['\n'], t['\f'], t['\r'] = `\b`, `\t`, `\n`, `\f`, `\r`
	t['"'], t['\\'] = `\"`, `\\`
	return t
}()

// appendStringSlow is appendString for a string that is not valid UTF-8.
func appendStringSlow(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if safeASCII[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// safeASCII marks the bytes a string is written with as they are, one
// byte a character: ASCII but the quote, the backslash and the controls.
var safeASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
