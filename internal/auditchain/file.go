package auditchain

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
)

// VerifyFile feeds the JSON Lines trail at path to v. A sink writes each
// chain's records in chain_seq order, and those are checked in one pass;
// a chain whose records are not in that order is checked in a second
// pass that gathers and sorts its records. The error is an input error:
// the file could not be read. A line that is not a JSON object is noted as
// unreadable, one without a chain as inserted.
func VerifyFile(path string, v *Verifier) error {
	unsorted := map[string]bool{}
	last := map[string]uint64{}
	err := readLines(path, func(e Entry) {
		if unsorted[e.Chain] {
			return
		}
		if e.Seq != 0 {
			if e.Seq < last[e.Chain] {
				unsorted[e.Chain] = true
				v.Discard(e.Chain)
				return
			}
			last[e.Chain] = e.Seq
		}
		v.Add(e)
	}, v)
	if err != nil || len(unsorted) == 0 {
		return err
	}
	gathered := map[string][]Entry{}
	err = readLines(path, func(e Entry) {
		if unsorted[e.Chain] {
			gathered[e.Chain] = append(gathered[e.Chain], e)
		}
	}, nil)
	if err != nil {
		return err
	}
	for _, chain := range slices.Sorted(maps.Keys(gathered)) {
		es := gathered[chain]
		slices.SortStableFunc(es, func(a, b Entry) int {
			if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
				return c
			}
			return cmp.Compare(a.Pos, b.Pos)
		})
		for _, e := range es {
			v.Add(e)
		}
	}
	return nil
}

// readLines parses every line of the file at path and hands each record
// to fn; lines that are not records go to notes (when not nil).
func readLines(path string, fn func(Entry), notes *Verifier) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	p := &lineParser{h: sha256.New(), chains: map[string]string{}}
	var long []byte
	var n int64
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(line) > 0 {
			n++
			handleLine(p, bytes.TrimSpace(line), n, fn, notes)
		}
		if err == io.EOF {
			return nil
		}
	}
}

func handleLine(p *lineParser, line []byte, n int64, fn func(Entry), notes *Verifier) {
	if len(line) == 0 {
		return
	}
	e, err := p.parse(line, n)
	switch {
	case err == nil:
		fn(e)
	case notes == nil:
	case errors.Is(err, Unchained):
		notes.AddUnchained(n, fmt.Sprintf("line %d", n))
	default:
		notes.AddUnreadable(fmt.Sprintf("line %d: %v", n, err))
	}
}
