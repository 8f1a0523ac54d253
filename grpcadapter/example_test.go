package grpcadapter_test

import (
	"context"
	"fmt"
	"net"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/grpcadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/middleware"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

type readService struct {
	testv1.UnimplementedTestServiceServer
}

func (readService) Read(ctx context.Context, r *testv1.Request) (*testv1.Response, error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	return &testv1.Response{Id: r.GetId(), Attempt: int32(x.Attempt)}, nil
}

// A gRPC server adopts agentsafe with one line, and registers its services
// through the guard (so that a hidden method looks absent before grpc-go
// decodes its request); capability metadata comes from the
// agentsafe.v1.capability option in the .proto file.
func Example() {
	eng, err := middleware.New(nil, middleware.WithApprovalStore(approvalstore.NewMemory())) // reads the method options of every linked .proto
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpcadapter.ServerOptions(eng)...) // the one line
	testv1.RegisterTestServiceServer(grpcadapter.Guard(eng, srv), readService{})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	var header metadata.MD
	resp, err := testv1.NewTestServiceClient(conn).Read(context.Background(), &testv1.Request{Id: "42"}, grpc.Header(&header))
	env, _ := grpcadapter.EnvelopeFrom(header, nil, err)
	fmt.Println(resp.GetId(), err, env.Status, env.Attempts)
	// Output: 42 <nil> completed 1
}
