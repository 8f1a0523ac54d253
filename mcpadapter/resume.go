package mcpadapter

import (
	"context"
	"encoding/json"
	"errors"

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

// resume is the approvals_resume tool: it reads the approval's record,
// opens the arguments the call kept there (sealed under the engine's result
// key for its procedure) and calls the procedure again with them and the
// approval id, as the caller of this tool. The engine then does what it
// does for every resume: it digests the arguments again and consumes the
// approval only for the same whole actor, procedure and input, once. A
// caller's _idempotency_key makes a repeat after a lost reply a replay.
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
	if err == nil && len(rec.Payload) > 0 {
		if t := b.byProc[rec.Procedure]; t != nil {
			if args, err := adapter.Open(b.eng, rec.Payload, argumentsContext+rec.Procedure); err == nil {
				res, err, refused := t.invoke(ctx, req, args, in.ApprovalID, key, adapter.ApprovalMark{})
				if errors.Is(err, errHidden) {
					return refusal(middleware.CodeApprovalNotFound, errNotResumable), nil // hidden looks absent
				}
				if refused != nil {
					return refused, nil
				}
				return t.result(res, err, in.ApprovalID), nil
			}
		}
	}
	if err != nil && !errors.Is(err, store.ErrApprovalNotFound) {
		return refusal(middleware.CodeApprovalUnavailable, "the approval store is unavailable; nothing ran"), nil
	}
	return refusal(middleware.CodeApprovalNotFound, errNotResumable), nil
}
