package digest_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/internal/digest"
)

// allocationBound is what SPEC §7 allows checking and digesting an input of
// n bytes to allocate: twice the input and 64 KiB.
func allocationBound(n int) uint64 { return 2*uint64(n) + 64<<10 }

// allocated returns the bytes f allocates. TotalAlloc is process-wide, so
// callers must not run in parallel with other tests.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDigestAllocatesAtMostTwiceTheInput checks the SPEC §7 memory bound on
// every shape, hostile ones included, accepted or refused. It does not run in
// parallel: it measures the process's allocations.
func TestDigestAllocatesAtMostTwiceTheInput(t *testing.T) {
	size := 1 << 20
	if raceEnabled {
		size = 64 << 10
	}
	for _, s := range shapes(size) {
		t.Run(s.name, func(t *testing.T) {
			var err error
			start := time.Now()
			n := allocated(func() { _, err = digest.JSON("/p.S/M", s.doc) })
			elapsed := time.Since(start)
			if s.accepted && err != nil {
				t.Errorf("JSON refused the shape: %v", err)
			}
			if !s.accepted && !errors.Is(err, digest.ErrUnbindable) {
				t.Errorf("JSON accepted the shape (err = %v); want ErrUnbindable", err)
			}
			t.Logf("%d bytes in, %d allocated (%.2f× the input), %.1f ns/byte",
				len(s.doc), n, float64(n)/float64(len(s.doc)), float64(elapsed.Nanoseconds())/float64(len(s.doc)))
			if bound := allocationBound(len(s.doc)); n > bound {
				t.Errorf("allocated %d bytes for %d bytes of input; the bound is %d", n, len(s.doc), bound)
			}
		})
	}
}

// BenchmarkJSONShapes measures the time each shape of about 1 MiB takes to
// check and digest; SPEC §7 wants it linear in the input for every shape.
func BenchmarkJSONShapes(b *testing.B) {
	for _, s := range shapes(1 << 20) {
		b.Run(s.name, func(b *testing.B) {
			b.SetBytes(int64(len(s.doc)))
			b.ReportAllocs()
			for b.Loop() {
				digest.JSON("/p.S/M", s.doc)
			}
		})
	}
}

// TestFuzzCorpusStaysWithinTheAllocationBound checks the SPEC §7 memory
// bound on every seed and every input the fuzzers kept in testdata/fuzz,
// each repeated to about 256 KiB in an array and as the values of an
// object. It does not run in parallel: it measures the process's
// allocations.
func TestFuzzCorpusStaysWithinTheAllocationBound(t *testing.T) {
	docs := seedDocuments(t)
	for _, dir := range []string{"testdata/fuzz/FuzzCanonicalMatchesJCS", "testdata/fuzz/FuzzJSON"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, file := range files {
			doc, err := readCorpusEntry(file)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			docs = append(docs, doc)
		}
	}
	size := 256 << 10
	if raceEnabled {
		size = 16 << 10
	}
	for _, doc := range docs {
		unit := max(len(doc), 1)
		var inArray, inObject bytes.Buffer
		inArray.WriteByte('[')
		inObject.WriteByte('{')
		for i := 0; i < size/unit; i++ {
			if i > 0 {
				inArray.WriteByte(',')
				inObject.WriteByte(',')
			}
			inArray.Write(doc)
			fmt.Fprintf(&inObject, `"%d":`, i)
			inObject.Write(doc)
		}
		inArray.WriteByte(']')
		inObject.WriteByte('}')
		for _, input := range [][]byte{doc, inArray.Bytes(), inObject.Bytes()} {
			n := allocated(func() { digest.JSON("/p.S/M", input) })
			if bound := allocationBound(len(input)); n > bound {
				t.Errorf("allocated %d bytes for %d bytes of input (%q repeated); the bound is %d", n, len(input), truncated(doc), bound)
			}
		}
	}
}

// readCorpusEntry reads a file in the Go fuzzing corpus format holding one
// []byte value.
func readCorpusEntry(file string) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	header, value, _ := strings.Cut(strings.TrimSpace(string(raw)), "\n")
	literal, ok := strings.CutPrefix(value, "[]byte(")
	if header != "go test fuzz v1" || !ok || !strings.HasSuffix(literal, ")") {
		return nil, fmt.Errorf("not a corpus entry of one []byte")
	}
	s, err := strconv.Unquote(strings.TrimSuffix(literal, ")"))
	return []byte(s), err
}

func truncated(doc []byte) string {
	if len(doc) > 40 {
		return string(doc[:40]) + "…"
	}
	return string(doc)
}
