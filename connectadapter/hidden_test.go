package connectadapter_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1"
	"github.com/agentsafe/agentsafe/internal/testproto/testv1/testv1connect"
	"github.com/agentsafe/agentsafe/middleware"
)

type hideAll struct{}

func (hideAll) Name() string { return "hide-all" }
func (hideAll) Decide(context.Context, middleware.PolicyInput) (middleware.PolicyDecision, error) {
	return middleware.Hide(), nil
}

// TestAHiddenStreamLooksAbsent: a hidden stream gets, in every protocol,
// what the Connect client reports for a server without the procedure, and
// its handler never runs.
func TestAHiddenStreamLooksAbsent(t *testing.T) {
	eachProtocol(t, func(t *testing.T, p protocol) {
		s := newServer(t, serverConfig{opts: []middleware.Option{middleware.WithPolicy(hideAll{})}})
		absent := testv1connect.NewTestServiceClient(httpClient(t, p.h2c), serve(t, http404()), p.opts...)
		receive := func(c testv1connect.TestServiceClient) (*connect.Error, map[string][]string) {
			st, err := c.Stream(t.Context(), connect.NewRequest(&testv1.Request{Id: "s1", Count: 2}))
			if err == nil {
				for st.Receive() {
				}
				err = st.Err()
			}
			ce, _ := errors.AsType[*connect.Error](err)
			if ce == nil {
				t.Fatalf("the stream ended with %v", err)
			}
			return ce, st.ResponseTrailer()
		}
		hidden, trailer := receive(s.client(t, p))
		want, _ := receive(absent)
		if hidden.Code() != want.Code() || hidden.Message() != want.Message() {
			t.Errorf("hidden stream: %v; a server without it: %v", hidden, want)
		}
		for k := range trailer {
			if strings.HasPrefix(k, "Agentsafe-") {
				t.Errorf("trailer %s reached the client", k)
			}
		}
		if n := len(s.svc.executions()); n != 0 {
			t.Errorf("the hidden stream's handler ran %d times", n)
		}
	})
}

// http404 is a server with no procedure at all: the mux's 404.
func http404() *http.ServeMux { return http.NewServeMux() }
