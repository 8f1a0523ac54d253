// Package agentsafetest helps application authors test code governed by
// agentsafe, in the style of net/http/httptest and testing/slogtest:
// [Recorder] captures the audit trail and waits for an execution's final
// event without polling.
package agentsafetest
