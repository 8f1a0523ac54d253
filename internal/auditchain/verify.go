package auditchain

import (
	"cmp"
	"crypto/ed25519"
	"fmt"
	"slices"
)

// Kind is what a finding says happened to a chain.
type Kind uint8

// The findings, in the order a report lists them.
const (
	// Modified: a record whose content does not give the hash it carries,
	// or whose chain fields cannot be read.
	Modified Kind = iota + 1
	// Rewritten: records changed with every later hash recomputed, caught
	// by a link to an original hash or by a kept checkpoint; the change
	// lies in From..To.
	Rewritten
	// Deleted: chain_seq From..To are missing (a gap).
	Deleted
	// Inserted: a record that is not part of the chain (a second record
	// with one chain_seq), or one that carries no chain at all.
	Inserted
	// Reordered: chain_seq From is stored after chain_seq From+1, against
	// the insertion order.
	Reordered
	// Inserted also names a record after the chain's last checkpoint.
	// Cut: the chain ends at From, while a kept checkpoint attests To.
	Cut
	// BadSignature: the checkpoint at To does not verify under any key
	// given: the chain since From was rewritten, or the checkpoint was
	// signed with another key.
	BadSignature
	// MissingChain: a kept checkpoint names a chain of which nothing is
	// stored.
	MissingChain
	numKinds
)

var kindNames = [numKinds]string{Modified: "modified", Rewritten: "rewritten", Deleted: "deleted", Inserted: "inserted",
	Reordered: "reordered", Cut: "cut", BadSignature: "bad signature", MissingChain: "deleted chain"}

