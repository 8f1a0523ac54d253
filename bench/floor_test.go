package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"
)

// BenchmarkFloor is the naive sketch of the minimum pieces bounded
// reporting needs: two random ids, a timeout context, one goroutine and a
// channel. It is the floor the engine is measured against.
func BenchmarkFloor(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		var raw [32]byte
		rand.Read(raw[:])
		id, key := "exe_"+hex.EncodeToString(raw[:16]), "idk_"+hex.EncodeToString(raw[16:])
		actx, cancel := context.WithTimeout(ctx, time.Second)
		res := make(chan error, 1)
		go func() { res <- func(context.Context) error { return nil }(actx) }()
		select {
		case err := <-res:
			sink = err
		case <-actx.Done():
		}
		cancel()
		sink = id + key
	}
}
