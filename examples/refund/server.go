package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/approvalconsole"
	"github.com/agentsafe/agentsafe/connectadapter"
	ordersv1 "github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1"
	"github.com/agentsafe/agentsafe/examples/internal/gen/orders/v1/ordersv1connect"
	"github.com/agentsafe/agentsafe/examples/internal/orders"
	"github.com/agentsafe/agentsafe/mcpadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// The demo's identities. A real service verifies tokens; the actor always
// comes from verified credentials, never from the request body.
var (
	agent = middleware.Actor{ID: "support-agent-7", Tenant: "shop", Kind: "agent", OnBehalfOf: []string{"alice"}}
	// carolsAgent is the same agent, working for carol: budgets per person
	// count her calls apart from alice's.
	carolsAgent = middleware.Actor{ID: "support-agent-7", Tenant: "shop", Kind: "agent", OnBehalfOf: []string{"carol"}}
	manager     = middleware.Actor{ID: "manager-bob", Tenant: "shop", Kind: "user"}
	tokens      = map[string]middleware.Actor{"agent-token": agent, "carol-agent-token": carolsAgent}
	// managers log in to the console with basic auth (demo credentials).
	managers = map[string]middleware.Actor{"bob": manager}
)

// server is the order service over Connect, governed by one interceptor.
type server struct {
	eng *middleware.Engine
	svc *orders.Service
	// audit is the audit trail, kept in memory for the demo to print; a
	// service sends it to its log (middleware.NewSlogSink) or OpenTelemetry.
	audit *agentsafetest.Recorder
	// replays finds the execution that replayed a stored result.
	replays replayLog
	url     string
	http    *http.Server
}

// newServer builds the service on its stores: approvals, results (where
// the results of calls carrying an Idempotency-Key are kept, so that a
// repeat is replayed rather than run again) and budgets (what refunds and
// emails have spent); opts add to the engine's options (a strict audit
// sink, with -postgres).
func newServer(st stores, opts ...middleware.Option) (*server, error) {
	s := &server{svc: orders.New(), audit: &agentsafetest.Recorder{}}
	key, err := resultKey()
	if err != nil {
		return nil, err
	}
	eng, err := newEngine(nil, st.approvals, append([]middleware.Option{ // the capabilities are the method options in orders.proto
		middleware.WithResultStore(st.results),
		middleware.WithBudgetStore(st.budgets),
		middleware.WithResultKey(key), // stored responses are sealed with it
		middleware.WithEventSink(s.audit),
		middleware.WithEventSink(&s.replays),
		middleware.WithEventSink(mcpadapter.ProgressSink()), // retries become MCP progress notifications
		// Envelopes asking for a decision link to it in the console.
		middleware.WithApprovalURL(func(id string) string { return approvalconsole.Link(s.url + "/console")(id) }),
		// What the manager approves is the refund as the order is: the
		// approval is bound to the order's version, and a resume after
		// the order changed is refused APPROVAL_STALE.
		middleware.WithPreview(ordersv1connect.OrderServiceRefundOrderProcedure, s.svc.PreviewRefund),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	s.eng = eng
	mux := http.NewServeMux()
	mux.Handle(routes(eng, s.svc))
	mux.Handle("/console/", basicAuthChallenge(http.StripPrefix("/console", approvalconsole.New(eng, managerFromBasicAuth))))
	// The same procedures as MCP tools for agents, through the same handler
	// stack: authentication and agentsafe run exactly as for Connect calls.
	bridge, err := mcpadapter.New(eng, mux, []string{ordersv1connect.OrderServiceName})
	if err != nil {
		return nil, err
	}
	// The MCP endpoint authenticates too: tool listings ask the policies
	// about the agent that lists.
	mux.Handle("/mcp", authenticateHTTP(bridge.Handler(nil)))
	s.http = &http.Server{Handler: mux}
	return s, nil
}

// newEngine builds the order service's engine: the capabilities of
// orders.proto (replaced by reg's entries), who the caller is, when a
// refund needs a manager, which refunds no agent may make, and what
// approvers see.
func newEngine(reg *middleware.Registry, store store.ApprovalStore, opts ...middleware.Option) (*middleware.Engine, error) {
	return middleware.New(reg, append(append(governance(), middleware.WithApprovalStore(store)), opts...)...)
}

// governance is every engine option of the service but its approval
// store and sinks.
func governance() []middleware.Option {
	return []middleware.Option{
		middleware.WithActor(actorFromContext),
		middleware.WithApprovalCondition(orders.NeedsApproval), // the policy "approval-condition"
		middleware.WithPolicy(orders.RefundLimit{}),            // the policy "refund-limit"
		middleware.WithApprovalView(approvalView),
	}
}

// routes is the service's handler stack for eng: the guard (a procedure
// hidden from its caller looks absent before its body is read), then
// authentication, then the agentsafe interceptor.
func routes(eng *middleware.Engine, svc *orders.Service) (string, http.Handler) {
	interceptor := connectadapter.NewInterceptor(eng)
	return interceptor.Guard(ordersv1connect.NewOrderServiceHandler(handler{svc},
		connect.WithInterceptors(authenticate{}, interceptor))) // the one line
}

// resultKey is the key stored responses are sealed with. The demo makes
// one per run; a real service loads it from its secret store, with an id
// that names it, so that it can be rotated.
func resultKey() (middleware.ResultKey, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return middleware.ResultKey{}, err
	}
	return middleware.ResultKey{ID: "demo", Key: k}, nil
}

// start serves on addr ("127.0.0.1:0" for any free port).
func (s *server) start(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.url = "http://" + lis.Addr().String()
	go s.http.Serve(lis)
	return nil
}

func (s *server) close() { s.http.Close() }

type actorKey struct{}

// authenticate is the service's own authentication: it runs before
// agentsafe and puts the verified actor in the context.
type authenticate struct{}

func (authenticate) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		a, ok := tokens[strings.TrimPrefix(req.Header().Get("Authorization"), "Bearer ")]
		if !ok {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("unknown bearer token"))
		}
		return next(context.WithValue(ctx, actorKey{}, a), req)
	}
}
func (authenticate) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (authenticate) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// authenticateHTTP is the same authentication for plain HTTP endpoints
// (the MCP bridge's): the verified actor goes in the request's context.
func authenticateHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if !ok {
			http.Error(w, "unknown bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey{}, a)))
	})
}

