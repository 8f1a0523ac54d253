package mcpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/dynamicpb"
)

// approvalArgument is the optional argument of every tool that resumes a
// call with an approval. Its leading underscore keeps it apart from request
// fields, whose JSON names are lowerCamelCase; New refuses a request message
// with a field of this name.
const approvalArgument = "_approval_id"

const approvalArgumentDoc = "Only to resume a call that needed a human's approval: the approval id " +
	"the first call returned, sent with exactly the same other arguments once the approval is granted. " +
	"Leave it out otherwise."

// call is the tool handler: decode the arguments into the request message,
// call the procedure in process, and turn its envelope into the result. A
// call that answers an input-required result (it carries request state) is
// the answering round of an approval (see answer); a call that needs a
// new approval asks the user to decide it, where the client can show a URL
// (see askToDecide).
func (t *tool) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, approvalID, key, err := splitArguments(req.Params.Arguments)
	if err != nil {
		if t.hiddenAtListing(ctx) { // no refusal may tell a hidden tool apart
			return nil, unknownTool(req.Params.Name)
		}
		return refusal(middleware.CodeInvalidArgument, "invalid arguments: "+err.Error()), nil
	}
	if req.Params.RequestState != "" {
		return t.answer(ctx, req, args, approvalID, key)
	}
	mark := adapter.ApprovalMark{Payload: t.b.sealArguments(t.procedure, args)}
	res, err, refused := t.invoke(ctx, req, args, approvalID, key, mark)
	if errors.Is(err, errHidden) {
		return nil, unknownTool(req.Params.Name)
	}
	if refused != nil {
		return refused, nil
	}
	if approvalID == "" {
		if r := t.askToDecide(ctx, req, res, err); r != nil {
			return r, nil
		}
	}
	return t.result(res, err, approvalID), nil
}

// invoke calls the procedure in process with args, as the caller of req,
// presenting approvalID and the caller's key; mark is what the call asks
// of the approval gate. A non-nil result is a refusal before the call.
func (t *tool) invoke(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage, approvalID, key string, mark adapter.ApprovalMark) (*connect.Response[dynamicpb.Message], error, *mcp.CallToolResult) {
	msg := dynamicpb.NewMessage(t.method.Input())
	if err := (protojson.UnmarshalOptions{Resolver: t.b.types}).Unmarshal(args, msg); err != nil {
		if t.hiddenAtListing(ctx) {
			return nil, errHidden, nil
		}
		return nil, nil, refusal(middleware.CodeInvalidArgument, argumentError(args, err))
	}
	creq, err := t.request(ctx, req, msg, approvalID, key)
	if err != nil {
		if t.hiddenAtListing(ctx) { // a refusal only a tool that exists gives
			return nil, errHidden, nil
		}
		return nil, nil, refusal(middleware.CodeUnauthenticated, "the caller could not be authenticated")
	}
	if mark.Wait > 0 || len(mark.Payload) > 0 {
		ctx = adapter.WithApprovalMark(ctx, t.procedure, mark)
	}
	if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
		var stop func()
		ctx, stop = t.startProgress(ctx, req.Session, token)
		defer stop()
	}
	// The call comes in on the MCP surface: the bridge says so through the
	// request's context, which only code in this process can set. The
	// client side of the call does not give up when ctx ends: the handler
	// sees ctx's cancellation and the engine answers it, so a call the
	// client cancels is answered with its own envelope (see serveWith).
	res, err := t.client.CallUnary(serveWith(adapter.WithSurface(ctx, middleware.SurfaceMCP)), creq)
	if _, governed := connectadapter.ReadEnvelope(res, err); absent(governed, err) {
		return nil, errHidden, nil // as if the tool did not exist
	}
	return res, err, nil
}

// request is the in-process request of msg for the caller of req: the
// headers [WithHeaders] gives for req, approvalID and the caller's key.
// It fails when the headers function does.
func (t *tool) request(ctx context.Context, req *mcp.CallToolRequest, msg *dynamicpb.Message, approvalID, key string) (*connect.Request[dynamicpb.Message], error) {
	header, err := t.b.cfg.headers(ctx, req)
	if err != nil {
		return nil, err
	}
	creq := connect.NewRequest(msg)
	maps.Copy(creq.Header(), header)
	// The approval id comes from the argument (or the bridge's own sealed
	// state) and nowhere else; the engine's binding (procedure, actor,
	// input digest) decides whether it may be consumed, so the argument
	// cannot turn into another call.
	creq.Header().Del(adapter.HeaderApprovalID)
	if approvalID != "" {
		creq.Header().Set(adapter.HeaderApprovalID, approvalID)
	}
	setKey(creq.Header(), key)
	return creq, nil
}

// splitArguments takes the approval and idempotency key arguments out of
// a tool call's arguments and returns the rest, which must be a JSON
// object, for protojson. Members keep their order and duplicates, so that
// protojson judges exactly what the client sent.
func splitArguments(raw json.RawMessage) (args json.RawMessage, approvalID, idempotencyKey string, err error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return json.RawMessage("{}"), "", "", nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, "", "", errors.New("the arguments must be a JSON object")
	}
	var out bytes.Buffer
	out.WriteByte('{')
	seenKey := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", "", errors.New("the arguments are not valid JSON")
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, "", "", errors.New("the arguments are not valid JSON")
		}
		switch key {
		case approvalArgument:
			if err := json.Unmarshal(value, &approvalID); err != nil {
				return nil, "", "", fmt.Errorf("%q must be a string", approvalArgument)
			}
			continue
		case keyArgument:
			if seenKey { // two keys, as two Idempotency-Key headers are: malformed
				return nil, "", "", fmt.Errorf("%q is given more than once", keyArgument)
			}
			seenKey = true
			if err := json.Unmarshal(value, &idempotencyKey); err != nil {
				return nil, "", "", fmt.Errorf("%q must be a string", keyArgument)
			}
			if err := checkKey(idempotencyKey); err != nil {
				return nil, "", "", err
			}
			continue
		}
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(value)
	}
	if _, err := dec.Token(); err != nil {
		return nil, "", "", errors.New("the arguments are not valid JSON")
	}
	if dec.More() {
		return nil, "", "", errors.New("the arguments must be one JSON object")
	}
	out.WriteByte('}')
	return out.Bytes(), approvalID, idempotencyKey, nil
}
