// The team page of `dsh serve`: sign in, list and start sessions, follow a session's events
// (the stored records, streamed from /v1/sessions/<id>/events) and send it input. Model and
// tool text is only ever set as text, never parsed as markup.
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("dsh-team-token") || "";
let current = null; // { id, abort, lastSeq }

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await resp.json().catch(() => ({}));
  if (resp.status === 401) { signedOut(data.error || "signed out"); throw new Error("signed out"); }
  if (!resp.ok) throw new Error(data.error || ("HTTP " + resp.status));
  return data;
}

function signedOut(message) {
  token = "";
  sessionStorage.removeItem("dsh-team-token");
  if (current) current.abort.abort();
  current = null;
  $("app").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
}

async function signedIn() {
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  await refreshSessions();
}

async function refreshSessions() {
  const data = await api("GET", "/v1/sessions");
  const list = $("sessions");
  list.replaceChildren();
  for (const s of data.sessions) {
    const li = document.createElement("li");
    li.dataset.session = s.sessionId;
    li.textContent = (s.title || s.sessionId) + " · " + (s.turns || 0) + " turns";
    if (current && current.id === s.sessionId) li.classList.add("current");
    li.addEventListener("click", () => openSession(s.sessionId, s.title));
    list.append(li);
  }
}

function textOf(message) {
  const blocks = (message && message.content) || [];
  return blocks.filter((b) => b.type === "text").map((b) => b.text).join("");
}

function show(record) {
  const data = record.data || {};
  let cls = "", text = "";
  switch (record.type) {
    case "user/message":
      if (!data.source || data.source.kind !== "user") return;
      cls = "user"; text = textOf(data);
      $("session-state").textContent = "a turn is running"; break;
    case "assistant/message":
      text = textOf(data.message); if (!text) return; break;
    case "tool/call":
      cls = "tool";
      text = "→ " + (data.name || "tool") + " " +
        (typeof data.arguments === "string" ? data.arguments : JSON.stringify(data.arguments || {}));
      break;
    case "tool/result":
      cls = "tool"; text = (data.message && data.message.content || []).map((c) =>
        (c.content || []).map((b) => b.text || "").join("")).join("").slice(0, 4000); break;
    case "turn/end":
      cls = "end"; text = "turn ended: " + ((data.reason && data.reason.kind) || "?");
      $("session-state").textContent = "idle"; break;
    case "session/title":
      $("session-title").textContent = data.title || current.id; return;
    case "approval/asked":
      showApproval(data); return;
    case "approval/decided": {
      const li = document.querySelector('#log li.approval[data-approval="' + CSS.escape(data.id || "") + '"]');
      if (li) {
        for (const b of li.querySelectorAll("button")) b.remove();
        li.append(" (" + (data.outcome || "decided") + ")");
      }
      return;
    }
    default: return;
  }
  const li = document.createElement("li");
  if (cls) li.className = cls;
  li.dataset.type = record.type;
  li.textContent = text;
  $("log").append(li);
}

// A call waiting for approval: what it is and why, with the two answers this page gives.
function showApproval(data) {
  const li = document.createElement("li");
  li.className = "approval";
  li.dataset.type = "approval/asked";
  li.dataset.approval = data.id || "";
  li.textContent = "approval needed: " + (data.toolName || "tool") + (data.reason ? " — " + data.reason : "") + " ";
  for (const [label, outcome] of [["Allow once", "allowed-once"], ["Reject", "rejected"]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.dataset.outcome = outcome;
    b.addEventListener("click", async () => {
      for (const other of li.querySelectorAll("button")) other.disabled = true;
      try {
        await api("POST", "/v1/sessions/" + encodeURIComponent(current.id) + "/approvals/" +
          encodeURIComponent(data.id), { outcome });
      } catch (e) {
        $("session-error").textContent = e.message;
      }
    });
    li.append(b);
  }
  $("log").append(li);
}

// Reads the event stream with fetch (it carries the Authorization header, which
// EventSource cannot), resuming after the last seq on a dropped connection.
async function follow(session) {
  while (current === session) {
    try {
      const headers = { Authorization: "Bearer " + token };
      if (session.lastSeq > 0) headers["Last-Event-ID"] = String(session.lastSeq);
      const resp = await fetch("/v1/sessions/" + encodeURIComponent(session.id) + "/events",
        { headers, signal: session.abort.signal });
      if (resp.status === 401) { signedOut("signed out"); return; }
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let id = null, data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("id: ")) id = Number(line.slice(4));
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (id === null || !data || id <= session.lastSeq) continue;
          session.lastSeq = id;
          let record = null;
          try { record = JSON.parse(data); } catch (e) { continue; }
          show(record);
          // A new title or a finished turn changes the session list.
          if (record.type === "turn/end" || record.type === "session/title") refreshSessions().catch(() => {});
        }
      }
    } catch (e) {
      if (session.abort.signal.aborted) return;
      $("session-error").textContent = "stream interrupted; reconnecting";
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

async function openSession(id, title) {
  if (current) current.abort.abort();
  current = { id, abort: new AbortController(), lastSeq: 0 };
  $("session").hidden = false;
  $("session").dataset.session = id;
  $("session-title").textContent = title || id;
  $("session-error").textContent = "";
  $("log").replaceChildren();
  for (const li of $("sessions").children) li.classList.toggle("current", li.dataset.session === id);
  try {
    const s = await api("GET", "/v1/sessions/" + encodeURIComponent(id));
    $("session-state").textContent = s.leased ? "a turn is running" : (s.pendingInput + " input(s) waiting");
  } catch (e) { $("session-error").textContent = e.message; }
  follow(current);
}

$("password-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const resp = await fetch("/v1/login", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user: $("user").value, password: $("password").value }) });
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) { $("signin-error").textContent = data.error || ("HTTP " + resp.status); return; }
  token = data.token;
  sessionStorage.setItem("dsh-team-token", token);
  $("who").textContent = data.user + (data.admin ? " (admin)" : "");
  await signedIn();
});

$("token-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  token = $("token").value.trim();
  sessionStorage.setItem("dsh-team-token", token);
  try { await signedIn(); } catch (e) { /* signedOut already said why */ }
});

$("signout").addEventListener("click", async () => {
  try { await api("POST", "/v1/logout"); } catch (e) { /* a standing token stays valid */ }
  signedOut("");
});

$("new-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const s = await api("POST", "/v1/sessions", { text: $("new-text").value, answersApprovals: true });
    $("new-text").value = "";
    await refreshSessions();
    openSession(s.sessionId);
  } catch (e) { $("session-error").textContent = e.message; }
});

$("message-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  if (!current) return;
  try {
    await api("POST", "/v1/sessions/" + encodeURIComponent(current.id) + "/messages",
      { text: $("message-text").value, answersApprovals: true });
    $("message-text").value = "";
    $("session-state").textContent = "input queued";
  } catch (e) { $("session-error").textContent = e.message; }
});

$("cancel").addEventListener("click", async () => {
  if (!current) return;
  try {
    await api("POST", "/v1/sessions/" + encodeURIComponent(current.id) + "/cancel");
    $("session-state").textContent = "stopping the turn";
  } catch (e) { $("session-error").textContent = e.message; }
});

if (token) signedIn().catch(() => {}); else signedOut("");