func actorFromContext(ctx context.Context) (middleware.Actor, error) {
	a, ok := ctx.Value(actorKey{}).(middleware.Actor)
	if !ok {
		return middleware.Actor{}, errors.New("not authenticated")
	}
	return a, nil
}

func managerFromBasicAuth(r *http.Request) (middleware.Actor, error) {
	user, pass, ok := r.BasicAuth()
	if a, known := managers[user]; ok && known && pass == user {
		return a, nil
	}
	return middleware.Actor{}, errors.New("log in as a manager (demo: bob / bob)")
}

// basicAuthChallenge asks a browser for the demo's basic-auth credentials
// before it reaches the console, which itself only says who may decide.
func basicAuthChallenge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="approval console (demo: bob / bob)"`)
			http.Error(w, "log in as a manager (demo: bob / bob)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// approvalView is what approvers see of an input: the order and the
// amount, nothing else the agent sent (the reason text is model-written).
func approvalView(_ context.Context, procedure string, input []byte) (string, error) {
	var r ordersv1.RefundOrderRequest
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(input, &r); err != nil {
		return "", err
	}
	if procedure == ordersv1connect.OrderServiceCancelOrderProcedure {
		return fmt.Sprintf("cancel order %s", r.GetOrderId()), nil
	}
	return fmt.Sprintf("refund %s on order %s", orders.Money(r.GetAmountCents()), r.GetOrderId()), nil
}

// handler adapts the framework-free order service to Connect, mapping its
// business errors to Connect codes the handler declares on purpose.
type handler struct{ svc *orders.Service }

func call[Req, Res any](ctx context.Context, req *connect.Request[Req], f func(context.Context, *Req) (*Res, error)) (*connect.Response[Res], error) {
	res, err := f(ctx, req.Msg)
	switch {
	case err == nil:
		return connect.NewResponse(res), nil
	case errors.Is(err, orders.ErrTransient):
		return nil, connect.NewError(connect.CodeUnavailable, err) // transient: retried where the capability allows
	case errors.Is(err, orders.ErrAlreadyRefunded):
		// A refusal that had no effect: what it reserved on the refunds
		// budget is given back.
		return nil, middleware.NoEffect(connect.NewError(connect.CodeFailedPrecondition, err))
	case errors.Is(err, orders.ErrOrderChanged):
		// The conditional write found the order changed: nothing was
		// refunded, the approval goes back and so does what the refund
		// reserved on its budget (NoEffect).
		return nil, middleware.NoEffect(connect.NewError(connect.CodeAborted, err))
	case errors.Is(err, orders.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	return nil, err
}

func (h handler) GetOrder(ctx context.Context, r *connect.Request[ordersv1.GetOrderRequest]) (*connect.Response[ordersv1.Order], error) {
	return call(ctx, r, h.svc.GetOrder)
}
func (h handler) RefundOrder(ctx context.Context, r *connect.Request[ordersv1.RefundOrderRequest]) (*connect.Response[ordersv1.RefundOrderResponse], error) {
	return call(ctx, r, h.svc.RefundOrder)
}
func (h handler) CancelOrder(ctx context.Context, r *connect.Request[ordersv1.CancelOrderRequest]) (*connect.Response[ordersv1.CancelOrderResponse], error) {
	return call(ctx, r, h.svc.CancelOrder)
}
func (h handler) NotifyCustomer(ctx context.Context, r *connect.Request[ordersv1.NotifyCustomerRequest]) (*connect.Response[ordersv1.NotifyCustomerResponse], error) {
	return call(ctx, r, h.svc.NotifyCustomer)
}
func (h handler) ExportReport(ctx context.Context, r *connect.Request[ordersv1.ExportReportRequest]) (*connect.Response[ordersv1.ExportReportResponse], error) {
	return call(ctx, r, h.svc.ExportReport)
}
