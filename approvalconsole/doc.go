// Package approvalconsole is the approver's desk: an [http.Handler] with a
// JSON API over an engine's approval store and a small page on top of it
// (plain HTML and JavaScript, embedded, no build step), where a person sees
// what an agent asked to do and approves or rejects it.
//
//	console := approvalconsole.New(eng, func(r *http.Request) (middleware.Actor, error) {
//		u, err := myapp.UserFromSession(r) // the application's own login
//		if err != nil {
//			return middleware.Actor{}, err
//		}
//		return middleware.Actor{ID: u.ID, Tenant: u.Org, Kind: "user"}, nil
//	})
//	mux.Handle("/console/", http.StripPrefix("/console", console))
//
// Deciding executes nothing: the agent resumes its call with the approval id,
// and the engine consumes the approval then, once (see the README, "Approvals").
//
// # Routes
//
//	GET  /                              the page (console.js, console.css beside it)
//	GET  /approvals/{id}                the page of one approval: a deep link (see [Link])
//	GET  /api/session                   {"approver", "csrfToken", "csrfHeader", "pollMillis"}: a [Session]
//	GET  /api/approvals                 {"approvals": [...]}: the pending approvals, oldest first, at most 100
//	GET  /api/approvals/{id}            one [Approval], in any status
//	POST /api/approvals/{id}/decision   {"approve": bool, "comment": string} → the [Approval]
//
// Refusals are JSON ([ErrorBody]) with a code: 401 unauthorized; 403
// cross_origin, csrf_token, self_approval, approver_not_allowed; 404
// not_found; 409 not_pending, expired, already_voted; 400 bad_request; 415
// unsupported_media_type; 503 unavailable. A refusal changes nothing.
//
// # Headers
//
// The console reads, besides whatever the [Authorizer] reads:
// [TokenHeader] (Agentsafe-Csrf-Token) and Content-Type on a decision;
// Sec-Fetch-Site and Origin, through [http.CrossOriginProtection], on a
// decision; If-None-Match on GET /api/approvals. Every response carries
// Content-Security-Policy (scripts, styles, images and fetches from the
// page's own origin only; no inline script, no framing, no form
// submission), X-Frame-Options: DENY, X-Content-Type-Options: nosniff,
// Referrer-Policy: no-referrer and Cache-Control: no-store.
//
// GET /api/approvals carries a strong ETag over whom the list is for and
// the id, status and decision time of each approval in it. A request whose
// If-None-Match names it (or is "*"; the W/ prefix is ignored, as
// If-None-Match compares weakly) gets 304 Not Modified with that ETag and
// no body.
//
// # The page
//
// The page reads the session, then the pending list, and asks for the list
// again every pollMillis ([WithPollInterval]; 5 seconds by default) and
// whenever its window gets the focus, with the last ETag in If-None-Match,
// so an unchanged list costs a 304. New requests are added as cards; cards
// already shown are left as they are (a comment being typed survives); a
// card whose request left the pending list without being decided on the
// page is read again (GET /api/approvals/{id}) and shows what became of it
// (approved or rejected by someone else, expired). The Refresh button reads
// the session and the whole list again.
//
// The page of one approval, /approvals/{id}, is the deep link envelopes
// carry (middleware.WithApprovalURL with [Link]): it is served only to an
// approver the [Authorizer] accepts, for a record of the engine's audience
// and the approver's tenant, with the same refusals as GET
// /api/approvals/{id}. It shows that approval with its votes so far ("1
// of 2 approvals", each vote with its approver and comment; see
// Approval.Quorum), reads it again as the list page polls, and decides it
// like a card of the list.
//
// The page calls the API at URLs built from its own origin and path, never
// from its full address, so it also works when opened at an address with
// basic-auth credentials in it (http://bob:bob@host/console/), which fetch
// would otherwise refuse; the browser sends the credentials it was given.
//
// # Who may decide
//
// That is the application's question. The [Authorizer] given to New says who
// a request is from (an error or an empty id is 401, for every route but the
// static page).
//
// Every view goes through the engine ([middleware.Engine.List],
// [middleware.Engine.Get], [middleware.Engine.Decide]), never the raw
// store, so the console sees only records of its engine's audience
// (middleware.WithAudience): deployments sharing one store never list, open
// or decide each other's requests. An approver sees and decides only
// requests of their own tenant; the store filters the list by tenant before
// its limit, so no other tenant's requests can crowd theirs out. Another
// audience's or tenant's approval reads as not found.
//
// The store's rules apply inside its Decide, atomically, whichever instance
// serves the request (memory for one process, Redis for many): the
// requester and anyone in its OnBehalfOf chain may not decide it
// (self_approval, unless the store allows self-approval), the store's
// approver policy may refuse (approver_not_allowed), under a quorum a
// person votes once — a voter who is, acts for, or is acted for by an
// earlier voter is told so (already_voted) and not counted — and only a
// pending, unexpired record can be decided. [middleware.Engine.Decide] emits
// capability.approved or capability.rejected.
//
// # What the page shows
//
// First, when the capability has a preview (middleware.WithPreview), the
// effect the call would have as the server computed it from its state
// when the approval was requested ("What will happen"): the approval runs
// only while the state is still that one. Then procedure, approval type,
// risk and side effect, the requester and whom
// they act for, the reasons, the expiry, and a redacted view of the input:
// the record's View, which the engine rendered through the application's
// middleware.WithApprovalView, or what [WithRedaction] returns. Never the
// input itself, never the digest, never the requesting execution's id.
// Everything from the server is inserted as text, never as HTML; a Content
// Security Policy allows only the console's own script and style and
// forbids framing (so the buttons cannot be clickjacked).
//
// # CSRF
//
// A decision is accepted only when all of these hold:
//   - it is a POST with a JSON body (application/json): an HTML form cannot
//     send one, and a cross-origin script cannot without a CORS preflight,
//     which the console never answers;
//   - it passes Go's [http.CrossOriginProtection]: a browser's Sec-Fetch-Site
//     must say same-origin (or, without it, Origin must match Host), unless
//     the origin was trusted with [WithTrustedOrigin];
//   - it carries the approver's token in [TokenHeader]
//     (Agentsafe-Csrf-Token): an HMAC-SHA256, under a server key
//     ([WithCSRFKey]; random per process by default), of the approver's
//     tenant and id (and session, with [WithSession]). The page reads it
//     from GET /api/session, which another origin cannot read, and a token
//     is worth nothing to anyone but its approver.
//
// Safe methods never change anything. Instances behind one load balancer
// must share the key.
package approvalconsole
