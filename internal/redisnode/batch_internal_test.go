package redisnode

import (
	"context"
	"testing"
	"time"
)

// A pipeline of several callers carries the latest of their deadlines, so
// that no caller is cut short by another's, or none when one has none.
func TestBatchContextIsTheLatestDeadline(t *testing.T) {
	base := time.Now().Add(time.Hour)
	var batch []*pending
	for _, d := range []time.Duration{2, 3, 1} {
		ctx, cancel := context.WithDeadline(context.Background(), base.Add(d*time.Second))
		defer cancel()
		batch = append(batch, &pending{ctx: ctx})
	}
	ctx, cancel := batchContext(batch)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(base.Add(3*time.Second)) {
		t.Errorf("deadline %v, %v; want the latest, %v", d, ok, base.Add(3*time.Second))
	}
	cancel()
	batch = append(batch, &pending{ctx: context.Background()})
	ctx, cancel = batchContext(batch)
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		t.Errorf("deadline %v with a caller that has none, want none", d)
	}
}
