package auditchain

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"time"
)

// hashTag starts every record hash's pre-image. It is part of the format
// and never changes.
const hashTag = "agentsafe/audit/v1"

// Hash is a record's SHA-256.
type Hash [sha256.Size]byte

// String is h in lowercase hex, as records store it.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// ParseHash reads a hash written by [Hash.String].
func ParseHash(s string) (Hash, bool) {
	var h Hash
	if len(s) != 2*len(h) {
		return h, false
	}
	for i := range h {
		hi, lo := unhexLower[s[2*i]], unhexLower[s[2*i+1]]
		if hi|lo > 0xf {
			return Hash{}, false
		}
		h[i] = hi<<4 | lo
	}
	return h, true
}

// unhexLower maps a lowercase hex digit to its value, anything else to 0xff.
var unhexLower = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = byte(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

// The checkpoint defaults (SPEC §15).
const (
	DefaultEvery    = 1000
	DefaultInterval = 10 * time.Second
)

// Config is a chain's checkpoint policy.
type Config struct {
	// Every and Interval: a checkpoint once Every records were written
	// since the last, or Interval after the first of them.
	Every    int
	Interval time.Duration
	// Signer, when set, signs each checkpoint.
	Signer ed25519.PrivateKey
	// OnCheckpoint, when set, receives each checkpoint once it is stored.
	OnCheckpoint func(Checkpoint)
}

// SetCheckpoints sets Every and Interval, each only when positive: the
// sinks' WithCheckpoints options.
func (c *Config) SetCheckpoints(every int, interval time.Duration) {
	if every > 0 {
		c.Every = every
	}
	if interval > 0 {
		c.Interval = interval
	}
}

// Check reports what is wrong with c.
func (c *Config) Check() error {
	if c.Signer != nil && len(c.Signer) != ed25519.PrivateKeySize {
		return fmt.Errorf("the signer is an Ed25519 private key of %d bytes, not %d", ed25519.PrivateKeySize, len(c.Signer))
	}
	return nil
}

// WithDefaults is c with zero (or negative) fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Every <= 0 {
		c.Every = DefaultEvery
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	return c
}

// NewChainID returns the id of a chain starting at start: "chn_", the
// start time in UTC to the second, "_" and 128 random bits in hex.
func NewChainID(start time.Time) string {
	var raw [16]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails on supported platforms
	return "chn_" + start.UTC().Format("20060102T150405Z") + "_" + hex.EncodeToString(raw[:])
}

// ChainStart reads the start time out of a chain id made by NewChainID.
func ChainStart(id string) (time.Time, bool) {
	if len(id) < 4+16 || id[:4] != "chn_" {
		return time.Time{}, false
	}
	t, err := time.Parse("20060102T150405Z", id[4:20])
	return t, err == nil
}

// Sealed is a record given its place in a chain: its chain_seq, prev and
// hash (and for a checkpoint, its signature). Record is the record Seal
// was given (it set its chain fields), or a checkpoint it added. Line is
// its JSON Lines form (without the newline), valid until the next Seal.
type Sealed struct {
	Record    *Record
	Hash      Hash
	Signature []byte
	Line      []byte
}

// Writer is one chain's writing end: it gives records their place after
// the chain's committed head. It is not safe for concurrent use: a sink
// serializes its writes.
type Writer struct {
	id   string
	cfg  Config
	seq  uint64 // the committed head
	head Hash
	// since counts the records committed after the last checkpoint; first
	// is when the first of them was committed.
	since int
	first time.Time

	scratch []byte
	lines   []byte
}

// NewWriter starts a chain with a new id, at start. cfg must be checked.
func NewWriter(cfg Config, start time.Time) *Writer {
	return &Writer{id: NewChainID(start), cfg: cfg.WithDefaults()}
}

// ID is the chain's id.
func (w *Writer) ID() string { return w.id }

// Head is the committed head: its chain_seq (0 before the first record)
// and hash.
func (w *Writer) Head() (uint64, Hash) { return w.seq, w.head }

// SetHead moves the committed head, when the store says where it is
// (after a lost commit reply).
func (w *Writer) SetHead(seq uint64, h Hash) { w.seq, w.head = seq, h }

