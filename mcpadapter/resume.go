package mcpadapter

import (
	"context"
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// resumeTool is the bridge's own tool that resumes an approved call by its
// approval id.
const resumeTool = "approvals_resume"

func resumeToolDef() *mcp.Tool {
	return &mcp.Tool{
		Name: resumeTool,
		Description: "Resume a call that needed a human's approval, once it is approved, by the approval id alone: " +
			"the server kept the call's arguments when it asked for the approval. The call runs once, as the caller " +
			"that made it; it does not run for anyone else.",
		InputSchema: &jsonschema.Schema{
			Type:     "object",
			Required: []string{"approval_id"},
			Properties: map[string]*jsonschema.Schema{
				"approval_id": {Type: "string", Description: "The approval id the call's result gave."},
				keyArgument:   {Type: "string", Description: keyArgumentDoc, MinLength: new(1), MaxLength: new(maxKeyArgument)},
			},
			PropertyOrder: []string{"approval_id", keyArgument},
		},
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}
}

// errNotResumable is the one answer for every id approvals_resume cannot
// resume: unknown, another audience's, a call that kept no arguments, a
// procedure this bridge does not serve, arguments that do not open. It
// reveals nothing about the record.
const errNotResumable = "no approval with this id can be resumed here"

// resume is the approvals_resume tool. It reads the approval's record
// and first asks who calls (see caller): only the record's requester, the
// whole actor, gets further, and anyone else gets the one answer every id
// it cannot resume gets, APPROVAL_NOT_FOUND, whatever the policies would
// let that caller run — the arguments stay sealed. For the requester it
// opens the arguments the call kept there (sealed under the engine's
// result key for its procedure) and calls the procedure again with them
// and the approval id. The engine then does what it does for every
// resume: it digests the arguments again and consumes the approval only
// for the same whole actor, procedure and input, once; a pending,
// rejected, expired or used record is its own code. A consumed record
// still opens for its requester, so that a repeat carrying the same
// _idempotency_key is replayed.
func (b *Bridge) resume(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	// The key argument is read as for every tool (once, a string the
	// header could carry), the rest for the approval id.
	rest, _, key, err := splitArguments(req.Params.Arguments)
	if err != nil {
		return refusal(middleware.CodeInvalidArgument, "invalid arguments: "+err.Error()), nil
	}
	var in struct {
		ApprovalID string `json:"approval_id"`
	}
	if err := json.Unmarshal(rest, &in); err != nil || in.ApprovalID == "" {
		return refusal(middleware.CodeInvalidArgument, `send {"approval_id": "apr_..."}`), nil
	}
	rec, err := b.eng.Get(ctx, in.ApprovalID)
	if err != nil && !errors.Is(err, store.ErrApprovalNotFound) {
		return refusal(middleware.CodeApprovalUnavailable, "the approval store is unavailable; nothing ran"), nil
	}
	t := b.byProc[rec.Procedure]
	if err != nil || t == nil || len(rec.Payload) == 0 {
		return refusal(middleware.CodeApprovalNotFound, errNotResumable), nil
	}
	if who, ok := t.caller(ctx, req); !ok || who.ID == "" || !store.SameActor(who, rec.Requester) {
		return refusal(middleware.CodeApprovalNotFound, errNotResumable), nil
	}
	args, err := adapter.Open(b.eng, rec.Payload, argumentsContext+rec.Procedure)
	if err != nil {
		return refusal(middleware.CodeApprovalNotFound, errNotResumable), nil
	}
	res, err, refused := t.invoke(ctx, req, args, in.ApprovalID, key, adapter.ApprovalMark{})
	if errors.Is(err, errHidden) {
		return refusal(middleware.CodeApprovalNotFound, errNotResumable), nil // hidden looks absent
	}
	if refused != nil {
		return refused, nil
	}
	return t.result(res, err, in.ApprovalID), nil
}

// caller returns who the caller of req is to the engine, as a call of
// t's procedure would have it: an empty request of the procedure, made in
// process exactly as a tool call is (the same headers, the same service
// stack, so the service's own authentication runs), marked as a caller
// probe (adapter.WithCallerProbe), which the engine answers with the
// actor its actor function finds and runs nothing for. It reports false
// when the probe got no answer: the headers function failed, the service
// refused the request before the engine saw it, or the actor function
// failed.
func (t *tool) caller(ctx context.Context, req *mcp.CallToolRequest) (middleware.Actor, bool) {
	creq, err := t.request(ctx, req, dynamicpb.NewMessage(t.method.Input()), "", "")
	if err != nil {
		return middleware.Actor{}, false
	}
	var (
		who   middleware.Actor
		found bool
	)
	ctx = adapter.WithCallerProbe(ctx, t.procedure, func(a middleware.Actor, err error) {
		who, found = a, err == nil
	})
	_, _ = t.client.CallUnary(adapter.WithSurface(ctx, middleware.SurfaceMCP), creq)
	return who, found
}
