// Package conformance turns the rules of the agentsafe specification into
// named subtests that anyone can run against their own adapter or approval
// store, the way testing/slogtest checks a slog.Handler:
//
//	func TestMyStore(t *testing.T) {
//		conformance.RunStore(t, func(t *testing.T) conformance.StoreUnderTest {
//			clock := newFakeClock()
//			return conformance.StoreUnderTest{Store: mystore.New(clock.Now), Advance: clock.Advance}
//		})
//	}
//
// Every subtest is named after the rule it checks, and its failure message
// names the rule, so `go test -v` reads as a checklist.
package conformance
