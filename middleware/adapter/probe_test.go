package adapter_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentsafe/agentsafe/agentsafetest"
	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
	"github.com/agentsafe/agentsafe/middleware/store"
)

type probeUser struct{}

// TestCallerProbeRunsNothing: a call marked as a caller probe tells who
// its caller is, as the engine's actor function finds it in the call's
// context, and runs nothing: no attempt, no execution, no event, through
// Execute, ExecuteStream and Refuse alike. A call of another procedure
// made with the same context ignores the mark.
func TestCallerProbeRunsNothing(t *testing.T) {
	rec := &agentsafetest.Recorder{}
	eng, err := middleware.New(middleware.NewRegistry().
		Register("write", middleware.Capability{SideEffect: middleware.SideEffectWrite}).
		Register("read", middleware.Capability{SideEffect: middleware.SideEffectRead}),
		middleware.WithEventSink(rec),
		middleware.WithActor(func(ctx context.Context) (middleware.Actor, error) {
			id, ok := ctx.Value(probeUser{}).(string)
			if !ok {
				return middleware.Actor{}, errors.New("no user")
			}
			return middleware.Actor{ID: id, Tenant: "acme", Kind: "user", OnBehalfOf: []string{"carol"}}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	want := middleware.Actor{ID: "alice", Tenant: "acme", Kind: "user", OnBehalfOf: []string{"carol"}}
	ran := 0
	for name, call := range map[string]func(ctx context.Context) error{
		"Execute": func(ctx context.Context) error {
			_, _, err := adapter.Execute(ctx, adapter.Resolve(eng, "write"), adapter.Call[int]{}, func(context.Context) (int, error) { ran++; return 1, nil })
			return err
		},
		"ExecuteStream": func(ctx context.Context) error {
			_, err := adapter.ExecuteStream(ctx, adapter.Resolve(eng, "write"), adapter.Call[struct{}]{}, func(context.Context) error { ran++; return nil })
			return err
		},
		"Refuse": func(ctx context.Context) error {
			_, err := adapter.Refuse(ctx, adapter.Resolve(eng, "write"), adapter.Call[struct{}]{}, nil)
			return err
		},
	} {
		var got middleware.Actor
		var gotErr error
		calls := 0
		ctx := adapter.WithCallerProbe(context.WithValue(t.Context(), probeUser{}, "alice"), "write", func(a middleware.Actor, err error) {
			calls++
			got, gotErr = a, err
		})
		if err := call(ctx); err == nil {
			t.Errorf("%s: a probe returned no error; the adapter must not write it as a success", name)
		}
		if calls != 1 || gotErr != nil || !store.SameActor(got, want) {
			t.Errorf("%s: the probe found %+v (%v) in %d calls, want %+v once", name, got, gotErr, calls, want)
		}
		// Without a user the probe carries the actor function's error.
		ctx = adapter.WithCallerProbe(t.Context(), "write", func(a middleware.Actor, err error) { gotErr = err })
		_ = call(ctx)
		if gotErr == nil {
			t.Errorf("%s: the actor function's error did not reach the probe", name)
		}
	}
	if ran != 0 || len(rec.Events()) != 0 {
		t.Fatalf("probes ran %d attempts and emitted %d events, want none", ran, len(rec.Events()))
	}
	// Another procedure's call with the same context runs as usual.
	ctx := adapter.WithCallerProbe(context.WithValue(t.Context(), probeUser{}, "alice"), "write", func(middleware.Actor, error) {
		t.Error("a call of another procedure answered the probe")
	})
	if _, env, err := adapter.Execute(ctx, adapter.Resolve(eng, "read"), adapter.Call[int]{}, func(context.Context) (int, error) { ran++; return 1, nil }); err != nil || ran != 1 || env.ExecutionID == "" {
		t.Fatalf("a call of another procedure: ran %d, %+v, %v", ran, env, err)
	}
}
