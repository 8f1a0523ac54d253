package main

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
)

// The connect-go server closes no connection on a timer: a connection the
// client dialed and left unused in its pool still takes a request long
// after. A server that closed it (a ReadHeaderTimeout runs from accept)
// could do so as the client takes it for a call, which then fails
// (README.md, "A race at an unused connection").
func TestConnectServerKeepsUnusedConnections(t *testing.T) {
	for _, v := range []conformancev1.HTTPVersion{conformancev1.HTTPVersion_HTTP_VERSION_1, conformancev1.HTTPVersion_HTTP_VERSION_2} {
		t.Run(v.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, err := newConnectServer(&conformancev1.ServerCompatRequest{HttpVersion: v}, nil, nil, delay{})
				if err != nil {
					t.Fatal(err)
				}
				client, server := net.Pipe()
				lis := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
				lis.conns <- server
				served := make(chan error, 1)
				go func() { served <- srv.Serve(lis) }()
				defer func() {
					client.Close()
					srv.Close()
					<-served
				}()

				time.Sleep(time.Hour) // the connection waits, unused, in the client's pool

				go func() {
					_, _ = client.Write([]byte("GET /unknown HTTP/1.1\r\nHost: x\r\n\r\n"))
				}()
				res, err := http.ReadResponse(bufio.NewReader(client), nil)
				if err != nil {
					t.Fatalf("an hour after accepting the connection, the server did not answer on it: %v", err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusNotFound {
					t.Errorf("status %d, want 404", res.StatusCode)
				}
			})
		})
	}
}

// pipeListener hands out the connections given to it, then blocks until
// closed.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
