package adapter_test

import (
	"bytes"
	"testing"

	"github.com/agentsafe/agentsafe/middleware"
	"github.com/agentsafe/agentsafe/middleware/adapter"
)

func sealingEngine(t *testing.T, current middleware.ResultKey, previous ...middleware.ResultKey) *middleware.Engine {
	t.Helper()
	eng, err := middleware.New(middleware.NewRegistry().Register("read", middleware.Capability{SideEffect: middleware.SideEffectRead}),
		middleware.WithResultKey(current, previous...))
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

var (
	key1 = middleware.ResultKey{ID: "k1", Key: bytes.Repeat([]byte{1}, 32)}
	key2 = middleware.ResultKey{ID: "k2", Key: bytes.Repeat([]byte{2}, 32)}
)

// TestSealOpensOnlyForItsContextAndKeys: sealed bytes hide the plain
// text, open for the same context under the current or a previous key,
// and fail for another context, when tampered with, under a key the
// engine does not have, or on an engine without a result key.
func TestSealOpensOnlyForItsContextAndKeys(t *testing.T) {
	plain := []byte(`{"order":"42","amount":120}`)
	old := sealingEngine(t, key1)
	sealed, err := adapter.Seal(old, plain, "arguments /orders.v1.Orders/Refund")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("order")) {
		t.Fatalf("the sealed bytes show the plain text: %q", sealed)
	}
	rotated := sealingEngine(t, key2, key1)
	if got, err := adapter.Open(rotated, sealed, "arguments /orders.v1.Orders/Refund"); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("a rotated engine must open what its previous key sealed: %q, %v", got, err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	noKey, err := middleware.New(middleware.NewRegistry().Register("read", middleware.Capability{SideEffect: middleware.SideEffectRead}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		eng     *middleware.Engine
		sealed  []byte
		context string
	}{
		{"another context", old, sealed, "arguments /orders.v1.Orders/Cancel"},
		{"tampered bytes", old, tampered, "arguments /orders.v1.Orders/Refund"},
		{"truncated bytes", old, sealed[:1], "arguments /orders.v1.Orders/Refund"},
		{"a key the engine does not have", sealingEngine(t, key2), sealed, "arguments /orders.v1.Orders/Refund"},
		{"an engine without a result key", noKey, sealed, "arguments /orders.v1.Orders/Refund"},
	} {
		if got, err := adapter.Open(c.eng, c.sealed, c.context); err == nil {
			t.Errorf("%s: opened %q", c.name, got)
		}
	}
	if _, err := adapter.Seal(noKey, plain, "x"); err == nil {
		t.Error("an engine without a result key must not seal")
	}
}