func (k Kind) String() string {
	if k > 0 && k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Finding is one thing verification found wrong.
type Finding struct {
	Kind  Kind
	Chain string
	// From and To are the chain_seq range named (equal for one record).
	From, To uint64
	// Pos is the storage position of the record named, when one is: its
	// line, or its PostgreSQL seq; zero otherwise.
	Pos    int64
	Detail string
}

// ChainReport is what verification found of one chain.
type ChainReport struct {
	Chain string
	// Records counts the records read, duplicates included; First and
	// Last are the lowest and highest chain_seq placed.
	Records     int
	First, Last uint64
	// Attested is the highest chain_seq a valid checkpoint covers (0:
	// none), AttestedBy how ("signed", "kept").
	Attested   uint64
	AttestedBy string
	// Findings lists the findings, by kind (at most 20 of each); Counts
	// how many of each kind there were.
	Findings []Finding
	Counts   [numKinds]int
	// Signed reports signed checkpoints that no key was given to check;
	// Checkpoints counts the checkpoint records.
	SignedUnchecked bool
	Checkpoints     int

	v *Verifier
}

// Count is the number of findings of kind k in the chain.
func (c *ChainReport) Count(k Kind) int { return c.Counts[k] }

// Tampered reports whether the chain has any finding.
func (c *ChainReport) Tampered() bool {
	for _, n := range c.Counts {
		if n > 0 {
			return true
		}
	}
	return false
}

// Report is the result of verifying a trail.
type Report struct {
	Chains []*ChainReport
	// Unchained lists records that carry no chain (the first few) where a
	// chain was due, and Loose counts them.
	Unchained []Finding
	Loose     int
	// Legacy counts PostgreSQL rows written before the trail was chained.
	Legacy int
	// Unreadable lists what could not be read (input errors).
	Unreadable []string
	Records    int
	// Extra findings outside any chain's own (cross-checks).
	Extra []Finding
}

// Tampered reports whether anything was found.
func (r *Report) Tampered() bool {
	if r.Loose > 0 || len(r.Extra) > 0 {
		return true
	}
	for _, c := range r.Chains {
		if c.Tampered() {
			return true
		}
	}
	return false
}

// maxListed caps the records a report lists by name of one sort.
const maxListed = 20

// Verifier checks chains fed to it record by record.
type Verifier struct {
	keys   []ed25519.PublicKey
	kept   map[string][]Checkpoint
	chains map[string]*analyzer
	report Report
	// strays and gaps are matched at the end: a record whose chain_seq or
	// chain was changed leaves a gap where it was and shows up elsewhere.
	strays []stray
	gaps   []gap
	// flagged holds the position of every record found modified or
	// inserted.
	flagged []int64
}

// Flagged returns the positions of the records found modified or
// inserted so far (records that do not count as in a valid chain).
func (v *Verifier) Flagged() []int64 { return append([]int64{}, v.flagged...) }

// NewVerifier returns a verifier that checks checkpoint signatures under
// keys and compares the chains with the kept checkpoints.
func NewVerifier(keys []ed25519.PublicKey, kept []Checkpoint) *Verifier {
	v := &Verifier{keys: keys, kept: map[string][]Checkpoint{}, chains: map[string]*analyzer{}}
	for _, k := range kept {
		v.kept[k.Chain] = append(v.kept[k.Chain], k)
	}
	for _, ks := range v.kept {
		slices.SortFunc(ks, func(a, b Checkpoint) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return v
}

// Add feeds one record. Within a chain, records must come in ascending
// chain_seq, and those with one chain_seq in ascending Pos; chains may
// interleave.
func (v *Verifier) Add(e Entry) {
	v.report.Records++
	a := v.chains[e.Chain]
	if a == nil {
		a = &analyzer{v: v, rep: &ChainReport{Chain: e.Chain, v: v}, kept: v.kept[e.Chain], expect: 1}
		v.chains[e.Chain] = a
		v.report.Chains = append(v.report.Chains, a.rep)
	}
	a.add(e)
}

// Discard forgets what was fed of chain, to feed it again from the start.
func (v *Verifier) Discard(chain string) {
	a := v.chains[chain]
	if a == nil {
		return
	}
	v.report.Records -= a.rep.Records
	delete(v.chains, chain)
	v.report.Chains = slices.DeleteFunc(v.report.Chains, func(c *ChainReport) bool { return c == a.rep })
	v.strays = slices.DeleteFunc(v.strays, func(s stray) bool { return s.chain == chain })
	v.gaps = slices.DeleteFunc(v.gaps, func(g gap) bool { return g.chain == chain })
}

// AddUnchained notes a record without a chain at pos; what says what it
// is ("line 12", "row 40").
func (v *Verifier) AddUnchained(pos int64, what string) {
	v.report.Records++
	v.report.Loose++
	if len(v.report.Unchained) < maxListed {
		v.report.Unchained = append(v.report.Unchained, Finding{Kind: Inserted, Pos: pos, Detail: what + " carries no chain"})
	}
	v.flagged = append(v.flagged, pos)
}

// AddLegacy counts a record written before chains (PostgreSQL rows older
// than the first chained one).
func (v *Verifier) AddLegacy() { v.report.Records++; v.report.Legacy++ }

// AddUnreadable notes an input error.
func (v *Verifier) AddUnreadable(what string) {
	if len(v.report.Unreadable) < maxListed {
		v.report.Unreadable = append(v.report.Unreadable, what)
	} else if len(v.report.Unreadable) == maxListed {
		v.report.Unreadable = append(v.report.Unreadable, "… and more")
	}
}

// AddFinding records a finding outside the chains (a cross-check).
func (v *Verifier) AddFinding(f Finding) { v.report.Extra = append(v.report.Extra, f) }

// Finish ends every chain and returns the report, chains in the order
// of their ids.
func (v *Verifier) Finish() *Report {
	for _, a := range v.chains {
		a.finish()
	}
	v.matchStrays()
	for chain, ks := range v.kept {
		if _, ok := v.chains[chain]; !ok && len(ks) > 0 {
			last := ks[len(ks)-1]
			rep := &ChainReport{Chain: chain}
			rep.note(Finding{Kind: MissingChain, Chain: chain, From: 1, To: last.Seq,
				Detail: fmt.Sprintf("nothing of the chain is stored; a kept checkpoint attests chain_seq %d", last.Seq)})
			v.report.Chains = append(v.report.Chains, rep)
		}
	}
	slices.SortFunc(v.report.Chains, func(a, b *ChainReport) int { return cmp.Compare(a.Chain, b.Chain) })
	return &v.report
}

// note records f in the chain's report: every finding is counted, the
// first maxListed of each kind kept.
func (c *ChainReport) note(f Finding) {
	if c.v != nil && f.Pos != 0 && (f.Kind == Modified || f.Kind == Inserted) {
		c.v.flagged = append(c.v.flagged, f.Pos)
	}
	if c.Counts[f.Kind] < maxListed {
		c.Findings = append(c.Findings, f)
		slices.SortStableFunc(c.Findings, func(a, b Finding) int { return cmp.Compare(a.Kind, b.Kind) })
	}
	c.Counts[f.Kind]++
}

// drop removes the finding of kind for from..to.
func (c *ChainReport) drop(kind Kind, from, to uint64) {
	i := slices.IndexFunc(c.Findings, func(f Finding) bool { return f.Kind == kind && f.From == from && f.To == to })
	if i < 0 {
		return
	}
	c.Findings = slices.Delete(c.Findings, i, i+1)
	c.Counts[kind]--
}

// accepted is the record a chain_seq was given to.
type accepted struct {
	seq              uint64
	stored, computed Hash
	contentOK        bool
	pos              int64
}

// analyzer checks one chain, fed in chain_seq order.
type analyzer struct {
	v      *Verifier
	rep    *ChainReport
	kept   []Checkpoint
	next   int // the first kept checkpoint not compared yet
	group  []Entry
	prev   accepted
	have   bool // prev holds a record
	expect uint64
	// closedAt is the chain_seq of the chain's last checkpoint, once
	// seen (stored, or kept): a record after it was inserted.
	closedAt uint64
}

func (a *analyzer) add(e Entry) {
	a.rep.Records++
	if e.Seq == 0 {
		// No chain place to put it in: only its content can be judged.
		a.rep.note(Finding{Kind: Modified, Chain: e.Chain, Pos: e.Pos, Detail: e.Problem})
		return
	}
	if len(a.group) > 0 && e.Seq != a.group[0].Seq {
		a.flush(&e)
	}
	a.group = append(a.group, e)
}

// fits reports whether c links to the record before it.
func (a *analyzer) fits(c *Entry) bool {
	if c.Seq == 1 {
		return c.Prev == Hash{}
	}
	return a.have && a.prev.seq == c.Seq-1 && (c.Prev == a.prev.stored || c.Prev == a.prev.computed)
}

// flush places the records of one chain_seq; next is the first record of
// the next chain_seq, if any.
func (a *analyzer) flush(next *Entry) {
	group := a.group
	a.group = a.group[:0]
	s := group[0].Seq
	rep := a.rep
	if a.closedAt > 0 && s > a.closedAt {
		for i := range group {
			c := &group[i]
			rep.note(Finding{Kind: Inserted, Chain: rep.Chain, From: s, To: s, Pos: c.Pos,
				Detail: fmt.Sprintf("a record after the chain was closed at chain_seq %d", a.closedAt)})
			a.v.strays = append(a.v.strays, stray{chain: rep.Chain, seq: s, pos: c.Pos, prev: c.Prev, stored: c.Stored, kind: Inserted})
		}
		return
	}
	linked := s == 1 || a.have && a.prev.seq == s-1
	// The record the chain_seq belongs to: the one that fits best.
	best, bestScore := 0, -1
	for i := range group {
		c := &group[i]
		score := 0
		if c.ContentOK() {
			score += 4
		}
		if linked && a.fits(c) {
			score += 2
		}
		if a.fitsNext(c, next) {
			score++
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	for i := range group {
		if i == best {
			continue
		}
		c := &group[i]
		rep.note(Finding{Kind: Inserted, Chain: rep.Chain, From: s, To: s, Pos: c.Pos,
			Detail: fmt.Sprintf("a second record with chain_seq %d", s)})
		a.v.strays = append(a.v.strays, stray{chain: rep.Chain, seq: s, pos: c.Pos, prev: c.Prev, stored: c.Stored, kind: Inserted})
	}
	c := &group[best]
	if c.Problem == "" && !c.ContentOK() && !(linked && a.fits(c)) && !a.fitsNext(c, next) {
		// Changed, and linked to nothing around it: perhaps a record whose
		// chain_seq or chain was changed. Set aside: the end decides.
		a.v.strays = append(a.v.strays, stray{chain: rep.Chain, seq: s, pos: c.Pos, prev: c.Prev, stored: c.Stored,
			deferred: true, gapFrom: a.expect})
		a.v.flagged = append(a.v.flagged, c.Pos)
		return
	}
	a.gapBefore(s, c.Prev)
	if rep.First == 0 {
		rep.First = s
	}
	rep.Last = s
	switch {
	case c.Problem != "":
		rep.note(Finding{Kind: Modified, Chain: rep.Chain, From: s, To: s, Pos: c.Pos, Detail: c.Problem})
	case !c.ContentOK():
		rep.note(Finding{Kind: Modified, Chain: rep.Chain, From: s, To: s, Pos: c.Pos, Detail: detailModified})
	case linked && !a.fits(c):
		if s == 1 {
			rep.note(Finding{Kind: Rewritten, Chain: rep.Chain, From: 1, To: 1, Pos: c.Pos,
				Detail: "the first record does not start the chain (its prev is not zero): its hash was recomputed"})
		} else if a.prev.contentOK {
			from := max(rep.Attested+1, 1)
			rep.note(Finding{Kind: Rewritten, Chain: rep.Chain, From: from, To: s - 1, Pos: c.Pos,
				Detail: fmt.Sprintf("chain_seq %d links to another hash than chain_seq %d carries: a record in chain_seq %s was changed and its hash recomputed", s, s-1, span(from, s-1))})
		}
	}
	if a.have && c.Pos < a.prev.pos {
		rep.note(Finding{Kind: Reordered, Chain: rep.Chain, From: s - 1, To: s - 1, Pos: a.prev.pos,
			Detail: fmt.Sprintf("chain_seq %d is stored after chain_seq %d", s-1, s)})
	}
	if c.Checkpoint {
		a.checkpoint(c)
		if c.Final && c.ContentOK() {
			a.closedAt = s
		}
	}
	a.compareKept(c)
	a.prev = accepted{seq: s, stored: c.Stored, computed: c.Computed, contentOK: c.ContentOK(), pos: c.Pos}
	a.have = true
	a.expect = s + 1
}

const detailModified = "its content does not give the hash it carries"

// fitsNext reports whether next, the first record of the next chain_seq,
// links to c.
func (a *analyzer) fitsNext(c, next *Entry) bool {
	return next != nil && next.Seq == c.Seq+1 && (next.Prev == c.Stored || next.Prev == c.Computed)
}

// gapBefore notes the chain_seq missing before s, whose record has prev.
func (a *analyzer) gapBefore(s uint64, prev Hash) {
	if s <= a.expect {
		return
	}
	rep := a.rep
	f := Finding{Kind: Deleted, Chain: rep.Chain, From: a.expect, To: s - 1,
		Detail: fmt.Sprintf("missing: the trail goes from chain_seq %d to %d", a.expect-1, s)}
	if a.expect == 1 {
		f.Detail = fmt.Sprintf("missing: the chain starts at chain_seq %d", s)
	}
	rep.note(f)
	g := gap{chain: rep.Chain, from: a.expect, to: s - 1, afterPrev: prev}
	if a.have {
		g.before, g.beforeKnown = a.prev.stored, true
	} else if a.expect == 1 {
		g.beforeKnown = true // the zero hash
	}
	a.v.gaps = append(a.v.gaps, g)
}

// checkpoint checks a checkpoint record's signature.
func (a *analyzer) checkpoint(c *Entry) {
	rep := a.rep
	rep.Checkpoints++
	if !c.ContentOK() {
		return
	}
	s := c.Seq
	cp := Checkpoint{Chain: rep.Chain, Seq: s, Hash: c.Stored, Time: c.Time, Signature: c.Signature}
	switch {
	case len(a.v.keys) > 0 && VerifyCheckpoint(cp, a.v.keys):
		a.attest(s, "signed")
	case len(a.v.keys) > 0:
		from := max(rep.Attested+1, 1)
		what := "it is not signed"
		if c.Signature != nil {
			what = "its signature does not verify under the key(s) given"
		}
		rep.note(Finding{Kind: BadSignature, Chain: rep.Chain, From: from, To: s, Pos: c.Pos,
			Detail: fmt.Sprintf("the checkpoint at chain_seq %d: %s: chain_seq %s was rewritten, or the checkpoint signed with another key", s, what, span(from, s))})
	case c.Signature != nil:
		rep.SignedUnchecked = true
	}
}

// compareKept compares c with the kept checkpoints up to its chain_seq.
func (a *analyzer) compareKept(c *Entry) {
	rep, s := a.rep, c.Seq
	for a.next < len(a.kept) && a.kept[a.next].Seq <= s {
		k := a.kept[a.next]
		a.next++
		if k.Seq < s {
			continue // its record is missing: the gap says so
		}
		if c.Stored != k.Hash {
			from := max(rep.Attested+1, 1)
			rep.note(Finding{Kind: Rewritten, Chain: rep.Chain, From: from, To: s, Pos: c.Pos,
				Detail: fmt.Sprintf("chain_seq %d does not carry the hash a kept checkpoint holds: a record in chain_seq %s was changed and the hashes after it recomputed", s, span(from, s))})
			continue
		}
		if k.Signature != nil && len(a.v.keys) > 0 && !VerifyCheckpoint(k, a.v.keys) {
			rep.note(Finding{Kind: BadSignature, Chain: rep.Chain, From: s, To: s,
				Detail: fmt.Sprintf("the kept checkpoint at chain_seq %d: its signature does not verify under the key(s) given", s)})
		}
		a.attest(s, "kept")
		if k.Final {
			a.closedAt = s
		}
	}
}

// attest records that a valid checkpoint covers the chain through seq.
func (a *analyzer) attest(seq uint64, by string) {
	if seq > a.rep.Attested {
		a.rep.Attested, a.rep.AttestedBy = seq, by
	} else if seq == a.rep.Attested && by != a.rep.AttestedBy {
		a.rep.AttestedBy = "signed and kept"
	}
}

func (a *analyzer) finish() {
	if len(a.group) > 0 {
		a.flush(nil)
	}
	if n := len(a.kept); n > 0 && a.kept[n-1].Seq > a.rep.Last {
		k := a.kept[n-1]
		a.rep.note(Finding{Kind: Cut, Chain: a.rep.Chain, From: a.rep.Last, To: k.Seq,
			Detail: fmt.Sprintf("the chain ends at chain_seq %d, but a kept checkpoint attests chain_seq %d", a.rep.Last, k.Seq)})
	}
}

// span writes a chain_seq range.
func span(from, to uint64) string {
	if from == to {
		return fmt.Sprint(from)
	}
	return fmt.Sprintf("%d..%d", from, to)
}

// stray is a record that does not fit where it is: it may be a record
// whose chain_seq or chain was changed.
type stray struct {
	chain        string
	seq          uint64
	pos          int64
	prev, stored Hash
	// kind is the finding noted for it (Inserted), or none yet when
	// deferred: then gapFrom is where the chain expected it.
	kind     Kind
	deferred bool
	gapFrom  uint64
}

// gap is a run of missing chain_seq: before is the hash of the record
// before it, afterPrev the prev of the record after it.
type gap struct {
	chain             string
	from, to          uint64
	before, afterPrev Hash
	beforeKnown       bool
}

// matchStrays finds records whose chain_seq or chain was changed: a gap
// of one record, and a stray record whose prev and hash are those the gap
// lacks. It names the record modified where it belongs, in place of the
// gap and of the stray's own findings. A deferred stray that matches no
// gap is named where it is.
func (v *Verifier) matchStrays() {
	matched := make([]bool, len(v.strays))
	for _, g := range v.gaps {
		if g.from != g.to || !g.beforeKnown {
			continue
		}
		for si := range v.strays {
			st := &v.strays[si]
			if matched[si] || st.prev != g.before || st.stored != g.afterPrev {
				continue
			}
			matched[si] = true
			home := v.chains[g.chain].rep
			home.drop(Deleted, g.from, g.to)
			where := fmt.Sprintf("its chain_seq reads %d", st.seq)
			if st.chain != g.chain {
				where = fmt.Sprintf("its chain reads %s, chain_seq %d", st.chain, st.seq)
			}
			home.note(Finding{Kind: Modified, Chain: g.chain, From: g.from, To: g.from, Pos: st.pos, Detail: where})
			a := v.chains[st.chain]
			if !st.deferred {
				a.rep.drop(st.kind, st.seq, st.seq)
			}
			if a.rep.Records--; a.rep.Records == 0 {
				v.report.Chains = slices.DeleteFunc(v.report.Chains, func(c *ChainReport) bool { return c == a.rep })
			}
			break
		}
	}
	for si, st := range v.strays {
		if matched[si] || !st.deferred {
			continue
		}
		rep := v.chains[st.chain].rep
		if st.seq > st.gapFrom {
			rep.note(Finding{Kind: Deleted, Chain: st.chain, From: st.gapFrom, To: st.seq - 1,
				Detail: fmt.Sprintf("missing before chain_seq %d, which links to no record around it", st.seq)})
		}
		rep.note(Finding{Kind: Modified, Chain: st.chain, From: st.seq, To: st.seq, Pos: st.pos, Detail: detailModified})
		if rep.First == 0 {
			rep.First = st.seq
		}
		rep.Last = max(rep.Last, st.seq)
	}
}
