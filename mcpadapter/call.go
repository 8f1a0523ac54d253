package mcpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"connectrpc.com/connect"
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
// call the procedure in process, and turn its envelope into the result.
func (t *tool) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	args, approvalID, err := splitArguments(req.Params.Arguments)
	if err != nil {
		return refusal(middleware.CodeInvalidArgument, "invalid arguments: "+err.Error()), nil
	}
	msg := dynamicpb.NewMessage(t.method.Input())
	if err := (protojson.UnmarshalOptions{Resolver: t.b.types}).Unmarshal(args, msg); err != nil {
		return refusal(middleware.CodeInvalidArgument, argumentError(args, err)), nil
	}
	header, err := t.b.cfg.headers(ctx, req)
	if err != nil {
		return refusal(middleware.CodeUnauthenticated, "the caller could not be authenticated"), nil
	}
	creq := connect.NewRequest(msg)
	maps.Copy(creq.Header(), header)
	// The approval id comes from the argument and nowhere else; the
	// engine's binding (procedure, actor, input digest) decides whether it
	// may be consumed, so the argument cannot turn into another call.
	creq.Header().Del(adapter.HeaderApprovalID)
	if approvalID != "" {
		creq.Header().Set(adapter.HeaderApprovalID, approvalID)
	}
	if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
		var stop func()
		ctx, stop = t.startProgress(ctx, req.Session, token)
		defer stop()
	}
	res, err := t.client.CallUnary(ctx, creq)
	return t.result(res, err, approvalID), nil
}

// splitArguments takes the approval argument out of a tool call's
// arguments and returns the rest, which must be a JSON object, for
// protojson. Members keep their order and duplicates, so that protojson
// judges exactly what the client sent.
func splitArguments(raw json.RawMessage) (json.RawMessage, string, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return json.RawMessage("{}"), "", nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, "", errors.New("the arguments must be a JSON object")
	}
	var out bytes.Buffer
	out.WriteByte('{')
	var approvalID string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", errors.New("the arguments are not valid JSON")
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, "", errors.New("the arguments are not valid JSON")
		}
		if key == approvalArgument {
			if err := json.Unmarshal(value, &approvalID); err != nil {
				return nil, "", fmt.Errorf("%q must be a string", approvalArgument)
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
		return nil, "", errors.New("the arguments are not valid JSON")
	}
	if dec.More() {
		return nil, "", errors.New("the arguments must be one JSON object")
	}
	out.WriteByte('}')
	return out.Bytes(), approvalID, nil
}
