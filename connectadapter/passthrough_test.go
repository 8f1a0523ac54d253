package connectadapter_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/connectadapter"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

// wireOf is what a client can see of a Connect error, but for the
// envelope: code, message, every detail (type and bytes) and the
// handler's own metadata. Numbers in the message are masked: a governed
// response carries the execution's ids, so its size differs.
var digits = regexp.MustCompile(`[0-9]+`)

func wireOf(t *testing.T, err error) string {
	t.Helper()
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		t.Fatalf("error %v (%T) is not a *connect.Error", err, err)
	}
	parts := []string{ce.Code().String(), digits.ReplaceAllString(ce.Message(), "N"), "X-Order=" + strings.Join(ce.Meta().Values("X-Order"), ",")}
	for _, d := range ce.Details() {
		parts = append(parts, d.Type()+":"+hex.EncodeToString(d.Bytes()))
	}
	return strings.Join(parts, " | ")
}

// A handler's own *connect.Error, and an error Connect raises inside a
// handler (here a message over the send limit, which an incompressible id
// makes), reach Connect, gRPC and
// gRPC-Web clients exactly as they would without agentsafe: code,
// message, details and metadata, and no agentsafe detail. The envelope
// travels beside it: in the response headers of a unary call, in the
// trailers of a stream.
func TestOwnErrorsPassThroughUnchanged(t *testing.T) {
	limit := []connect.HandlerOption{connect.WithSendMaxBytes(4096)}
	big := hex.EncodeToString(random(4096))
	cases := []struct {
		name string
		call func(context.Context, testv1connect.TestServiceClient) (envelope http.Header, err error)
	}{
		{"unary handler error", func(ctx context.Context, c testv1connect.TestServiceClient) (http.Header, error) {
			_, err := c.Write(ctx, request(&testv1.Request{FailTimes: 1, FailCode: "declared"}))
			return nil, err
		}},
		{"stream handler error after a message", func(ctx context.Context, c testv1connect.TestServiceClient) (http.Header, error) {
			return drain(c.Stream(ctx, request(&testv1.Request{Count: 1, FailCode: "declared"})))
		}},
		{"stream error Connect raised", func(ctx context.Context, c testv1connect.TestServiceClient) (http.Header, error) {
			return drain(c.Stream(ctx, request(&testv1.Request{Id: big, Count: 1})))
		}},
	}
	eachProtocol(t, func(t *testing.T, p protocol) {
		governed := newServer(t, serverConfig{handlerOpts: limit})
		bare := newServer(t, serverConfig{handlerOpts: limit, bare: true})
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, without := tc.call(t.Context(), bare.client(t, p))
				header, err := tc.call(t.Context(), governed.client(t, p))
				if got, want := wireOf(t, err), wireOf(t, without); got != want {
					t.Errorf("the client got\n %s\nwithout agentsafe it gets\n %s", got, want)
				}
				ce := wantConnectCode(t, err, connect.CodeOf(without))
				if d := detailTypes(ce); slices.Contains(d, "agentsafe.v1.ErrorDetail") {
					t.Errorf("details %v: a handler's own error gained agentsafe's", d)
				}
				env, ok := connectadapter.ReadEnvelopeHeader(header, err)
				fin := governed.sink.final(t)
				if !ok || env.ExecutionID != fin.ExecutionID || env.Error.Code != middleware.CodeExecutionFailed || env.Error.Retryable || env.Error.Message != ce.Message() {
					t.Errorf("envelope %+v (ok=%t), want EXECUTION_FAILED of %s", env, ok, fin.ExecutionID)
				}
				if header != nil && (header.Get(adapter.HeaderCode) != "EXECUTION_FAILED" || header.Get(adapter.HeaderRetryable) != "false") {
					t.Errorf("stream trailers %v, want the envelope's code and retryable flag", header)
				}
			})
		}
	})
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// drain reads a stream to its end and returns its trailers and error.
func drain(st *connect.ServerStreamForClient[testv1.Response], err error) (http.Header, error) {
	if err != nil {
		return nil, err
	}
	defer st.Close()
	for st.Receive() {
	}
	return st.ResponseTrailer(), st.Err()
}

// An error relayed from a downstream governed call, as it came off the
// wire or re-created with its metadata, describes the downstream
// execution: it reaches the client with the handler's code, message and
// other details, but without the downstream's agentsafe detail and
// envelope headers, and ReadEnvelope reads this call's envelope. Relayed
// by an ungoverned procedure, it is read as no envelope at all.
func TestRelayedDownstreamErrorIsNotThisCallsEnvelope(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		down := newServer(t, serverConfig{})
		downstream := testv1connect.NewTestServiceClient(httpClient(t, p.h2c), down.url, p.opts...)
		up := newServer(t, serverConfig{handle: func(ctx context.Context, req *connect.Request[testv1.Request]) (*connect.Response[testv1.Response], error) {
			_, err := downstream.Write(ctx, request(&testv1.Request{FailTimes: 1, FailCode: "plain"}))
			ce, ok := errors.AsType[*connect.Error](err)
			if !ok || req.Msg.GetMode() != "recreated" {
				return nil, err // a wire error: Connect drops its metadata itself
			}
			out := connect.NewError(ce.Code(), errors.New(ce.Message()))
			for _, d := range ce.Details() {
				out.AddDetail(d)
			}
			maps.Copy(out.Meta(), ce.Meta())
			return nil, out
		}})
		c := up.client(t, p)
		for _, tc := range []struct {
			name string
			call func() error
			ours bool
		}{
			{"as received", func() error { _, err := c.Write(t.Context(), request(&testv1.Request{})); return err }, true},
			{"re-created with its metadata", func() error {
				_, err := c.Write(t.Context(), request(&testv1.Request{Mode: "recreated"}))
				return err
			}, true},
			{"by an ungoverned procedure", func() error { _, err := c.Ungoverned(t.Context(), request(&testv1.Request{})); return err }, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.call()
				ce := wantConnectCode(t, err, connect.CodeInternal)
				relayed := down.sink.final(t).ExecutionID
				env, ok := connectadapter.ReadEnvelope(nil, err)
				if !tc.ours {
					if ok {
						t.Errorf("the downstream's detail read as this call's envelope %+v", env)
					}
					return
				}
				fin := up.sink.final(t)
				if !ok || env.ExecutionID != fin.ExecutionID || env.Procedure != "" || env.Error.Code != middleware.CodeExecutionFailed {
					t.Errorf("envelope %+v (ok=%t), want this call's %s, not the downstream's %s", env, ok, fin.ExecutionID, relayed)
				}
				if d := detailTypes(ce); len(d) != 0 {
					t.Errorf("details %v: the downstream's agentsafe detail reached the client", d)
				}
				if v := ce.Meta().Values(adapter.HeaderExecutionID); !slices.Equal(v, []string{fin.ExecutionID}) {
					t.Errorf("%s %q, want only this call's %s", adapter.HeaderExecutionID, v, fin.ExecutionID)
				}
			})
		}
	})
}
