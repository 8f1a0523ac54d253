// Package agentsafetest helps application authors test code governed by
// agentsafe, in the style of net/http/httptest and testing/slogtest:
//
//   - [NewEngine] builds an engine for tests, with a [Recorder] for the
//     audit trail and an in-memory approval store, meant to run inside
//     [Test], a testing/synctest bubble, where timeouts, retries and
//     approval expiry take no real time;
//   - [Engine.PendingApproval] finds the approval a call asked for, and
//     [Approval] approves or rejects it as a chosen approver, with the
//     engine's checks;
//   - [Recorder] captures events and waits for an execution's final event
//     ([Recorder.WaitFinal]) without polling.
package agentsafetest
