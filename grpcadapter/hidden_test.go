package grpcadapter_test

import (
	"context"
	"net"
	"reflect"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type hideAll struct{}

func (hideAll) Name() string { return "hide-all" }
func (hideAll) Decide(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) {
	return middleware.Hide(), nil
}

// TestAHiddenStreamIsGRPCsUnknownMethod: a hidden stream gets grpc-go's own
// answer for a stream the server has no handler for, and no metadata.
func TestAHiddenStreamIsGRPCsUnknownMethod(t *testing.T) {
	eng := agentsafetest.NewEngine(t, nil, middleware.WithPolicy(hideAll{}))
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
