package mcpadapter

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// unknownTool is the error a hidden tool call ends with: exactly what the
// SDK's server answers for a tool it does not have.
// errHidden is what invoke returns for a call its procedure answered as
// one that does not exist; the tool handler turns it into unknownTool.
var errHidden = errors.New("mcpadapter: hidden")

func unknownTool(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
}

// absent reports whether the procedure answered as one that does not
// exist: Unimplemented without an envelope, as the Connect adapter writes
// a hidden call (and a mux a route it does not have).
func absent(governed bool, err error) bool {
	return err != nil && !governed && connect.CodeOf(err) == connect.CodeUnimplemented
}

// hiddenAtListing reports whether the tool is left out of the listing the
// caller of ctx gets (see adapter.Route.Listed).
func (t *tool) hiddenAtListing(ctx context.Context) bool {
	return !adapter.Resolve(t.b.eng, t.procedure).Listed(ctx, middleware.SurfaceMCP)
}

// filterListing makes s's tools/list leave out, per caller, the bridge's
// tools that a policy hides at listing: every policy is asked with
// Listing set and no input, on the listing request's context (where the
// engine's actor function finds who asks). Installed twice, it filters
// twice, to the same effect.
func (b *Bridge) filterListing(s *mcp.Server) {
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			list, ok := res.(*mcp.ListToolsResult)
			if method != "tools/list" || err != nil || !ok {
				return res, err
			}
			out := *list
			out.Tools = slices.DeleteFunc(slices.Clone(list.Tools), func(def *mcp.Tool) bool {
				t := b.byName(def.Name)
				return t != nil && t.hiddenAtListing(ctx)
			})
			return &out, nil
		}
	})
}

func (b *Bridge) byName(name string) *tool {
	for _, t := range b.tools {
		if t.def.Name == name {
			return t
		}
	}
	return nil
}
