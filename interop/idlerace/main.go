// Command idlerace reproduces, without agentsafe and without the
// conformance runner, the race behind a rare HTTP/1.1 failure of run.sh
// (README.md, "A race at an unused connection"): net/http's server starts
// ReadHeaderTimeout when it accepts a connection, not when the first
// request's bytes arrive, so a connection that net/http's client dialed
// but has not used yet (it dials one when no idle connection is free, and
// pools it when another frees up first) is closed by the server that long
// after it was accepted, idle in the client's pool. A call that takes it
// from the pool at that moment finds it closing: a streaming request body
// is not replayable, and the transport never retries on a connection that
// has carried no request, so the call fails, with "write: broken pipe"
// when the server's reset arrives between two writes of the body, or
// "connection reset by peer", "unexpected EOF", "server closed idle
// connection".
//
// It serves a bare connect-go handler over HTTP/1.1 with the given
// ReadHeaderTimeout (the interop server had 5s, as the suite's reference
// servers do; a shorter one makes the race frequent enough to count), and
// makes gRPC-Web client-stream calls from parallel workers on one
// transport, as the reference client does, with pauses between calls. It
// prints how many connections the server timed out before their first
// request, and the calls that failed, by message. With -read-header-timeout
// 0 the server closes no connection on a timer, and no call fails.
//
//	go run ./idlerace [-n 4000] [-parallel 8] [-read-header-timeout 20ms] [-pause 40ms]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1/conformancev1connect"
)

func main() {
	n := flag.Int("n", 4000, "calls to make")
	parallel := flag.Int("parallel", 8, "calls in flight at once (the runner's default)")
	rht := flag.Duration("read-header-timeout", 20*time.Millisecond, "the server's ReadHeaderTimeout (0: none)")
	pause := flag.Duration("pause", 40*time.Millisecond, "each worker pauses up to this long between calls")
	flag.Parse()
	if err := run(*n, *parallel, *rht, *pause, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// counter is the bare server's handler: it reads the whole stream and
// answers with nothing, as the suite's success cases do.
type counter struct {
	conformancev1connect.UnimplementedConformanceServiceHandler
}

func (counter) ClientStream(ctx context.Context, stream *connect.ClientStream[conformancev1.ClientStreamRequest]) (*connect.Response[conformancev1.ClientStreamResponse], error) {
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&conformancev1.ClientStreamResponse{}), nil
}

func run(n, parallel int, rht, pause time.Duration, out io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	tl := &trackingListener{Listener: lis}
	mux := http.NewServeMux()
	mux.Handle(conformancev1connect.NewConformanceServiceHandler(counter{}))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: rht,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go srv.Serve(tl)
	defer srv.Close()

	tr := &http.Transport{DisableCompression: true} // the reference client's HTTP/1.1 transport
	defer tr.CloseIdleConnections()
	client := conformancev1connect.NewConformanceServiceClient(&http.Client{Transport: tr}, "http://"+lis.Addr().String(), connect.WithGRPCWeb())

	var mu sync.Mutex
	failed := map[string]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := call(client); err != nil {
					mu.Lock()
					failed[message(err)]++
					mu.Unlock()
				}
				// Pauses between calls, so that connections sit in the
				// pool for about as long as the server's timer.
				time.Sleep(rand.N(pause + 1))
			}
		})
	}
	wg.Wait()

	total := 0
	for _, c := range failed {
		total += c
	}
	fmt.Fprintf(out, "%d gRPC-Web client-stream calls over HTTP/1.1, server ReadHeaderTimeout %v: %d connections, %d closed by the server before their first request; %d calls failed (%.2f%%)\n",
		n, rht, tl.accepted.Load(), tl.timedOut.Load(), total, 100*float64(total)/float64(n))
	for _, m := range slices.Sorted(maps.Keys(failed)) {
		fmt.Fprintf(out, "  %d: %s\n", failed[m], m)
	}
	return nil
}

// call makes one client-stream call of three messages.
func call(client conformancev1connect.ConformanceServiceClient) error {
	stream := client.ClientStream(context.Background())
	for range 3 {
		if err := stream.Send(&conformancev1.ClientStreamRequest{RequestData: make([]byte, 100)}); err != nil {
			break // the error is CloseAndReceive's
		}
	}
	_, err := stream.CloseAndReceive()
	return err
}

// addrs strips the addresses out of a message, so that failures group.
var addrs = regexp.MustCompile(`127\.0\.0\.1:\d+`)

func message(err error) string {
	return connect.CodeOf(err).String() + ": " + addrs.ReplaceAllString(err.Error(), "ADDR")
}

// trackingListener counts the connections it accepts, and those the
// server closed on its header timer before any request arrived.
type trackingListener struct {
	net.Listener
	accepted, timedOut atomic.Int64
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &trackedConn{Conn: c, l: l}, nil
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.once.Do(func() { // the first read: the first request's bytes, or why not
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			c.l.timedOut.Add(1)
		}
	})
	return n, err
}
