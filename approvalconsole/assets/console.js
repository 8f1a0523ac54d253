// The approval console: plain JavaScript over the console's JSON API.
// Everything from the server is inserted as text, never as HTML.
"use strict";

let session = null;

function $(sel, root) { return (root || document).querySelector(sel); }

// apiURL resolves path against the page's origin and path only. The page's
// URL may carry credentials (http://bob:bob@host/console/), and fetch
// refuses any URL that does, relative ones resolved against it included;
// the browser still sends the credentials it was given for this origin.
function apiURL(path) {
  return new URL(path, location.origin + location.pathname).href;
}

async function api(path, options) {
  const res = await fetch(apiURL(path), Object.assign({ credentials: "same-origin", cache: "no-store" }, options));
  let body = null;
  try { body = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) {
    const msg = body && body.error ? body.error.message : res.status + " " + res.statusText;
    const err = new Error(msg);
    err.status = res.status;
    err.code = body && body.error ? body.error.code : "";
    throw err;
  }
  return body;
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
  $(".approve", card).addEventListener("click", () => decide(card, a.id, true));
  $(".reject", card).addEventListener("click", () => decide(card, a.id, false));
  return card;
}

function showDecided(card, a) {
  const status = $(".status", card);
  status.className = "status " + a.status;
  let text = a.status;
  if (a.approver) text += " by " + a.approver.id;
  if (a.comment) text += ": " + a.comment;
  status.textContent = text;
  for (const b of card.querySelectorAll("button, textarea")) b.disabled = true;
  card.classList.add("decided");
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

async function load() {
  try {
    session = await api("api/session");
  } catch (e) {
    $("#who").textContent = "";
    notice(e.message);
    return;
  }
  let who = "Signed in as " + session.approver.id;
  if (session.approver.tenant) who += " · " + session.approver.tenant;
  $("#who").textContent = who;
  try {
    const data = await api("api/approvals");
    const list = $("#approvals");
    list.replaceChildren(...data.approvals.map(render));
    $("#empty").hidden = data.approvals.length > 0;
    notice("");
  } catch (e) {
    notice(e.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#refresh").addEventListener("click", load);
  load();
});
