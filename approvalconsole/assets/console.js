// The approval console: plain JavaScript over the console's JSON API.
// Everything from the server is inserted as text, never as HTML.
"use strict";

let session = null;
let etag = "";         // the pending list's ETag, sent back in If-None-Match
let pollTimer = 0;
let polling = null;    // the poll in flight, if any
let again = false;     // a full refresh was asked for while polling

function $(sel, root) { return (root || document).querySelector(sel); }

// The page of one approval (GET approvals/{id}, a deep link) sits one level
// below the console: its API is at ../api, and it shows only that approval.
const single = document.body.dataset.page === "approval";
const root = single ? "../" : "";
const singleID = single ? decodeURIComponent(location.pathname.split("/").pop()) : "";

// apiURL resolves path against the page's origin and path only. The page's
// URL may carry credentials (http://bob:bob@host/console/), and fetch
// refuses any URL that does, relative ones resolved against it included;
// the browser still sends the credentials it was given for this origin.
function apiURL(path) {
  return new URL(root + path, location.origin + location.pathname).href;
}

// call fetches an API path and returns the response and its JSON body (null
// for a 304, which only a conditional request gets); a refusal throws.
async function call(path, options) {
  const res = await fetch(apiURL(path), Object.assign({ credentials: "same-origin", cache: "no-store" }, options));
  if (res.status === 304) return { res: res, body: null };
  let body = null;
  try { body = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) {
    const msg = body && body.error ? body.error.message : res.status + " " + res.statusText;
    const err = new Error(msg);
    err.status = res.status;
    err.code = body && body.error ? body.error.code : "";
    throw err;
  }
  return { res: res, body: body };
}

async function api(path, options) {
  return (await call(path, options)).body;
}

function notice(text) {
  const n = $("#notice");
  n.textContent = text;
  n.hidden = !text;
}

function relative(date) {
  const mins = Math.round((date.getTime() - Date.now()) / 60000);
  if (mins <= 0) return "due now";
  if (mins < 90) return "in " + mins + " min";
  return "in " + Math.round(mins / 60) + " h";
}

function badge(text, cls) {
  const b = document.createElement("span");
  b.className = "badge " + (cls || "");
  b.textContent = text;
  return b;
}

function render(a) {
  const card = $("#card").content.firstElementChild.cloneNode(true);
  card.dataset.id = a.id;
  // The effect as the server computed it, first: the approval runs only
  // while the state is what it was computed from.
  $(".preview", card).textContent = a.preview || "";
  $(".preview-label", card).hidden = $(".preview-value", card).hidden = !a.preview;
  $(".procedure", card).textContent = a.procedure;
  const badges = $(".badges", card);
  badges.append(badge("risk: " + a.risk, "risk-" + a.risk), badge(a.sideEffect));
  if (a.type) badges.append(badge("needs: " + a.type));
  let who = a.requester.id;
  if (a.requester.kind) who += " (" + a.requester.kind + ")";
  if (a.requester.onBehalfOf && a.requester.onBehalfOf.length) who += " on behalf of " + a.requester.onBehalfOf.join(", ");
  $(".requester", card).textContent = who;
  const reasons = $(".reasons", card);
  for (const r of a.reasons) {
    const li = document.createElement("li");
    li.textContent = r;
    reasons.append(li);
  }
  const exp = new Date(a.expiresAt);
  $(".expires", card).textContent = exp.toLocaleString() + " (" + relative(exp) + ")";
  $(".view", card).textContent = a.view || "(no view of the input was configured)";
  $(".self", card).hidden = !a.selfRequested;
  tally(card, a);
  $(".approve", card).addEventListener("click", () => decide(card, a.id, true));
  $(".reject", card).addEventListener("click", () => decide(card, a.id, false));
  return card;
}

// tally shows the votes so far (the page of one approval has room for them):
// how many approvals of how many needed, and each vote.
function tally(card, a) {
  card.dataset.votes = (a.votes || []).length;
  const t = $(".tally", card);
  if (!t) return;
  const yes = (a.votes || []).filter((v) => v.approve).length;
  t.textContent = yes + " of " + (a.quorum || 1) + " approvals";
  const list = $(".votes", card);
  list.replaceChildren();
  for (const v of a.votes || []) {
    const li = document.createElement("li");
    li.textContent = (v.approve ? "approved by " : "rejected by ") + v.approver.id + (v.comment ? ": " + v.comment : "");
    list.append(li);
  }
}

// stale reports whether a is older than what card shows.
function stale(card, a) {
  if (a.status === "pending" && card.classList.contains("decided")) return true;
  return (a.votes || []).length < Number(card.dataset.votes || 0);
}

