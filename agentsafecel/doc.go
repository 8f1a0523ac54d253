// Package agentsafecel writes agentsafe policies as CEL expressions
// (github.com/google/cel-go), for rules that operators review and change
// without a build. It is a package of its own so that applications that do
// not use it never link CEL.
//
//	p, err := agentsafecel.New("support-rules",
//		agentsafecel.Rule{When: `actor.kind == "agent" && procedure.endsWith("/CancelOrder")`, Then: middleware.Hide()},
//		agentsafecel.Rule{When: `has(input.amountCents) && int(input.amountCents) > 500000`,
//			Then: middleware.Deny("refunds over 5000 EUR are made by the finance team")},
//		agentsafecel.Rule{When: `capability.sideEffect == "destructive" && surface == "mcp"`,
//			Then: middleware.RequireApproval("a destructive call from an agent")},
//	)
//	eng, err := middleware.New(reg, middleware.WithPolicy(p))
//
// # Variables
//
//   - actor: {id, tenant, kind, onBehalfOf (a list)} — who the call is for;
//   - procedure: "/package.Service/Method", or a net/http route name;
//   - capability: {sideEffect, risk, idempotent, writeLike,
//     approvalRequired, approvalType, toolName, description}, names as
//     strings ("write", "high");
//   - surface: "rpc", "http" or "mcp";
//   - listing: true when an MCP tool listing asks;
//   - input: the call's input as JSON, decoded (null without one). A
//     protobuf input is its protojson form, so 64-bit integers are strings:
//     int(input.amountCents). The input is read, and checked first by the
//     engine, only when a rule mentions it.
//
// # Decisions
//
// A rule that names a key actor or capability does not have (actor.knd)
// fails [New], like one that does not compile.
//
// Every rule is evaluated, and every rule whose When holds contributes its
// Then; the strongest wins, as between policies, with a rule that fails to
// evaluate (a missing key: guard with has(), a type error, a cost over the
// limit) ranked between hide and deny: hide > error > deny > require
// approval > allow. So a rule that fails on the caller's input never tells
// the caller about a procedure another rule hides, while a failure with no
// hide fails the call closed with POLICY_UNAVAILABLE, whatever else
// matched. The first matching denial gives the reason; every matching
// approval requirement adds its reason. At a listing, rules that mention
// input are skipped: there is no input to judge. The engine asks every
// policy as at a listing at the start of each call (SPEC §3 stage 2.0), so
// a hide rule that does not mention input is decided before anything of
// the call is read; one that does is decided after the input is decoded
// and checked.
package agentsafecel
