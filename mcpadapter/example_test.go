package mcpadapter_test

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type recordService struct {
	testv1connect.UnimplementedTestServiceHandler
}

func (recordService) Read(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	return connect.NewResponse(&testv1.Response{Id: req.Msg.GetId(), Note: "record " + req.Msg.GetId()}), nil
}

func (recordService) Gated(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
	x, _ := middleware.ExecutionFromContext(ctx)
	return connect.NewResponse(&testv1.Response{Id: req.Msg.GetId(), Note: "written, approved by " + x.Approval.Approver.ID}), nil
}

// The governed procedures of a Connect service become MCP tools. A tool
// call runs through the service's own handler stack, and a call that needs
// a human's approval is resumed with the "_approval_id" argument.
func Example() {
	ctx := context.Background()
	eng, err := middleware.New(nil, // capabilities from the .proto method options
		middleware.WithApprovalStore(approvalstore.NewMemory()),
		middleware.WithActor(func(context.Context) (middleware.Actor, error) {
			return middleware.Actor{ID: "agent-7", Tenant: "acme"}, nil // from your authentication
		}))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	interceptor := connectadapter.NewInterceptor(eng)
	mux.Handle(interceptor.Guard(testv1connect.NewTestServiceHandler(recordService{}, connect.WithInterceptors(interceptor))))

	bridge, err := mcpadapter.New(eng, mux, []string{testv1connect.TestServiceName})
	if err != nil {
		panic(err)
	}
	// Serve it: mux.Handle("/mcp", bridge.Handler(nil)) for streamable
	// HTTP; here, the SDK's in-memory transport.
	serverSide, clientSide := mcp.NewInMemoryTransports()
	ss, err := bridge.NewServer(nil, nil).Connect(ctx, serverSide, nil)
	if err != nil {
		panic(err)
	}
	defer ss.Wait()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(ctx, clientSide, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()

	read, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"id": "42"}})
	fmt.Println("read:", read.StructuredContent.(map[string]any)["note"])

	args := map[string]any{"id": "42", "amount": 12000}
	first, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gated", Arguments: args})
	env, _ := mcpadapter.ReadEnvelope(first)
	fmt.Println("gated:", env.Status, first.IsError)

	// A human approves, through the engine's store.
	if _, err := eng.Decide(ctx, env.ApprovalID, store.Decision{Approve: true, Approver: middleware.Actor{ID: "manager-1", Tenant: "acme"}}); err != nil {
		panic(err)
	}
	args["_approval_id"] = env.ApprovalID
	resumed, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gated", Arguments: args})
	fmt.Println("resumed:", resumed.StructuredContent.(map[string]any)["note"])

	again, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gated", Arguments: args})
	env, _ = mcpadapter.ReadEnvelope(again)
	fmt.Println("again:", env.Error.Code)
	// Output:
	// read: record 42
	// gated: approval_required true
	// resumed: written, approved by manager-1
	// again: APPROVAL_CONSUMED
}
