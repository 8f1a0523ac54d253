package nethttpadapter

import (
	"math/bits"
	"sync"
)

// buffers recycles the byte buffers of governed requests, by size class
// (powers of two from 512 bytes to 1 MiB): a request's body, read once,
// and each attempt's response. A buffer goes back only when nothing can
// touch it again: a body once every attempt has returned (an attempt
// abandoned at its deadline may still read it: then the collector takes
// it), a response once its writer is sealed and, for the finalized
// attempt, replayed.
var buffers [classes]sync.Pool

const (
	minClass = 9  // 512 bytes
	maxClass = 20 // 1 MiB: larger buffers are not kept
	classes  = maxClass - minClass + 1
)

// buffer is a byte slice and, when it came from buffers, its pool handle
// (the pointer the pool keeps, so that putting it back allocates nothing).
type buffer struct {
	b []byte
	p *[]byte
}

// class returns the size class holding n bytes, or -1 over the largest.
func class(n int) int {
	c := max(minClass, bits.Len(uint(max(n, 1)-1)))
	if c > maxClass {
		return -1
	}
	return c - minClass
}

// getBuffer returns an empty buffer with room for at least n bytes.
func getBuffer(n int) buffer {
	c := class(n)
	if c < 0 {
		return buffer{b: make([]byte, 0, n)}
	}
	if p, ok := buffers[c].Get().(*[]byte); ok {
		return buffer{b: (*p)[:0], p: p}
	}
	b := make([]byte, 0, 1<<(c+minClass))
	return buffer{b: b, p: &b}
}

// grow doubles the buffer's room, keeping its bytes.
func (b *buffer) grow() { b.growTo(2 * max(cap(b.b), 256)) }

// growTo gives the buffer room for n bytes, keeping its bytes.
func (b *buffer) growTo(n int) {
	nb := getBuffer(n)
	nb.b = append(nb.b, b.b...)
	b.release()
	*b = nb
}

// release gives the buffer back; it must not be used again.
func (b *buffer) release() {
	if b.p != nil {
		*b.p = b.b[:0]
		buffers[class(cap(b.b))].Put(b.p)
	}
	*b = buffer{}
}
