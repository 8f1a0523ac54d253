package main

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestDelayWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		honour   bool
		deadline time.Duration // the context's
		delayMs  uint32
		waited   time.Duration
		wantErr  error
	}{
		{"by default, the whole delay past the deadline", false, 200 * time.Millisecond, 1500, 1500 * time.Millisecond, nil},
		{"honouring the context, until the deadline", true, 200 * time.Millisecond, 1500, 200 * time.Millisecond, context.DeadlineExceeded},
		{"honouring the context, a delay within the deadline", true, time.Second, 200, 200 * time.Millisecond, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
				defer cancel()
				start := time.Now()
				err := delay{honourContext: tc.honour}.wait(ctx, tc.delayMs)
				if waited := time.Since(start); waited != tc.waited {
					t.Errorf("waited %v, want %v", waited, tc.waited)
				}
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("wait = %v, want %v", err, tc.wantErr)
				}
			})
		})
	}
}
