package mcpadapter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The contexts of what the bridge seals under the engine's result key: the
// request state of an input-required result, and the arguments kept with
// an approval; each bound to the procedure.
const (
	stateContext     = "mcpadapter request state\x00"
	argumentsContext = "mcpadapter arguments\x00"
)

// multiRoundTrip is the first protocol version whose clients receive the
// input-required result themselves; the SDK serves earlier ones
// (2025-11-25) by eliciting from the server and calling the tool again.
const multiRoundTrip = "2026-07-28"

// requestState is what the round that asks for a decision hands the
// client, sealed, for the round that answers.
type requestState struct {
	ApprovalID string `json:"approvalId"`
}

// askToDecide turns the APPROVAL_REQUIRED result of a call into an
// input-required result holding one URL-mode elicitation, whose URL is the
// approval's deep link and whose id is the approval's, when all of these
// hold: the client supports URL-mode elicitation, the engine knows the
// approval's URL and can seal, and this call requested the approval
// (a repeat of a pending request gets its id again, and is not asked
// again: one approval is asked for once). Otherwise it returns nil, and
// the call's result (the URL result) stands.
func (t *tool) askToDecide(ctx context.Context, req *mcp.CallToolRequest, res *connect.Response[dynamicpb.Message], err error) *mcp.CallToolResult {
	env, governed := connectadapter.ReadEnvelope(res, err)
	if !governed || env.Error == nil || env.Error.Code != middleware.CodeApprovalRequired || env.ApprovalID == "" || env.ApprovalURL == "" {
		return nil
	}
	if caps := req.ClientCapabilities(); caps == nil || caps.Elicitation == nil || caps.Elicitation.URL == nil {
		return nil
	}
	rec, gerr := t.b.eng.Get(ctx, env.ApprovalID)
	if gerr != nil || rec.RequestedBy != env.ExecutionID {
		return nil
	}
	plain, _ := json.Marshal(requestState{ApprovalID: env.ApprovalID})
	sealed, serr := adapter.Seal(t.b.eng, plain, stateContext+t.procedure)
	if serr != nil {
		return nil
	}
	r := &mcp.CallToolResult{
		Meta: mcp.Meta{},
		InputRequests: mcp.InputRequestMap{env.ApprovalID: &mcp.ElicitParams{
			Mode:          "url",
			URL:           env.ApprovalURL,
			ElicitationID: env.ApprovalID,
			Message: previewFirst(rec.PreviewText, fmt.Sprintf("%s needs a person's approval before it runs. Open the link to see the request; "+
				"whoever may approve it decides there. The call continues once it is approved.", t.def.Name)),
		}},
		RequestState: base64.RawURLEncoding.EncodeToString(sealed),
	}
	b, _ := env.MarshalJSON()
	r.Meta[metaEnvelope] = json.RawMessage(b)
	if a, ok := awaiting(env); ok {
		r.Meta[metaAwaiting] = a
	}
	return r
}

// previewFirst puts the effect the server previewed, if any, before the
// rest of an elicitation's message: what the user is asked to have
// approved is what runs.
func previewFirst(preview, rest string) string {
	if preview == "" {
		return rest
	}
	return preview + "\n\n" + rest
}

// answer is the round that answers the bridge's elicitation: the same
// tool, the same arguments, the sealed request state and the client's
// response. The client's "accept" only says the user was shown the link;
// it is never the approval. The call presents the approval of the state
// (an _approval_id argument naming another is refused) and the engine
// re-checks, before it waits, that the approval is this caller's (the
// whole actor) for this procedure and this input; it waits at most
// WithApprovalWait (never past expiry, never after the client cancels) for
// the decision, consumes the approval once it is approved and runs the
// call as a new execution, whose result is the tool result. Still
// undecided is the URL result; it never asks again. On sessions older
// than multi-round-trip (2025-11-25), a decision seen is also announced
// with notifications/elicitation/complete.
func (t *tool) answer(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage, approvalID, key string) (*mcp.CallToolResult, error) {
	if t.hiddenAtListing(ctx) { // no refusal may tell a hidden tool apart
		return nil, unknownTool(req.Params.Name)
	}
	st, ok := t.openState(req.Params.RequestState)
	if !ok {
		return refusal(middleware.CodeInvalidArgument, "the request state was not issued for this tool by this server"), nil
	}
	if approvalID != "" && approvalID != st.ApprovalID {
		return refusal(middleware.CodeInvalidArgument, fmt.Sprintf("%q names another approval than the one this call answers", approvalArgument)), nil
	}
	mark := adapter.ApprovalMark{}
	if r, ok := req.Params.InputResponses[st.ApprovalID].(*mcp.ElicitResult); ok && r.Action == "accept" {
		mark.Wait = t.b.cfg.approvalWait // the user went to decide, or to have it decided
	}
	res, err, refused := t.invoke(ctx, req, args, st.ApprovalID, key, mark)
	if errors.Is(err, errHidden) {
		return nil, unknownTool(req.Params.Name)
	}
	if refused != nil {
		return refused, nil
	}
	env, _ := connectadapter.ReadEnvelope(res, err)
	if decided(env) && req.Session != nil && req.ProtocolVersion() < multiRoundTrip {
		_ = req.Session.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: st.ApprovalID})
	}
	return t.result(res, err, st.ApprovalID), nil
}

// openState opens the request state of an answering round, sealed for
// this tool's procedure.
func (t *tool) openState(state string) (requestState, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(state)
	if err != nil {
		return requestState{}, false
	}
	plain, err := adapter.Open(t.b.eng, raw, stateContext+t.procedure)
	if err != nil {
		return requestState{}, false
	}
	var st requestState
	if json.Unmarshal(plain, &st) != nil || st.ApprovalID == "" {
		return requestState{}, false
	}
	return st, true
}

// decided reports whether the envelope of an answering round shows the
// approval decided: the call ran, or the approval was rejected, expired or
// used. A refusal that says nothing of the approval (another actor's, a
// changed input, still pending, the caller gone) does not.
func decided(env middleware.Envelope) bool {
	if env.Error == nil {
		return env.Status == middleware.StatusCompleted
	}
	switch env.Error.Code {
	case middleware.CodeApprovalRejected, middleware.CodeApprovalExpired, middleware.CodeApprovalConsumed,
		middleware.CodeApprovalStale: // approved, for a state that has changed since
		return true
	}
	return env.Attempts > 0 // the approval was consumed and the call ran
}

// sealArguments seals a call's arguments (without the bridge's own) to
// keep with an approval it requests, for approvals_resume; nil when the
// engine cannot seal.
func (b *Bridge) sealArguments(procedure string, args json.RawMessage) []byte {
	if !b.resumable {
		return nil
	}
	sealed, err := adapter.Seal(b.eng, args, argumentsContext+procedure)
	if err != nil {
		return nil
	}
	return sealed
}