// Seal gives recs the places after the committed head, in order, and
// appends them to out, each followed by a checkpoint record where one is
// due by count (every Config.Every records). Nothing changes until
// [Writer.Commit]: a write that fails leaves no gap.
func (w *Writer) Seal(out []Sealed, recs []Record, lines bool) []Sealed {
	seq, prev, since := w.seq, w.head, w.since
	w.lines = w.lines[:0]
	base := len(out)
	add := func(r *Record) {
		seq++
		out = append(out, Sealed{Record: r})
		s := &out[len(out)-1]
		w.seal(s, seq, prev, lines)
		prev = s.Hash
	}
	for i := range recs {
		add(&recs[i])
		if recs[i].IsCheckpoint() {
			since = 0
		} else if since++; since >= w.cfg.Every {
			cp := CheckpointRecord(time.Now())
			add(&cp)
			since = 0
		}
	}
	if lines {
		w.fixLines(out[base:])
	}
	return out
}

// seal gives s the place seq after prev.
func (w *Writer) seal(s *Sealed, seq uint64, prev Hash, lines bool) {
	r := s.Record
	r.SetString(Chain, w.id)
	r.SetInt(ChainSeq, int64(seq))
	r.SetPrev(prev)
	// The pre-image in one buffer: one SHA-256 call, no allocation.
	w.scratch = append(append(w.scratch[:0], hashTag...), prev[:]...)
	var enc encoded
	w.scratch, enc = r.appendCanonical(w.scratch)
	s.Hash = sha256.Sum256(w.scratch)
	if s.Record.IsCheckpoint() && w.cfg.Signer != nil {
		s.Signature = ed25519.Sign(w.cfg.Signer, CheckpointMessage(w.id, seq, s.Hash, r.TimeValue()))
	}
	if lines {
		start := len(w.lines)
		w.lines = appendLine(w.lines, enc, s.Hash, s.Signature)
		w.lines = append(w.lines, '\n')
		// Line is fixed up once every line is written: w.lines may move.
		s.Line = w.lines[start : len(w.lines)-1 : len(w.lines)-1]
	}
}

// fixLines points each sealed record's Line into the final buffer.
func (w *Writer) fixLines(ss []Sealed) {
	off := 0
	for i := range ss {
		n := len(ss[i].Line)
		ss[i].Line = w.lines[off : off+n : off+n]
		off += n + 1
	}
}

// Lines is the JSON Lines form of the records of the last Seal, each
// ending in a newline.
func (w *Writer) Lines() []byte { return w.lines }

// Sum is a record's hash: SHA-256("agentsafe/audit/v1" ‖ prev ‖
// canonical), canonical being the RFC 8785 form of the record.
func Sum(prev Hash, canonical []byte) Hash {
	h := sha256.New()
	return sumRecord(h, prev, canonical)
}

// sumRecord is SHA-256("agentsafe/audit/v1" ‖ prev ‖ parts), with h
// reset and reused.
func sumRecord(h hash.Hash, prev Hash, parts ...[]byte) Hash {
	h.Reset()
	h.Write([]byte(hashTag))
	h.Write(prev[:])
	for _, p := range parts {
		h.Write(p)
	}
	var out Hash
	h.Sum(out[:0])
	return out
}

