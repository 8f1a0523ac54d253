// Command server is a server under test for the connectrpc/conformance
// suite (connectconformance --mode server): it implements
// connectrpc.conformance.v1.ConformanceService once with connect-go and
// once with grpc-go, and with -agentsafe governs every procedure of it
// through agentsafe's adapter for that framework, so that the suite can
// tell whether agentsafe is invisible to the protocol.
//
//	server -impl connect|grpc [-agentsafe [-events FILE]] [-honour-context]
//
// As the suite's docs/testing_servers.md asks, it reads one size-delimited
// ServerCompatRequest from stdin, listens on an ephemeral loopback port,
// writes one size-delimited ServerCompatResponse to stdout, and serves
// until SIGTERM.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	conformancev1 "github.com/agentsafe/agentsafe/interop/internal/gen/connectrpc/conformance/v1"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/protobuf/proto"
)

func main() {
	impl := flag.String("impl", "connect", "the framework serving the service: connect (connect-go handlers: Connect, gRPC, gRPC-Web) or grpc (grpc.NewServer)")
	governed := flag.Bool("agentsafe", false, "govern every procedure of the service through agentsafe")
	events := flag.String("events", "", "with -agentsafe: once stopped, append the engine's event counts to this file, one line")
	honour := flag.Bool("honour-context", false, "end a response delay when the handler's context ends, failing with its error, instead of sleeping it whole as the suite's reference servers do")
	flag.Parse()
	if err := run(*impl, *governed, *events, delay{honourContext: *honour}, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run(impl string, governed bool, events string, d delay, in io.Reader, out io.Writer) error {
	var eng *middleware.Engine
	var counter *eventCounter
	if governed {
		if events != "" {
			counter = newEventCounter()
		}
		var err error
		if eng, err = newEngine(counter); err != nil {
			return err
		}
	}
	req := new(conformancev1.ServerCompatRequest)
	if err := readDelimited(in, req); err != nil {
		return fmt.Errorf("reading the ServerCompatRequest: %w", err)
	}
	tlsConf, cert, err := serverTLS(req)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var serve func() error
	var stop func()
	switch impl {
	case "connect":
		srv, err := newConnectServer(req, tlsConf, eng, d)
		if err != nil {
			return err
		}
		serve = func() error { return serveHTTP(srv, lis) }
		stop = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if srv.Shutdown(ctx) != nil {
				_ = srv.Close()
			}
		}
	case "grpc":
		srv, err := newGRPCServer(req, tlsConf, eng, d)
		if err != nil {
			return err
		}
		serve = func() error { return srv.Serve(lis) }
		stop = func() {
			t := time.AfterFunc(5*time.Second, srv.Stop)
			srv.GracefulStop()
			t.Stop()
		}
	default:
		return fmt.Errorf("unknown -impl %q: want connect or grpc", impl)
	}

	done := make(chan error, 1)
	go func() { done <- serve() }()
	addr := lis.Addr().(*net.TCPAddr)
	res := &conformancev1.ServerCompatResponse{Host: addr.IP.String(), Port: uint32(addr.Port), PemCert: cert}
	if err := writeDelimited(out, res); err != nil {
		return fmt.Errorf("writing the ServerCompatResponse: %w", err)
	}

	sig, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	select {
	case err := <-done:
		return err
	case <-sig.Done():
		stop()
		if counter == nil {
			return nil
		}
		return appendCounts(events, counter)
	}
}

// appendCounts appends the counter's line to the file at path.
func appendCounts(path string, c *eventCounter) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := c.writeTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// serverTLS is the TLS configuration the request asks for, with the
// certificate the runner provided (echoed back in the response), and client
// certificates required when the runner sends one to trust. Nil without
// TLS.
func serverTLS(req *conformancev1.ServerCompatRequest) (*tls.Config, []byte, error) {
	if !req.GetUseTls() {
		return nil, nil, nil
	}
	creds := req.GetServerCreds()
	if creds == nil {
		return nil, nil, errors.New("TLS was asked for without server credentials")
	}
	cert, err := tls.X509KeyPair(creds.GetCert(), creds.GetKey())
	if err != nil {
		return nil, nil, fmt.Errorf("server credentials: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if len(req.GetClientTlsCert()) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(req.GetClientTlsCert()) {
			return nil, nil, errors.New("cannot parse the client certificate to trust")
		}
		conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return conf, creds.GetCert(), nil
}

// readDelimited reads a message preceded by its size, a big-endian uint32.
func readDelimited(r io.Reader, msg proto.Message) error {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	return proto.Unmarshal(buf, msg)
}

// writeDelimited writes msg preceded by its size, a big-endian uint32.
func writeDelimited(w io.Writer, msg proto.Message) error {
	data, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(data)), uint32(len(data)))
	_, err = w.Write(append(buf, data...))
	return err
}
