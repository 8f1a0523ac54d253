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
	"time"

	"github.com/agentsafe/agentsafe/conformance"
	"github.com/agentsafe/agentsafe/internal/testenv"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoreIdleSinkWorkers()) }

// direct is a minimal adapter with no framework, called in process: its
// "wire" is the Agentsafe-* headers plus, on an error the engine decided,
// the envelope's JSON body; a handler's *conformance.Status is its
// framework's own error and passes as it is. bug plants one defect, for
// showing that the suite catches it.
type direct struct{ bug string }

func (direct) Procedure(f conformance.Fixture) string { return "/conformance.v1.Direct/" + string(f) }

// InProcess: the suite runs every rule in a synctest bubble.
func (direct) InProcess() bool { return true }

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

// directStatus is the adapter's one function from its framework's errors
// (here *conformance.Status) to codes.
func directStatus(err error) (uint32, string, bool) {
	if st, ok := errors.AsType[*conformance.Status](err); ok {
		return st.Code, st.Message, true
	}
	return 0, "", false
}

func (c *directClient) Call(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID string) conformance.Result {
	return c.CallKeyed(ctx, f, req, approvalID, "")
}

// directCodec stores a response as JSON, and the framework's own error
// (*conformance.Status) as JSON.
type directCodec struct{}

func (directCodec) Marshal(out *attemptOut) ([]byte, error) {
	if out == nil {
		return nil, nil
	}
	return json.Marshal(out.resp)
}

func (directCodec) Unmarshal(b []byte) (*attemptOut, error) {
	out := &attemptOut{header: http.Header{}}
	if b == nil {
		return out, nil // no body: the empty response
	}
	return out, json.Unmarshal(b, &out.resp)
}

func (directCodec) MarshalError(err error) ([]byte, error) {
	st, ok := errors.AsType[*conformance.Status](err)
	if !ok {
		return nil, errors.New("not the framework's error")
	}
	return json.Marshal(st)
}

func (directCodec) UnmarshalError(b []byte) (error, error) {
	st := new(conformance.Status)
	return st, json.Unmarshal(b, st)
}

func (c *directClient) CallKeyed(ctx context.Context, f conformance.Fixture, req conformance.Request, approvalID, key string) conformance.Result {
	body, _ := json.Marshal(req)
	return c.callBody(ctx, f, req, body, approvalID, key)
}

// CallRaw makes the call as shape says. The direct adapter's wire is what
// its client sees: the status code, the headers, and the body (the
// envelope, or the framework's message). Like the framework adapters'
// guards, it asks whether the call is absent before it decodes anything.
func (c *directClient) CallRaw(ctx context.Context, f conformance.Fixture, req conformance.Request, shape conformance.Shape, absent bool) (conformance.RawResponse, bool) {
	if absent {
		return raw(c.CallUnhandled(ctx, f, req)), true
	}
	body, _ := json.Marshal(req)
	approvalID, key := "", ""
	switch shape {
	case conformance.ShapeMalformedApprovalID:
		approvalID = "x"
	case conformance.ShapeMalformedKey:
		key = `"unterminated`
	case conformance.ShapeUndecodable:
		body = []byte(`{"ID":`)
	case conformance.ShapeUnbindable:
		key, body = "k1", []byte(`{"ID":"`+req.ID+`","ID":"`+req.ID+`"}`)
	case conformance.ShapeExpired:
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
	}
	if c.d.bug != "decodes-first" && adapter.Resolve(c.eng, c.d.Procedure(f)).Absent(ctx, adapter.SurfaceRPC) {
		return raw(c.CallUnhandled(ctx, f, req)), true
	}
	var in conformance.Request
	if err := json.Unmarshal(body, &in); err != nil {
		return conformance.RawResponse{Status: 3, Header: http.Header{}, Body: []byte("direct: the request cannot be decoded")}, true
	}
	return raw(c.callBody(ctx, f, in, body, approvalID, key)), true
}