// appendLine appends the JSON Lines form of a record: its canonical form
// with the hash (and a signature) member in its place, so that the line
// is itself in RFC 8785 form.
func appendLine(dst []byte, enc encoded, h Hash, sig []byte) []byte {
	c := enc.canonical
	dst = append(dst, c[:enc.hashAt]...)
	dst = append(dst, `"hash":"`...)
	dst = hex.AppendEncode(dst, h[:])
	dst = append(dst, '"', ',')
	if sig == nil {
		return append(dst, c[enc.hashAt:]...)
	}
	dst = append(dst, c[enc.hashAt:enc.sigAt]...)
	dst = append(dst, `"signature":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, sig)
	dst = append(dst, '"', ',')
	return append(dst, c[enc.sigAt:]...)
}

// Commit moves the head past sealed, records of the last Seal that are
// now stored: all it gave, or the first of them (a torn write).
func (w *Writer) Commit(sealed []Sealed) {
	for i := range sealed {
		s := &sealed[i]
		w.seq, w.head = uint64(s.Record.Int(ChainSeq)), s.Hash
		if s.Record.IsCheckpoint() {
			w.since = 0
			continue
		}
		if w.since == 0 {
			w.first = time.Now() // once per checkpoint: the clock costs
		}
		w.since++
	}
}

// Due reports whether a checkpoint is due at now, and when the next one
// is due by time (zero when no record waits for one).
func (w *Writer) Due(now time.Time) (bool, time.Time) {
	at := w.NextDue()
	if at.IsZero() {
		return false, at
	}
	return w.since >= w.cfg.Every || !now.Before(at), at
}

// NextDue is when the next checkpoint is due by time: Interval after the
// first record no checkpoint covers (zero when there is none).
func (w *Writer) NextDue() time.Time {
	if w.since == 0 {
		return time.Time{}
	}
	return w.first.Add(w.cfg.Interval)
}

// CheckpointRecord is the checkpoint record to seal at now.
func CheckpointRecord(now time.Time) Record {
	var r Record
	r.SetString(Type, CheckpointType)
	r.SetTime(now)
	return r
}

// CloseRecord is the last checkpoint of a chain, to seal at now: its sink
// closes, and a record after it was inserted.
func CloseRecord(now time.Time) Record {
	var r Record
	r.SetString(Type, CloseType)
	r.SetTime(now)
	return r
}

// Checkpoint is what a checkpoint record attests: the chain, its
// chain_seq and hash, its time, and its signature (nil when unsigned).
// Final: it is the chain's last record (its sink closed).
type Checkpoint struct {
	Chain     string
	Seq       uint64
	Hash      Hash
	Time      time.Time
	Signature []byte
	Final     bool
}

// CheckpointOf is the checkpoint a sealed checkpoint record carries.
func CheckpointOf(s *Sealed) Checkpoint {
	return Checkpoint{Chain: s.Record.String(Chain), Seq: uint64(s.Record.Int(ChainSeq)), Hash: s.Hash,
		Time: s.Record.TimeValue(), Signature: s.Signature, Final: s.Record.String(Type) == CloseType}
}

// Checkpoints returns the checkpoints among sealed, to hand to the hook
// once they are stored.
func Checkpoints(sealed []Sealed) []Checkpoint {
	var out []Checkpoint
	for i := range sealed {
		if sealed[i].Record.IsCheckpoint() {
			out = append(out, CheckpointOf(&sealed[i]))
		}
	}
	return out
}

// Handoff gives cps, stored checkpoints, to the OnCheckpoint hook, if
// there is one.
func (w *Writer) Handoff(cps []Checkpoint) {
	if w.cfg.OnCheckpoint == nil {
		return
	}
	for _, c := range cps {
		w.cfg.OnCheckpoint(c)
	}
}

// checkpointTag starts the bytes a checkpoint signature covers.
const checkpointTag = "agentsafe/audit/checkpoint/v1"

// CheckpointMessage is what a checkpoint's signature covers:
// "agentsafe/audit/checkpoint/v1" ‖ chain ‖ chain_seq as 8 bytes big-endian
// ‖ hash ‖ time as RFC 3339 in UTC (microseconds, as stored).
func CheckpointMessage(chain string, seq uint64, h Hash, t time.Time) []byte {
	b := make([]byte, 0, len(checkpointTag)+len(chain)+8+len(h)+len(TimeLayout))
	b = append(b, checkpointTag...)
	b = append(b, chain...)
	b = append(b, byte(seq>>56), byte(seq>>48), byte(seq>>40), byte(seq>>32), byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq))
	b = append(b, h[:]...)
	return StoredTime(t).AppendFormat(b, TimeLayout)
}

// VerifyCheckpoint reports whether c's signature verifies under one of keys.
func VerifyCheckpoint(c Checkpoint, keys []ed25519.PublicKey) bool {
	if len(c.Signature) != ed25519.SignatureSize {
		return false
	}
	msg := CheckpointMessage(c.Chain, c.Seq, c.Hash, c.Time)
	for _, k := range keys {
		if ed25519.Verify(k, msg, c.Signature) {
			return true
		}
	}
	return false
}
