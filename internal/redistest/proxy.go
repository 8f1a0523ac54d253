package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// FaultProxy stands between Redis clients and a Redis, forwarding each
// connection both ways, and loses every nth reply: it forwards the command
// (Redis runs it) and, instead of the reply, breaks the connection. The
// client cannot tell whether its command ran, which is what a store and
// the engine must survive without a second run.
type FaultProxy struct {
	ln      net.Listener
	target  string
	every   atomic.Int64
	seen    atomic.Int64
	dropped atomic.Int64

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// StartFaultProxy proxies to target on a free loopback port, losing every
// nth reply (0: none), until the test ends. Clients of it should run with
// go-redis's retries off (MaxRetries: -1), so that what the store and the
// engine do about a lost reply is what is tested.
func StartFaultProxy(t testing.TB, target string, every int64) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{ln: ln, target: target}
	p.every.Store(every)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the address clients dial.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// Lose makes the proxy lose every nth reply from now on (0: none), for a
// test that sets its stores up through the proxy first.
func (p *FaultProxy) Lose(every int64) { p.every.Store(every) }

// Dropped is how many replies were lost.
func (p *FaultProxy) Dropped() int64 { return p.dropped.Load() }

func (p *FaultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Go(func() { p.commands(c, up) })
		p.wg.Go(func() { p.replies(c, up) })
	}
}

// track remembers a connection pair for close; false once closing.
func (p *FaultProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		up.Close()
		return false
	}
	p.conns = append(p.conns, c, up)
	return true
}

// commands copies the client's commands to Redis.
func (p *FaultProxy) commands(c, up net.Conn) {
	_, _ = io.Copy(up, c)
	up.Close()
	c.Close()
}

// replies copies Redis's replies to the client, losing every nth: one read
// is one reply for the single commands a store sends.
func (p *FaultProxy) replies(c, up net.Conn) {
	defer func() { c.Close(); up.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if every := p.every.Load(); every > 0 && p.seen.Add(1)%every == 0 {
				p.dropped.Add(1)
				return // the command ran; its reply never arrives
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a broken connection: the client's connection goes too
		}
	}
}

func (p *FaultProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns, p.closed = nil, true
	p.mu.Unlock()
	p.wg.Wait()
}
