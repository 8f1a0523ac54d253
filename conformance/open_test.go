package conformance

import (
	"testing"
	"time"

	"github.com/agentsafe/agentsafe/approvalstore"
	"github.com/agentsafe/agentsafe/resultstore"
)

// A store under test without its store or its clock hook is refused with
// a message saying which, not left to panic inside the first rule that
// moves the clock.
func TestAStoreUnderTestWithoutItsClockHookIsRefusedByName(t *testing.T) {
	advance := func(time.Duration) {}
	for _, c := range []struct {
		got, want string
	}{
		{StoreUnderTest{Store: approvalstore.NewMemory()}.lacks(), "Advance"},
		{StoreUnderTest{Advance: advance}.lacks(), "Store"},
		{StoreUnderTest{Store: approvalstore.NewMemory(), Advance: advance}.lacks(), ""},
		{ResultStoreUnderTest{Store: resultstore.NewMemory()}.lacks(), "Advance"},
		{ResultStoreUnderTest{Advance: advance}.lacks(), "Store"},
		{ResultStoreUnderTest{Store: resultstore.NewMemory(), Advance: advance}.lacks(), ""},
	} {
		if c.got != c.want {
			t.Errorf("lacks() = %q, want %q", c.got, c.want)
		}
	}
}
