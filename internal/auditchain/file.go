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
	"runtime"
	"slices"
	"sync"
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
// to fn, in file order; lines that are not records go to notes (when not
// nil). Lines are parsed and hashed in chunks by one worker per processor,
// the results taken in order: verification is bound by hashing.
func readLines(path string, fn func(Entry), notes *Verifier) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan *chunk, workers)
	order := make(chan *chunk, 2*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			p := &lineParser{h: sha256.New(), chains: map[string]string{}}
			for c := range jobs {
				c.parse(p)
				close(c.done)
			}
		})
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(order)
		defer close(jobs)
		readErr <- splitChunks(path, f, func(c *chunk) { order <- c; jobs <- c })
	}()
	for c := range order {
		<-c.done
		for i := range c.results {
			r := &c.results[i]
			switch {
			case r.err == nil:
				fn(r.e)
			case notes == nil:
			case errors.Is(r.err, Unchained):
				notes.AddUnchained(r.e.Pos, fmt.Sprintf("line %d", r.e.Pos))
			default:
				notes.AddUnreadable(fmt.Sprintf("line %d: %v", r.e.Pos, r.err))
			}
		}
	}
	wg.Wait()
	return <-readErr
}

// chunkLines is how many lines a chunk holds.
const chunkLines = 2048

// chunk is consecutive lines of a file, parsed by a worker.
type chunk struct {
	data    []byte // the lines' bytes
	ends    []int  // where each line ends in data
	first   int64  // the first line's number
	results []parsed
	done    chan struct{}
}

type parsed struct {
	e   Entry
	err error
}

func (c *chunk) parse(p *lineParser) {
	c.results = make([]parsed, 0, len(c.ends))
	start := 0
	for i, end := range c.ends {
		line := bytes.TrimSpace(c.data[start:end])
		start = end
		if len(line) == 0 {
			continue
		}
		e, err := p.parse(line, c.first+int64(i))
		if err != nil {
			e = Entry{Pos: c.first + int64(i)}
		}
		c.results = append(c.results, parsed{e, err})
	}
}

// splitChunks reads the file's lines into chunks and hands each on.
func splitChunks(path string, f *os.File, send func(*chunk)) error {
	r := bufio.NewReaderSize(f, 1<<20)
	n := int64(0)
	size := 1 << 20 // grows to the chunks' size
	newChunk := func(first int64) *chunk {
		return &chunk{first: first, data: make([]byte, 0, size), ends: make([]int, 0, chunkLines), done: make(chan struct{})}
	}
	c := newChunk(1)
	for {
		line, err := r.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) { // a long line
			c.data = append(c.data, line...)
			line, err = r.ReadSlice('\n')
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(line) > 0 || len(c.data) > 0 && (len(c.ends) == 0 || c.ends[len(c.ends)-1] < len(c.data)) {
			c.data = append(c.data, line...)
			c.ends = append(c.ends, len(c.data))
			n++
		}
		if len(c.ends) == chunkLines || err == io.EOF {
			if len(c.ends) > 0 {
				send(c)
			}
			if err == io.EOF {
				return nil
			}
			size = max(size, cap(c.data))
			c = newChunk(n + 1)
		}
	}
}
