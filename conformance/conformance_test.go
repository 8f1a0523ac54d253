package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/middleware"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// direct is a minimal adapter with no framework: its "wire" is the
// Agentsafe-* headers plus, on error, the envelope's JSON body. bug plants
// one defect, for showing that the suite catches it.
type direct struct{ bug string }

func (direct) Procedure(f conformance.Fixture) string { return "/conformance.v1.Direct/" + string(f) }

func (d direct) Start(t *testing.T, eng *middleware.Engine, handle conformance.Handler, stream conformance.StreamHandler) conformance.Client {
	return &directClient{d: d, eng: eng, handle: handle, stream: stream}
}

type directClient struct {
	d      direct
	eng    *middleware.Engine
	handle conformance.Handler
	stream conformance.StreamHandler
}

type attemptOut struct {
	resp   conformance.Response
	header http.Header
}

func (c *directClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	body, _ := json.Marshal(req)
	call := middleware.Call{Procedure: c.d.Procedure(f), Input: middleware.JSONInput(body), ApprovalID: approvalID}
	attempt := func(ctx context.Context) (any, error) {
		h := http.Header{} // each attempt's own header sink
		resp, err := c.handle(ctx, f, req, h.Set)
		if err != nil {
			return nil, err
		}
		return &attemptOut{resp, h}, nil
	}
	v, env, err := c.eng.Execute(ctx, call, attempt)
	switch c.d.bug {
	case "retries-writes":
		if e, ok := errors.AsType[*middleware.Error](err); ok && e.Retryable && f == conformance.FixtureWrite {
			v, env, err = c.eng.Execute(ctx, call, attempt)
		}
	case "finalizes-twice":
		c.eng.Execute(ctx, call, func(context.Context) (any, error) { return v, err })
	}
	if ctx.Err() != nil {
		return conformance.Result{Err: ctx.Err()} // the client left: it sees nothing
	}
	wire := http.Header{}
	res := conformance.Result{Header: wire}
	if c.d.bug != "drops-envelope" || err != nil {
		env.SetHeaders(wire)
	}
	if err != nil {
		res.Body, _ = json.Marshal(env)
		res.Err = errors.New(env.Error.Message) // the client sees the envelope, not the cause
	} else {
		out := v.(*attemptOut)
		for k, vs := range out.header {
			wire[k] = vs
		}
		res.Response = &out.resp
	}
	// Decode the envelope from the wire, as a client helper would.
	res.Envelope, _ = middleware.EnvelopeFromHeaders(wire)
	if res.Body != nil {
		json.Unmarshal(res.Body, &res.Envelope)
	}
	return res
}

func (c *directClient) Stream(ctx context.Context, req conformance.Request) ([]conformance.Response, conformance.Result) {
	var msgs []conformance.Response
	wire := http.Header{}
	env, err := c.eng.ExecuteStream(ctx, middleware.Call{Procedure: c.d.Procedure(conformance.FixtureStream)}, func(ctx context.Context) error {
		return c.stream(ctx, req, wire.Set, func(r conformance.Response) error { msgs = append(msgs, r); return nil })
	})
	env.SetHeaders(wire)
	res := conformance.Result{Header: wire, Envelope: env}
	if err != nil {
		res.Err = errors.New(env.Error.Message)
	} else {
		res.Response = &conformance.Response{}
	}
	return msgs, res
}

func TestDirectAdapter(t *testing.T) {
	conformance.RunAdapter(t, direct{})
}

// TestPlanted runs the suite against one planted bug when the parent test
// asks for it, in a child process, so its failures are observed, not ours.
func TestPlanted(t *testing.T) {
	bug := os.Getenv("CONFORMANCE_PLANTED")
	if bug == "" {
		t.Skip("run by TestPlantedBugsFailExactlyTheirRules")
	}
	conformance.RunAdapter(t, direct{bug: bug})
}

// TestPlantedBugsFailExactlyTheirRules shows that the suite catches what it
// claims: each broken adapter fails exactly the subtests of the rules it
// breaks, and nothing else.
func TestPlantedBugsFailExactlyTheirRules(t *testing.T) {
	if os.Getenv("CONFORMANCE_PLANTED") != "" {
		t.Skip("inside a planted run")
	}
	for bug, want := range map[string][]string{
		"retries-writes":  {"Retry/the_adapter_never_retries_a_write_on_its_own"},
		"finalizes-twice": {"Envelope/exactly_one_envelope_and_one_final_event_per_call"},
		"drops-envelope": {
			"Retry/a_read_is_retried_after_a_transient_failure_in_the_same_execution",
			"Retry/an_idempotent_write_with_retry_configured_is_retried",
			"Isolation/only_the_finalized_attempt's_headers_reach_the_wire",
			"Envelope/exactly_one_envelope_and_one_final_event_per_call",
			"Envelope/ids_reach_the_wire_on_success",
			"Idempotency/the_key_is_stable_across_retries_and_unique_across_calls",
			"Approval/request,_approve,_resume_and_consume_once",
		},
	} {
		t.Run(bug, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestPlanted$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "CONFORMANCE_PLANTED="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed an adapter that %s", bug)
			}
			got := failedSubtests(out)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("an adapter that %s failed\n%s\nwant exactly\n%s", bug, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

var failLine = regexp.MustCompile(`--- FAIL: TestPlanted/(\S+/\S+)`)

func failedSubtests(out []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := failLine.FindStringSubmatch(sc.Text()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}
