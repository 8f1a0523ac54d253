package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/middleware"
)

var sink any

func noop(context.Context) (any, error) { return nil, nil }

// BenchmarkGoverned compares one governed no-op call with calling the
// function directly, and an Inline capability's call with the default
// one; report them with -benchmem and compare in one run.
func BenchmarkGoverned(b *testing.B) {
	c := middleware.Capability{SideEffect: middleware.SideEffectRead, Timeout: time.Second, Retry: middleware.Retry{MaxRetries: 1, Backoff: time.Nanosecond}}
	inline := c
	inline.Inline = true
	eng, err := middleware.New(middleware.NewRegistry().Register(procRead, c).Register(procWrite, inline), middleware.WithProtoFiles(nil))
	if err != nil {
		b.Fatal(err)
	}
	call, inlineCall := call{Procedure: procRead}, call{Procedure: procWrite}
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink, _ = noop(ctx)
		}
	})
	b.Run("engine", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink, _, _ = execute(eng, ctx, call, noop)
		}
	})
	b.Run("engine-cancelable-ctx", func(b *testing.B) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		b.ReportAllocs()
		for b.Loop() {
			sink, _, _ = execute(eng, ctx, call, noop)
		}
	})
	b.Run("engine-inline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink, _, _ = execute(eng, ctx, inlineCall, noop)
		}
	})
	b.Run("engine-inline-cancelable-ctx", func(b *testing.B) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		b.ReportAllocs()
		for b.Loop() {
			sink, _, _ = execute(eng, ctx, inlineCall, noop)
		}
	})
	transient := middleware.Retryable(errors.New("transient"))
	b.Run("engine-one-retry", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			first := true
			sink, _, _ = execute(eng, ctx, call, func(context.Context) (any, error) {
				if first {
					first = false
					return nil, transient
				}
				return nil, nil
			})
		}
	})
}