function showDecided(card, a) {
  tally(card, a);
  const status = $(".status", card);
  if (a.status === "pending") {
    // A vote that did not reach the quorum: counted, and the record waits
    // for the other approvers. This approver has voted.
    status.className = "status voted";
    status.textContent = "your vote is counted; waiting for more approvers";
    for (const b of card.querySelectorAll("button, textarea")) b.disabled = true;
    return;
  }
  status.className = "status " + a.status;
  let text = a.status;
  if (a.approver) text += " by " + a.approver.id;
  if (a.comment) text += ": " + a.comment;
  status.textContent = text;
  for (const b of card.querySelectorAll("button, textarea")) b.disabled = true;
  card.classList.add("decided");
}

function cardOf(id) {
  for (const card of $("#approvals").children) if (card.dataset.id === id) return card;
  return null;
}

// settle shows what became of a card's request once it left the pending
// list without being decided on this page: decided by someone else, or
// expired.
async function settle(card) {
  card.classList.add("decided");
  let a;
  try {
    a = await api("api/approvals/" + encodeURIComponent(card.dataset.id));
  } catch (e) {
    a = null;
  }
  if (a && a.status !== "pending") {
    showDecided(card, a);
  } else {
    showDecided(card, { status: "" });
    $(".status", card).textContent = "no longer pending";
  }
}

// show puts the pending list on the page. Cards already there stay as they
// are, so a poll never loses a comment being typed; new requests are added;
// a card whose request is no longer pending says what became of it.
function show(approvals) {
  const list = $("#approvals");
  const pending = new Set(approvals.map((a) => a.id));
  for (const card of list.children) {
    if (!pending.has(card.dataset.id) && !card.classList.contains("decided")) settle(card);
  }
  for (const a of approvals) if (!cardOf(a.id)) list.append(render(a));
  $("#empty").hidden = approvals.length > 0;
}

async function decide(card, id, approve) {
  const status = $(".status", card);
  const buttons = card.querySelectorAll("button");
  for (const b of buttons) b.disabled = true;
  status.className = "status";
  status.textContent = approve ? "Approving…" : "Rejecting…";
  try {
    const a = await api("api/approvals/" + encodeURIComponent(id) + "/decision", {
      method: "POST",
      headers: { "Content-Type": "application/json", [session.csrfHeader]: session.csrfToken },
      body: JSON.stringify({ approve: approve, comment: $(".comment", card).value }),
    });
    showDecided(card, a);
  } catch (e) {
    status.className = "status error";
    status.textContent = e.message;
    if (e.status !== 409 && e.status !== 404) for (const b of buttons) b.disabled = false;
  }
}

// refresh asks for the pending list: only if it changed since the last
// answer, unless full, which also clears the cards already decided.
async function refresh(full) {
  if (single) return refreshOne(full);
  const headers = {};
  if (etag && !full) headers["If-None-Match"] = etag;
  const { res, body } = await call("api/approvals", { headers: headers });
  if (res.status !== 304) {
    etag = res.headers.get("ETag") || "";
    if (full) $("#approvals").replaceChildren();
    show(body.approvals);
  }
  notice("");
}

// refreshOne reads the one approval of a deep link again: its votes so far,
// and what became of it once decided. An answer older than what the page
// shows (it left the server before this approver's vote, and arrived after
// it) is dropped: votes only grow, and a decided approval stays decided.
async function refreshOne(full) {
  const a = await api("api/approvals/" + encodeURIComponent(singleID));
  let card = cardOf(a.id);
  if (card && stale(card, a)) return;
  if (!card || full) {
    card = render(a);
    $("#approvals").replaceChildren(card);
  } else {
    tally(card, a);
  }
  if (a.status !== "pending" && !$(".status", card).classList.contains(a.status)) showDecided(card, a);
  notice("");
}

// start learns who the approver is, then shows the whole pending list.
async function start() {
  try {
    session = await api("api/session");
  } catch (e) {
    if (!session) $("#who").textContent = "";
    throw e;
  }
  let who = "Signed in as " + session.approver.id;
  if (session.approver.tenant) who += " · " + session.approver.tenant;
  $("#who").textContent = who;
  await refresh(true);
}

// poll refreshes the list (from the start when full) and again after the
// session's pollMillis; one poll runs at a time, and a full one asked for
// meanwhile runs right after it.
async function poll(full) {
  if (polling) {
    again = again || full;
    return;
  }
  clearTimeout(pollTimer);
  polling = (async () => {
    try {
      if (full || !session) await start();
      else await refresh(false);
    } catch (e) {
      notice(e.message);
    }
  })();
  await polling;
  polling = null;
  if (again) {
    again = false;
    return poll(true);
  }
  if (session) pollTimer = setTimeout(poll, session.pollMillis > 0 ? session.pollMillis : 5000, false);
}

document.addEventListener("DOMContentLoaded", () => {
  const button = $("#refresh");
  if (button) button.addEventListener("click", () => poll(true));
  window.addEventListener("focus", () => poll(false));
  poll(true);
});