// raw is a direct call's result as its wire carries it.
func raw(r conformance.Result) conformance.RawResponse {
	out := conformance.RawResponse{Header: r.Header, Body: r.Body}
	if r.Status != nil {
		out.Status = int(r.Status.Code)
		if out.Body == nil {
			out.Body = []byte(r.Status.Message)
		}
	}
	if r.Response != nil {
		out.Body, _ = json.Marshal(r.Response)
	}
	return out
}

// callBody calls f with req, whose input as the engine binds it is body.
func (c *directClient) callBody(ctx context.Context, f conformance.Fixture, req conformance.Request, body []byte, approvalID, key string) conformance.Result {
	route := adapter.Resolve(c.eng, c.d.Procedure(f))
	call := adapter.Call[*attemptOut]{Input: adapter.JSONInput(body), ApprovalID: approvalID, Surface: adapter.SurfaceRPC, Status: directStatus,
		IdempotencyKey: key, Codec: directCodec{}}
	if c.d.bug == "drops-key" {
		call.IdempotencyKey = ""
	}
	attempt := func(ctx context.Context) (*attemptOut, error) {
		out := &attemptOut{header: http.Header{}} // each attempt's own header sink
		in := req                                 // and its own copy of the input
		var err error
		out.resp, err = c.handle(ctx, f, in, out.header.Set)
		if in.Mode == conformance.ModeMutate {
			in.ID = conformance.MutatedID // a careless handler changes its input
		}
		return out, err
	}
	if c.d.bug == "shares-input" {
		attempt = func(ctx context.Context) (*attemptOut, error) {
			out := &attemptOut{header: http.Header{}}
			var err error
			out.resp, err = c.handle(ctx, f, req, out.header.Set)
			if req.Mode == conformance.ModeMutate {
				req.ID = conformance.MutatedID // the input every attempt shares
			}
			return out, err
		}
	}
	out, env, err := adapter.Execute(ctx, route, call, attempt)
	switch c.d.bug {
	case "retries-writes":
		if e, ok := errors.AsType[*middleware.Error](err); ok && e.Retryable && f == conformance.FixtureWrite {
			out, env, err = adapter.Execute(ctx, route, call, attempt)
		}
	case "finalizes-twice":
		adapter.Execute(ctx, route, call, func(context.Context) (*attemptOut, error) { return out, err })
	}
	if ctx.Err() != nil {
		return conformance.Result{Err: ctx.Err()} // the client left: it sees nothing
	}
	if adapter.Hidden(err) && c.d.bug != "shows-hidden" {
		return c.CallUnhandled(ctx, f, req)
	}
	wire := http.Header{}
	res := conformance.Result{Header: wire}
	if out != nil {
		adapter.DelHeaders(out.header) // a handler's copies belong to another execution
	}
	if out != nil && err == nil {
		for k, vs := range out.header {
			wire[k] = vs
		}
	}
	if c.d.bug == "drops-approval-hints" {
		env.ApprovalURL, env.ExpiresAt = "", time.Time{}
	}
	if c.d.bug != "drops-envelope" || err != nil {
		adapter.SetHeaders(wire, env)
	}
	if c.d.bug == "drops-code-headers" {
		wire.Del(adapter.HeaderCode)
		wire.Del(adapter.HeaderRetryable)
	}
	if c.d.bug == "drops-retry-after" {
		wire.Del(adapter.HeaderRetryAfter)
	}
	if c.d.bug == "keeps-relayed-headers" && out != nil && err == nil {
		wire.Add(adapter.HeaderExecutionID, "exe_00000000000000000000000000000001")
	}
	if own, ok := adapter.HandlerError(err); ok {
		res.Err = own // the framework's own error, as it is
		res.Status, _ = errors.AsType[*conformance.Status](own)
	} else if err != nil {
		res.Body, _ = json.Marshal(env)
		res.Err = errors.New(env.Error.Message) // the client sees the envelope, not the cause
		res.EngineDetail = true
		res.Status = &conformance.Status{Code: adapter.RPCCode(err), Message: env.Error.Message}
	} else {
		res.Response = &out.resp
	}
	// Decode the envelope from the wire, as a client helper would.
	res.Envelope, _ = adapter.ReadHeaders(wire)
	if res.Body != nil {
		json.Unmarshal(res.Body, &res.Envelope)
	} else if res.Envelope.Error != nil && res.Status != nil {
		res.Envelope.Error.Message = res.Status.Message
	}
	return res
}

