package grpcadapter_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testproto/fixture"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestAHiddenStreamIsGRPCsUnknownMethod: a hidden stream gets grpc-go's own
// answer for a stream the server has no handler for, and no metadata.
func TestAHiddenStreamIsGRPCsUnknownMethod(t *testing.T) {
	eng := agentsafetest.NewEngine(t, nil, middleware.WithPolicy(fixture.HideAll{}))
	hidden := testv1.NewTestServiceClient(serve(t, eng.Engine, newService(nil, nil)))

	desc := testv1.TestService_ServiceDesc
	desc.Streams = nil
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&desc, newService(nil, nil))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	absent := testv1.NewTestServiceClient(conn)

	receive := func(c testv1.TestServiceClient) (*status.Status, metadata.MD, metadata.MD) {
		st, err := c.Stream(t.Context(), &testv1.Request{Id: "s1", Count: 2})
		if err != nil {
			t.Fatal(err)
		}
		for err == nil {
			_, err = st.Recv()
		}
		header, _ := st.Header()
		return status.Convert(err), header, st.Trailer()
	}
	got, header, trailer := receive(hidden)
	want, wantHeader, wantTrailer := receive(absent)
	if got.Code() != want.Code() || got.Message() != want.Message() || len(got.Details()) != 0 {
		t.Errorf("hidden stream: %v; a server without it: %v", got, want)
	}
	if !reflect.DeepEqual(header, wantHeader) || !reflect.DeepEqual(trailer, wantTrailer) {
		t.Errorf("metadata: header %v, trailer %v; a server without it sends %v, %v", header, trailer, wantHeader, wantTrailer)
	}
}

// rawGRPC sends a raw gRPC call of procedure to addr over cleartext
// HTTP/2, with header set as given, and returns what came back.
func rawGRPC(t *testing.T, addr, procedure string, shape conformance.Shape, header map[string]string) conformance.RawResponse {
	t.Helper()
	r, ok := fixture.RawRequest(t.Context(), fixture.WireGRPC, "http://"+addr+procedure, conformance.Request{ID: "r1"}, shape)
	if !ok {
		t.Fatalf("no raw gRPC call of shape %s", shape)
	}
	for k, v := range header {
		r.Header.Set(k, v)
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	return fixture.Do(&http.Client{Transport: tr}, r)
}

// TestAHiddenMethodWithAnExpiredDeadlineIsNeverCancelled: grpc-go resets
// a stream whose deadline passed from a timer that races with any answer,
// for a method it does not have too, which then gets one of three: the
// reset (RST_STREAM CANCEL), its unknown method, or its own
// DeadlineExceeded "context deadline exceeded". A hidden method may get
// only those, never agentsafe's CANCELLED (DeadlineExceeded "the caller's
// deadline passed") or its metadata, which would tell it exists.
func TestAHiddenMethodWithAnExpiredDeadlineIsNeverCancelled(t *testing.T) {
	eng := agentsafetest.NewEngine(t, nil, middleware.WithPolicy(fixture.HideAll{}))
	_, addr := serveAddr(t, eng.Engine, newService(nil, nil))
	for range 100 { // the race goes the other way now and then
		got := rawGRPC(t, addr, testv1.TestService_Write_FullMethodName, conformance.ShapeExpired, nil)
		status, msg := got.Header.Get("Grpc-Status"), got.Header.Get("Grpc-Message")
		reset := got.Status == 0 && strings.Contains(string(got.Body), "CANCEL")
		unknown := status == "12" && msg == "unknown method Write for service agentsafe.test.v1.TestService"
		grpcs := status == "4" && msg == "context deadline exceeded"
		if !reset && !unknown && !grpcs {
			t.Fatalf("a hidden method with an expired deadline answered %s", got)
		}
		for k := range got.Header {
			if strings.HasPrefix(k, "Agentsafe-") {
				t.Fatalf("header %s reached the client: %s", k, got)
			}
		}
	}
}

// TestTheGuardHidesByTheActorInTheMetadata: the guard runs before
// grpc-go decodes the request, with the incoming metadata in its context:
// an actor function that reads it hides a method from its caller even
// when the body does not decode.
func TestTheGuardHidesByTheActorInTheMetadata(t *testing.T) {
	actor := middleware.WithActor(func(ctx context.Context) (middleware.Actor, error) {
		kind := metadata.ValueFromIncomingContext(ctx, "x-caller-kind")
		if len(kind) != 1 {
			return middleware.Actor{}, errors.New("no caller")
		}
		return middleware.Actor{ID: "caller", Kind: kind[0]}, nil
	})
	eng := agentsafetest.NewEngine(t, nil, actor, middleware.WithPolicy(fixture.HideFromAgents{}))
	_, addr := serveAddr(t, eng.Engine, newService(nil, nil))
	srv, absentAddr := withoutMethod(t, conformance.FixtureRead)
	defer srv.Stop()
	agent := map[string]string{"X-Caller-Kind": "agent"}
	got := rawGRPC(t, addr, testv1.TestService_Read_FullMethodName, conformance.ShapeUndecodable, agent)
	want := rawGRPC(t, absentAddr, testv1.TestService_Read_FullMethodName, conformance.ShapeUndecodable, agent)
	got.Header.Del("Date")
	want.Header.Del("Date")
	if got.Status != want.Status || !reflect.DeepEqual(got.Header, want.Header) || !reflect.DeepEqual(got.Trailer, want.Trailer) || string(got.Body) != string(want.Body) {
		t.Fatalf("an agent's undecodable call of a method hidden from agents:\nhidden: %s\nabsent: %s", got, want)
	}
	user := rawGRPC(t, addr, testv1.TestService_Read_FullMethodName, conformance.ShapeUndecodable, map[string]string{"X-Caller-Kind": "user"})
	if user.Header.Get("Grpc-Status") != "13" {
		t.Fatalf("a user's undecodable call reaches grpc-go's decoding (Internal): %s", user)
	}
}
