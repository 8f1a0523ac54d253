package mcpadapter

import (
	"encoding/json"
	"net/http"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ReadEnvelope reads the envelope of a governed call back from a tool
// result, as an MCP client received it: from its _meta under
// "agentsafe/envelope". It reports false when the result carries none:
// the engine never ran (the bridge refused the arguments, the service's
// authentication refused the caller) or the result is not from a bridge.
func ReadEnvelope(r *mcp.CallToolResult) (middleware.Envelope, bool) {
	if r == nil {
		return middleware.Envelope{}, false
	}
	raw, ok := metaJSON(r.Meta, metaEnvelope)
	if !ok {
		return middleware.Envelope{}, false
	}
	var env middleware.Envelope
	if err := env.UnmarshalJSON(raw); err != nil || env.ExecutionID == "" {
		return middleware.Envelope{}, false
	}
	return env, true
}

// ReadHeader returns the procedure's response headers a tool result
// exposes in its _meta under "agentsafe/headers": the agentsafe headers,
// and those the bridge was told to expose with [WithResponseHeaders]. It
// returns an empty header when there are none.
func ReadHeader(r *mcp.CallToolResult) http.Header {
	h := http.Header{}
	if r != nil {
		if raw, ok := metaJSON(r.Meta, metaHeaders); ok && json.Unmarshal(raw, &h) != nil {
			clear(h) // not headers as the bridge writes them
		}
	}
	return h
}

// metaJSON returns one _meta value as JSON, whichever Go form it has: a
// json.RawMessage on the server, decoded JSON on a client.
func metaJSON(meta mcp.Meta, key string) (json.RawMessage, bool) {
	v, ok := meta[key]
	if !ok || v == nil {
		return nil, false
	}
	if raw, ok := v.(json.RawMessage); ok {
		return raw, true
	}
	b, err := json.Marshal(v)
	return b, err == nil
}