// CallUnhandled is what the direct adapter's "framework" answers for a
// procedure it has no handler for: Unimplemented, naming it, nothing else.
func (c *directClient) CallUnhandled(_ context.Context, f conformance.Fixture, _ conformance.Request) conformance.Result {
	st := &conformance.Status{Code: conformance.StatusUnimplemented, Message: "direct: no handler for " + c.d.Procedure(f)}
	return conformance.Result{Header: http.Header{}, Err: st, Status: st}
}

func (c *directClient) Stream(ctx context.Context, req conformance.Request) ([]conformance.Response, conformance.Result) {
	var msgs []conformance.Response
	wire := http.Header{}
	route := adapter.Resolve(c.eng, c.d.Procedure(conformance.FixtureStream))
	env, err := adapter.ExecuteStream(ctx, route, adapter.Call[struct{}]{Surface: adapter.SurfaceRPC, Status: directStatus}, func(ctx context.Context) error {
		return c.stream(ctx, req, wire.Set, func(r conformance.Response) error { msgs = append(msgs, r); return nil })
	})
	adapter.SetHeaders(wire, env)
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
	const lateKey = "Inline/Keys/an_Inline_write's_late_result_is_stored_for_its_key_at_once"
	if os.Getenv("CONFORMANCE_PLANTED") != "" {
		t.Skip("inside a planted run")
	}
	for bug, want := range map[string][]string{
		"retries-writes": append(inBoth(
			"Retry/the_adapter_never_retries_a_write_on_its_own",
			// A write retried behind the engine's back runs where the engine left it in doubt.
			"Keys/Reconcile:_a_done_execution_in_doubt_replays_its_envelope_without_a_body",
			"Keys/Reconcile:_not_found_runs_again_under_the_same_key",
		), lateKey), // and again after a timeout whose late result was stored
		"finalizes-twice":       inBoth("Envelope/exactly_one_envelope_and_one_final_event_per_call"),
		"shares-input":          inBoth("Isolation/a_handler_that_mutates_its_input_cannot_change_the_next_attempt's"),
		"keeps-relayed-headers": inBoth("Envelope/a_relayed_downstream_envelope_never_shadows_this_one"),
		"shows-hidden": inBoth(
			"Policy/hide_wins_over_deny,_deny_over_require_approval,_require_approval_over_allow",
			"Hidden/a_hidden_call_gets_exactly_what_a_procedure_with_no_handler_gets",
			"Exposure/a_call_on_a_surface_the_capability_is_not_exposed_on_is_hidden",
		),
		"drops-code-headers": inBoth(
			"Wire/an_engine's_failure_carries_Agentsafe-Code,_Agentsafe-Retryable_and_its_status",
			"Status/a_handler's_framework_error_reaches_the_client_unchanged",
			"Keys/a_handler's_framework_error_is_replayed_unchanged",
			"Budget/over_a_deny_budget_is_BUDGET_EXCEEDED_with_Retry-After,_over_a_require_approval_one_APPROVAL_REQUIRED",
			"Keys/a_caller_at_its_result_quota_is_IDEMPOTENCY_QUOTA_EXCEEDED",
			"Approval/a_resume_after_the_previewed_state_changed_is_APPROVAL_STALE_and_runs_nothing",
		),
		"drops-retry-after":    inBoth("Budget/over_a_deny_budget_is_BUDGET_EXCEEDED_with_Retry-After,_over_a_require_approval_one_APPROVAL_REQUIRED"),
		"drops-approval-hints": inBoth("Approval/APPROVAL_REQUIRED_and_APPROVAL_PENDING_carry_the_approval_URL_and_expiry"),
		// It decodes the request before it asks whether the call is hidden.
		"decodes-first": inBoth("Hidden/a_hidden_call_is_answered_byte_for_byte_as_a_procedure_the_server_does_not_have"),
		"drops-envelope": append(inBoth(
			"Retry/a_read_is_retried_after_a_transient_failure_in_the_same_execution",
			"Retry/an_idempotent_write_with_retry_configured_is_retried",
			"Isolation/only_the_finalized_attempt's_headers_reach_the_wire",
			"Envelope/exactly_one_envelope_and_one_final_event_per_call",
			"Envelope/ids_reach_the_wire_on_success",
			"Idempotency/the_key_is_stable_across_retries_and_unique_across_calls",
			"Approval/request,_approve,_resume_and_consume_once",
			"Approval/APPROVAL_REQUIRED_and_APPROVAL_PENDING_carry_the_approval_URL_and_expiry",
			"Approval/a_resume_after_the_previewed_state_changed_is_APPROVAL_STALE_and_runs_nothing",
			"Status/a_framework_Unavailable_status_is_transient",
			"Isolation/a_handler_that_mutates_its_input_cannot_change_the_next_attempt's",
			"Envelope/a_relayed_downstream_envelope_never_shadows_this_one",
			"Policy/hide_wins_over_deny,_deny_over_require_approval,_require_approval_over_allow",
			"Exposure/a_call_on_a_surface_the_capability_is_not_exposed_on_is_hidden",
			"Keys/a_repeat_with_the_same_key_replays_the_stored_result",
			"Keys/both_spellings_of_a_key_are_one_key",
			"Keys/the_same_key_with_another_input_is_IDEMPOTENCY_KEY_REUSED",
			"Keys/a_gated_call_runs_once,_and_a_repeat_never_consumes_again",
			"Keys/Reconcile:_a_done_execution_in_doubt_replays_its_envelope_without_a_body",
			"Keys/Reconcile:_not_found_runs_again_under_the_same_key",
			"Keys/a_dedup_window_replays_a_repeat_without_a_key",
			"Keys/a_key_on_a_read_has_no_effect",
			"Keys/a_caller_at_its_result_quota_is_IDEMPOTENCY_QUOTA_EXCEEDED",
			"Concurrency/concurrent_calls_each_get_their_own_execution's_envelope,_headers_and_response",
			"Budget/over_a_deny_budget_is_BUDGET_EXCEEDED_with_Retry-After,_over_a_require_approval_one_APPROVAL_REQUIRED",
		), lateKey),
		"drops-key": append(inBoth(
			"Keys/a_repeat_with_the_same_key_replays_the_stored_result",
			"Keys/both_spellings_of_a_key_are_one_key",
			"Keys/a_malformed_key_is_INVALID_ARGUMENT_naming_the_header",
			"Keys/a_repeat_while_the_first_runs_is_IDEMPOTENCY_IN_FLIGHT",
			"Keys/the_same_key_with_another_input_is_IDEMPOTENCY_KEY_REUSED",
			"Keys/a_write_that_failed_leaves_its_key_in_doubt",
			"Keys/a_handler's_framework_error_is_replayed_unchanged",
			"Keys/a_gated_call_runs_once,_and_a_repeat_never_consumes_again",
			"Keys/Reconcile:_a_done_execution_in_doubt_replays_its_envelope_without_a_body",
			"Keys/Reconcile:_not_found_runs_again_under_the_same_key",
			"Keys/a_key_on_a_read_has_no_effect",
			"Keys/a_caller_at_its_result_quota_is_IDEMPOTENCY_QUOTA_EXCEEDED",
		), lateKey),
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

// inBoth names rules as RunAdapter runs them: with the fixtures'
// capabilities as listed, and again Inline.
func inBoth(names ...string) []string {
	out := slices.Clone(names)
	for _, n := range names {
		out = append(out, "Inline/"+n)
	}
	return out
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
