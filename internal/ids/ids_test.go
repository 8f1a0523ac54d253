package ids_test

import (
	"strings"
	"testing"

	"github.com/agentsafe/agentsafe/internal/ids"
)

func TestNewIsPrefixedUniqueAndValid(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		id := ids.New("idk_")
		if !ids.Valid("idk_", id) {
			t.Fatalf("New gave %q, which Valid refuses", id)
		}
		if seen[id] {
			t.Fatalf("New repeated %q", id)
		}
		seen[id] = true
	}
}

func TestDeriveIsStableAndSplitSensitive(t *testing.T) {
	a := ids.Derive("idk_", "apr_1", "x")
	if a != ids.Derive("idk_", "apr_1", "x") {
		t.Fatal("Derive is not stable for the same parts")
	}
	if a == ids.Derive("idk_", "apr_1x") || a == ids.Derive("idk_", "apr_", "1x") {
		t.Fatal("Derive must not collide when the same bytes split differently")
	}
	if !ids.Valid("idk_", a) {
		t.Fatalf("Derive gave %q, which Valid refuses", a)
	}
}

// TestDeriveIsPinned: derived keys are stored (result keys, budget keys):
// the same parts give the same key in every version.
func TestDeriveIsPinned(t *testing.T) {
	long := make([]byte, 700) // past any buffer on the stack
	for i := range long {
		long[i] = byte('a' + i%26)
	}
	for got, want := range map[string]string{
		ids.Derive("idk_", "key", "", "agent-7", "acme", "agent", "1", "alice", "/orders.v1.Orders/Refund", "refund-42"): "idk_f9928d164acd413c0687ea7f4b29ced2",
		ids.Derive("bgt_", string(long), "x"): "bgt_9f3d2596e9e7533b0f2f778348722eda",
	} {
		if got != want {
			t.Errorf("Derive gave %s, want %s", got, want)
		}
	}
}

func TestDeriveAllocatesOnlyItsResult(t *testing.T) {
	parts := []string{"key", "", "agent-7", "acme", "agent", "1", "alice", "/orders.v1.Orders/Refund", "refund-42"}
	if n := testing.AllocsPerRun(100, func() { _ = ids.Derive("idk_", parts...) }); n > 1 {
		t.Errorf("Derive allocates %.0f times, want once (its result)", n)
	}
}

func TestValidRefusesMalformed(t *testing.T) {
	good := "apr_" + strings.Repeat("a", ids.HexLen)
	for _, bad := range []string{"", "apr_", "exe_" + good[4:], good + "0", good[:len(good)-1], "apr_" + strings.Repeat("A", ids.HexLen), "apr_" + strings.Repeat("g", ids.HexLen)} {
		if ids.Valid("apr_", bad) {
			t.Errorf("Valid(%q) = true, want false", bad)
		}
	}
	if !ids.Valid("apr_", good) {
		t.Errorf("Valid(%q) = false, want true", good)
	}
}

func TestPairMakesTwoDistinctValidIDs(t *testing.T) {
	a, b := ids.Pair("exe_", "idk_")
	if !ids.Valid("exe_", a) || !ids.Valid("idk_", b) || a[4:] == b[4:] {
		t.Fatalf("Pair = %q, %q", a, b)
	}
	c, _ := ids.Pair("exe_", "idk_")
	if c == a {
		t.Fatal("Pair repeated itself")
	}
}
