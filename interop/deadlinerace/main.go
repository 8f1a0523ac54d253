// Command deadlinerace reproduces, without agentsafe and without the
// conformance runner, the race behind run.sh's known races (README.md, "A
// race at the deadline"): a bare connect-go server whose handler honours
// its context answers a Connect unary call DEADLINE_EXCEEDED at the
// deadline the client sent in Connect-Timeout-Ms, which connect-go's
// client rounds down to the millisecond, so the answer lands within about
// a millisecond of the client's own timer. Over HTTP/2 the error's headers
// sometimes arrive first and the client's timer then cuts the body: the
// JSON error body the client read is empty or partial.
//
// It runs the calls as the suite's reference client does: a context with
// the test's deadline, net/http's Transport speaking HTTP/2 in clear text,
// and a transport that keeps the bytes read from a unary JSON error body
// (the suite's wire check parses them, and fails the case with "connect
// error JSON: unexpected end of JSON input" when they are cut). It prints
// how many calls got the error headers and how many of those got a cut
// body, and the codes connect-go's client reported for them.
//
// With -http1 it speaks HTTP/1.1 instead, where the same answers arrive
// whole.
//
//	go run ./deadlinerace [-n 2000] [-parallel 8] [-timeout 200ms] [-http1]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1/conformancev1connect"
)

func main() {
	n := flag.Int("n", 2000, "calls to make")
	parallel := flag.Int("parallel", 8, "calls in flight at once (the runner's default)")
	timeout := flag.Duration("timeout", 200*time.Millisecond, "each call's deadline (the Timeouts suite's)")
	http1 := flag.Bool("http1", false, "speak HTTP/1.1 instead of HTTP/2 in clear text")
	flag.Parse()
	if err := run(*n, *parallel, *timeout, *http1, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// waiter is the bare server's handler: it waits until its context ends,
// and fails with the context's error, as any handler honouring its context
// does when the work outlasts the deadline (connect-go would give a bare
// ctx.Err() the same code). It says in a header when that was, relative to
// the deadline the client set (which the client sends for this purpose).
type waiter struct {
	conformancev1connect.UnimplementedConformanceServiceHandler
}

const (
	deadlineHeader = "Client-Deadline" // the client's deadline, Unix nanoseconds
	answeredHeader = "Answered-At"     // when the server answered, relative to it
)

func (waiter) Unary(ctx context.Context, req *connect.Request[conformancev1.UnaryRequest]) (*connect.Response[conformancev1.UnaryResponse], error) {
	<-ctx.Done()
	err := connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	if ns, perr := strconv.ParseInt(req.Header().Get(deadlineHeader), 10, 64); perr == nil {
		err.Meta().Set(answeredHeader, time.Since(time.Unix(0, ns)).String())
	}
	return nil, err
}

// outcome is what one call saw. Times are relative to the client's
// deadline: negative before it, positive after.
type outcome struct {
	answered bool          // the server's error headers reached the client
	server   time.Duration // when the server answered
	client   time.Duration // when the client had the headers in hand
	cut      bool          // the JSON body read was not valid JSON
	code     connect.Code  // what connect-go's client reported
}

func run(n, parallel int, timeout time.Duration, http1 bool, out io.Writer) error {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(!http1)
	protocols.SetHTTP1(http1)
	mux := http.NewServeMux()
	mux.Handle(conformancev1connect.NewConformanceServiceHandler(waiter{}))
	srv := &http.Server{Handler: mux, Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()

	transport := &http.Transport{Protocols: &protocols}
	defer transport.CloseIdleConnections()
	client := conformancev1connect.NewConformanceServiceClient(
		&http.Client{Transport: captureTransport{transport}}, "http://"+lis.Addr().String())

	outcomes := make(chan outcome, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			outcomes <- call(client, timeout)
		})
	}
	wg.Wait()
	close(outcomes)

	var answered, cut []outcome
	codes := make(map[connect.Code]int)
	for o := range outcomes {
		if o.answered {
			answered = append(answered, o)
		}
		if o.cut {
			cut = append(cut, o)
			codes[o.code]++
		}
	}
	fmt.Fprintf(out, "%d calls over %s with a %v deadline: %d got the server's error headers, %d of them a cut JSON body (%.2f%% of the calls)\n",
		n, map[bool]string{false: "HTTP/2", true: "HTTP/1.1"}[http1], timeout, len(answered), len(cut), 100*float64(len(cut))/float64(n))
	atServer := func(o outcome) time.Duration { return o.server }
	atClient := func(o outcome) time.Duration { return o.client }
	fmt.Fprintf(out, "  relative to the client's deadline, the server answered at %s (all), %s (cut)\n", spread(answered, atServer), spread(cut, atServer))
	fmt.Fprintf(out, "  and the client had the headers in hand at %s (all), %s (cut)\n", spread(answered, atClient), spread(cut, atClient))
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		fmt.Fprintf(out, "  client reported %v for %d of the cut ones\n", c, codes[c])
	}
	return nil
}

// spread is the minimum, median and maximum of a time of outs.
func spread(outs []outcome, at func(outcome) time.Duration) string {
	if len(outs) == 0 {
		return "-"
	}
	ds := make([]time.Duration, len(outs))
	for i, o := range outs {
		ds[i] = at(o)
	}
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("[min %v, median %v, max %v]", r(ds[0]), r(ds[len(ds)/2]), r(ds[len(ds)-1]))
}

// call makes one call, as the reference client does (a context with the
// deadline, the body kept as read), and tells what it saw.
func call(client conformancev1connect.ConformanceServiceClient, timeout time.Duration) outcome {
	body := new(captured)
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), capturedKey{}, body), deadline)
	defer cancel()
	req := connect.NewRequest(&conformancev1.UnaryRequest{})
	req.Header().Set(deadlineHeader, strconv.FormatInt(deadline.UnixNano(), 10))
	_, err := client.Unary(ctx, req)
	body.mu.Lock()
	defer body.mu.Unlock()
	if !body.answered {
		return outcome{}
	}
	server, _ := time.ParseDuration(body.answeredAt)
	return outcome{
		answered: true,
		server:   server,
		client:   body.at.Sub(deadline),
		cut:      !json.Valid(body.buf.Bytes()),
		code:     connect.CodeOf(err),
	}
}

// captureTransport keeps the bytes read from a unary JSON error body, as
// the suite's reference client does (its wireCaptureTransport).
type captureTransport struct{ next http.RoundTripper }

type capturedKey struct{}

type captured struct {
	mu         sync.Mutex
	answered   bool
	at         time.Time // when the client had the headers in hand
	answeredAt string    // the server's Answered-At header
	buf        bytes.Buffer
}

func (t captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	at := time.Now()
	c, ok := req.Context().Value(capturedKey{}).(*captured)
	if err != nil || !ok || res.StatusCode == http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		return res, err
	}
	c.mu.Lock()
	c.answered, c.at, c.answeredAt = true, at, res.Header.Get(answeredHeader)
	c.mu.Unlock()
	res.Body = &captureReader{ReadCloser: res.Body, c: c}
	return res, nil
}

type captureReader struct {
	io.ReadCloser
	c *captured
}

func (r *captureReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.c.mu.Lock()
	r.c.buf.Write(p[:n])
	r.c.mu.Unlock()
	return n, err
}
