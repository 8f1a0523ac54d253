package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"
)

var errFloorTimeout = errors.New("attempt timed out")

// floorCall is the least bounded reporting needs, written naively: two
// random ids, a timeout context with a cause (context.Cause tells the
// attempt's own timer from the caller leaving), one goroutine and a
// channel. It is the floor the engine is measured against.
func floorCall(ctx context.Context) {
	var raw [32]byte
	rand.Read(raw[:])
	id, key := "exe_"+hex.EncodeToString(raw[:16]), "idk_"+hex.EncodeToString(raw[16:])
	actx, cancel := context.WithTimeoutCause(ctx, time.Second, errFloorTimeout)
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
