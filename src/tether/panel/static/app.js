/* tether panel — plain JS, no framework.
 *
 * Views: #/shells[/<id>], #/audit, #/vault. The shell list arrives by push over /panel/ws/events;
 * an open shell is a real tmux client behind /panel/ws/term/<id>, drawn by xterm.js.
 * Every action is a same-origin JSON POST to /panel/api/… (the server audits it as source "panel").
 */
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const wsBase = () => `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${basePath()}`;
const basePath = () => location.pathname.replace(/\/[^/]*$/, "");  // "/panel"

const state = {
  shells: [],           // rows pushed by the server
  serverSkewMs: 0,      // server clock minus ours, so idle times count from the server's view
  selected: null,       // shell id open in the terminal
  term: null, fit: null, termSocket: null, termShell: null,
  lastUserEventAt: 0,   // when a key/paste/click reached the terminal (tells typing from replies)
};

/* ---------- small helpers ---------- */

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c.nodeType ? c : String(c));
  return node;
}

let toastTimer = 0;
function toast(message, isError = false) {
  const t = $("#toast");
  t.textContent = message;
  t.className = "toast" + (isError ? " error" : "");
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, isError ? 9000 : 4000);
}

async function api(method, path, body) {
  const init = { method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(`${basePath()}/api/${path}`, init);
  if (res.status === 401) { location.href = `${basePath()}/login`; throw new Error("signed out"); }
  const data = await res.json().catch(() => ({ message: res.statusText }));
  if (!res.ok || data.error) {
    const err = new Error(data.message || `${res.status} ${res.statusText}`);
    err.code = data.error; throw err;
  }
  return data;
}

async function act(label, fn) {
  try {
    const out = await fn();
    if (out && out.message) toast(out.message);
    else toast(`${label}: done`);
    return out;
  } catch (e) {
    toast(`${label}: ${e.message}`, true);
    return null;
  }
}

function fmtIdle(ms) {
  if (ms === null || ms === undefined || ms < 0) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

function promptFor(title, text, initial = "", type = "text") {
  const dlg = $("#prompt-dialog");
  $("#prompt-title").textContent = title;
  $("#prompt-text").textContent = text;
  const input = $("#prompt-input");
  input.type = type; input.value = initial;
  return new Promise((resolve) => {
    const done = (value) => { dlg.close(); resolve(value); };
    $("#prompt-form").onsubmit = (ev) => { ev.preventDefault(); done(input.value); };
    $("#prompt-cancel").onclick = () => done(null);
    dlg.oncancel = () => resolve(null);
    dlg.showModal(); input.select();
  });
}

/* ---------- routing ---------- */

function route() {
  const [, view = "shells", arg] = location.hash.split("/");
  const name = ["shells", "audit", "vault"].includes(view) ? view : "shells";
  for (const v of ["shells", "audit", "vault"]) $(`#view-${v}`).hidden = v !== name;
  document.querySelectorAll(".top nav a").forEach((a) => {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  });
  if (name === "shells") {
    if (arg && arg !== state.termShell) openTerminal(decodeURIComponent(arg));
    if (!arg && state.termShell) closeTerminal();
    loadWorkspaces();
  } else if (name === "audit") loadAudit();
  else if (name === "vault") loadVault();
}

/* ---------- live shell list ---------- */

function connectEvents(delay = 500) {
  const live = $("#live");
  const ws = new WebSocket(`${wsBase()}/ws/events`);
  ws.onopen = () => { live.textContent = "live"; live.className = "live ok"; delay = 500; };
  ws.onmessage = (ev) => {
    const msg = JSON.parse(ev.data);
    if (msg.type === "shells") {
      state.shells = msg.shells;
      state.serverSkewMs = msg.now - Date.now();
      renderShells();
    } else if (msg.type === "error") {
      live.textContent = `list unavailable: ${msg.message}`; live.className = "live down";
    }
  };
  ws.onclose = (ev) => {
    live.textContent = ev.code === 1008 ? "signed out" : "reconnecting…";
    live.className = "live down";
    if (ev.code === 1008) { location.href = `${basePath()}/login`; return; }
    setTimeout(() => connectEvents(Math.min(delay * 2, 8000)), delay);
  };
}

function shellMatches(s) {
  const owner = $("#f-owner").value, st = $("#f-state").value;
  const text = $("#f-text").value.trim().toLowerCase();
  if (owner && s.owner !== owner) return false;
  if (st && !s.states.includes(st)) return false;
  if (text) {
    const hay = [s.id, s.label, s.host, s.fg, s.cwd].join(" ").toLowerCase();
    if (!hay.includes(text)) return false;
  }
  return true;
}

function idleOf(s) {
  if (s.lastActivityMs) return Date.now() + state.serverSkewMs - s.lastActivityMs;
  return s.idleMs;
}

function renderShells() {
  const body = $("#shells tbody");
  const rows = state.shells.filter(shellMatches);
  $("#shell-count").textContent = `(${rows.length}${rows.length !== state.shells.length ? ` of ${state.shells.length}` : ""})`;
  $("#no-shells").hidden = rows.length > 0;
  const focusedId = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.shell : null;
  body.replaceChildren(...rows.map((s) => {
    const open = el("button", { class: "open-btn", type: "button", "data-shell": s.id,
      "aria-label": `Open terminal of ${s.id}${s.label ? " " + s.label : ""}` }, s.id);
    return el("tr", { "data-id": s.id, "aria-selected": s.id === state.selected ? "true" : "false",
                      onclick: () => { location.hash = `#/shells/${s.id}`; } },
      el("td", {}, open, s.label ? el("span", { class: "sub" }, s.label) : null,
        s.host && s.host !== "local" ? el("span", { class: "sub mono host", title: "the host this shell runs on" }, `on ${s.host}`) : null),
      el("td", {}, s.owner, s.ownerId && s.ownerId !== s.owner ? el("span", { class: "sub mono" }, s.ownerId) : null),
      el("td", {}, s.states.map((x) => el("span", { class: `badge ${x}` }, x)),
        s.lockedBy ? el("span", { class: "badge locked", title: "a person locked this shell; agents are refused" },
          `lock: ${s.lockedBy}`) : null),
      el("td", {}, el("span", { class: "mono" }, s.fg || "—"), el("span", { class: "sub mono", title: s.cwd }, s.cwd || "")),
      el("td", { class: "idle mono", "data-id": s.id }, fmtIdle(idleOf(s))));
  }));
  if (focusedId) { const again = body.querySelector(`[data-shell="${focusedId}"]`); if (again) again.focus(); }
  renderTermHead();
}

setInterval(() => {  // idle times tick between pushes
  for (const cell of document.querySelectorAll("#shells td.idle")) {
    const s = state.shells.find((x) => x.id === cell.dataset.id);
    if (s) cell.textContent = fmtIdle(idleOf(s));
  }
}, 1000);

/* ---------- terminal ---------- */

const REPLY = /^(\x1b\[[?>]?[\d;]*[cRn]|\x1bP[\s\S]*\x1b\\|\x1b\][\s\S]*(\x07|\x1b\\)|\x1b\[[IO]|\x1b\[\?[\d;]*\$y)$/;

function ensureTerm() {
  if (state.term) return;
  const term = new Terminal({
    cursorBlink: true, scrollback: 10000, convertEol: false, allowProposedApi: false,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace', fontSize: 13,
    theme: { background: "#000000" }, screenReaderMode: false,
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open($("#terminal"));
  // tmux switches the outer terminal to the alternate screen, which has no scrollback; stay on the
  // normal screen so lines tmux scrolls off the top land in xterm's scrollback.
  term.parser.registerCsiHandler({ prefix: "?", final: "h" }, (p) => p.length > 0 && p.every((x) => [47, 1047, 1049].includes(x)));
  term.parser.registerCsiHandler({ prefix: "?", final: "l" }, (p) => p.length > 0 && p.every((x) => [47, 1047, 1049].includes(x)));
  const mark = () => { state.lastUserEventAt = performance.now(); };
  term.attachCustomKeyEventHandler((ev) => {
    if (ev.type === "keydown" && ev.ctrlKey && ev.key === "]") { leaveTerminal(); return false; }
    mark(); return true;
  });
  $("#terminal").addEventListener("paste", mark, true);
  $("#terminal").addEventListener("mousedown", mark, true);
  const send = (data, binary) => {
    const ws = state.termSocket;
    if (!ws || ws.readyState !== WebSocket.OPEN) return;
    // Replies to tmux's own queries (device attributes, cursor reports, focus) are not a person typing.
    const typed = performance.now() - state.lastUserEventAt < 1000 && !REPLY.test(data);
    ws.send(JSON.stringify({ type: "input", data, binary: !!binary, typed }));
  };
  term.onData((d) => send(d, false));
  term.onBinary((d) => send(d, true));
  term.onResize(({ cols, rows }) => {
    const ws = state.termSocket;
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols, rows }));
  });
  new ResizeObserver(() => { if (!$("#term-pane").hidden) fit.fit(); }).observe($("#terminal"));
  state.term = term; state.fit = fit;
  window.tetherTerm = term;  // for the browser tests and the curious
}

function openTerminal(id) {
  closeTerminal();
  state.selected = id; state.termShell = id;
  $("#term-pane").hidden = false;
  $("#term-pane").classList.remove("closed");
  ensureTerm();
  const term = state.term;
  term.reset();
  state.fit.fit();
  $("#term-note").textContent = "attaching…";
  const ws = new WebSocket(`${wsBase()}/ws/term/${encodeURIComponent(id)}?cols=${term.cols}&rows=${term.rows}`);
  ws.binaryType = "arraybuffer";
  state.termSocket = ws;
  ws.onopen = () => { $("#term-note").textContent = "attached — typing here goes to the shell; Ctrl+] leaves the terminal"; term.focus(); };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== "string") { term.write(new Uint8Array(ev.data)); return; }
    const msg = JSON.parse(ev.data);
    if (msg.type === "exit" || msg.type === "error") {
      $("#term-note").textContent = msg.message;
      $("#term-pane").classList.add("closed");
    }
  };
  ws.onclose = (ev) => {
    if (state.termSocket !== ws) return;
    state.termSocket = null;
    $("#term-pane").classList.add("closed");
    if (ev.reason) $("#term-note").textContent = ev.reason;
    else if (!$("#term-note").textContent.startsWith("shell")) $("#term-note").textContent = "detached";
  };
  renderShells();
}

function closeTerminal() {
  if (state.termSocket) { const ws = state.termSocket; state.termSocket = null; ws.close(1000, "detach"); }
  state.termShell = null; state.selected = null;
  $("#term-pane").hidden = true;
}

function leaveTerminal() {
  const btn = document.querySelector(`#shells [data-shell="${state.termShell}"]`) || $("#act-detach");
  btn.focus();
}

function renderTermHead() {
  const id = state.termShell;
  if (!id) return;
  const s = state.shells.find((x) => x.id === id);
  const where = s && s.host && s.host !== "local" ? ` · on ${s.host}` : "";
  $("#term-title").textContent = (s && s.label ? `${id} · ${s.label}` : id) + where;
  $("#term-state").textContent = s ? [...s.states, ...(s.lockedBy ? [`lock: ${s.lockedBy}`] : [])].join(" · ") : "";
  const locked = !!(s && s.lockedBy);
  const lockBtn = $("#act-lock");
  lockBtn.textContent = locked ? "Unlock" : "Lock";
  lockBtn.setAttribute("aria-pressed", locked ? "true" : "false");
}

function currentShell() { return state.shells.find((x) => x.id === state.termShell); }

/* ---------- actions ---------- */

function bindActions() {
  $("#act-lock").onclick = () => {
    const id = state.termShell; const s = currentShell();
    const unlocking = !!(s && s.lockedBy);
    act(unlocking ? "Unlock" : "Lock", () => api("POST", `shells/${id}/${unlocking ? "unlock" : "lock"}`, {}));
  };
  $("#act-rename").onclick = async () => {
    const id = state.termShell; const s = currentShell();
    const name = await promptFor(`Rename ${id}`, "New label (≤ 32 characters)", s ? s.label : "");
    if (name !== null) act("Rename", () => api("POST", `shells/${id}/rename`, { name }));
  };
  $("#act-snapshot").onclick = () => act("Snapshot", () => api("POST", `shells/${state.termShell}/snapshot`, {}));
  $("#act-close").onclick = async () => {
    const id = state.termShell;
    if (!confirm(`Close ${id}? Its process is ended (a snapshot is kept).`)) return;
    const out = await act("Close", () => api("POST", `shells/${id}/close`, {}));
    if (out) location.hash = "#/shells";
  };
  $("#act-detach").onclick = () => { location.hash = "#/shells"; };
  $("#new-shell").onsubmit = async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const out = await act("Open shell", () => api("POST", "shells", { label: f.get("label"), cwd: f.get("cwd") }));
    if (out && out.id) { ev.target.reset(); $("#new-shell-box").open = false; location.hash = `#/shells/${out.id}`; }
  };
  $("#restore-ws").onsubmit = (ev) => {
    ev.preventDefault();
    const name = new FormData(ev.target).get("name");
    if (name) act("Restore workspace", () => api("POST", `workspaces/${encodeURIComponent(name)}/restore`, {}));
  };
  for (const id of ["#f-owner", "#f-state", "#f-text"]) $(id).addEventListener("input", renderShells);
  $("#filters").onsubmit = (ev) => ev.preventDefault();
  $("#audit-filters").onsubmit = (ev) => { ev.preventDefault(); loadAudit(); };
  $("#audit-verify").onclick = verifyAudit;
  window.addEventListener("hashchange", route);
}

async function loadWorkspaces() {
  const sel = $("#ws-select");
  try {
    const out = await api("GET", "workspaces");
    sel.replaceChildren(...(out.workspaces.length
      ? out.workspaces.map((w) => el("option", { value: w.name }, `${w.name} (${w.shells} shell${w.shells === 1 ? "" : "s"})`))
      : [el("option", { value: "" }, "(no saved workspaces)")]));
  } catch (e) {
    sel.replaceChildren(el("option", { value: "" }, `(${e.message})`));
  }
}

/* ---------- audit ---------- */

async function loadAudit() {
  const f = new FormData($("#audit-filters"));
  const q = new URLSearchParams();
  for (const [k, v] of f.entries()) if (v) q.set(k, v);
  const body = $("#audit tbody");
  try {
    const out = await api("GET", `audit?${q}`);
    $("#no-audit").hidden = out.records.length > 0;
    body.replaceChildren(...out.records.slice().reverse().map((r) => {
      const bypass = r.flags.includes("bypass-guard");
      return el("tr", { class: bypass ? "bypass" : null },
        el("td", { class: "mono" }, r.time.replace("T", " ").replace("Z", "")),
        el("td", { class: "mono" }, r.actor),
        el("td", {}, r.source),
        el("td", {}, `${r.tool} ${r.action}`),
        el("td", { class: "mono" }, r.targets.join(", ")),
        el("td", { class: "mono" },
          bypass ? el("span", { class: "badge bypass", title: "dangerous-command guard bypassed" }, "bypass-guard") : null,
          r.command ?? "", r.detail ? el("span", { class: "sub" }, r.detail) : null,
          r.reason ? el("span", { class: "sub" }, `reason: ${r.reason}`) : null),
        el("td", { class: `outcome-${r.outcome}` }, r.outcome));
    }));
  } catch (e) {
    body.replaceChildren(); toast(`Audit: ${e.message}`, true);
  }
}

async function verifyAudit() {
  const out$ = $("#verify-result");
  out$.textContent = "verifying…"; out$.className = "note";
  try {
    const out = await api("POST", "audit/verify", {});
    out$.textContent = out.summary;
    out$.className = out.ok ? "note verify-ok" : "note verify-bad";
  } catch (e) { out$.textContent = e.message; out$.className = "note verify-bad"; }
}

/* ---------- vault ---------- */

async function loadVault() {
  const body = $("#vault-groups tbody");
  try {
    const out = await api("GET", "vault");
    $("#no-vault").hidden = out.groups.length > 0;
    $("#vault-groups").hidden = out.groups.length === 0;
    body.replaceChildren(...out.groups.map((g) => {
      let action = "—";
      if (g.protected && g.locked) {
        action = el("form", { "aria-label": `Unlock group ${g.name}`, onsubmit: async (ev) => {
          ev.preventDefault();
          const f = new FormData(ev.target);
          ev.target.reset();
          const done = await act(`Unlock ${g.name}`, () => api("POST", `vault/${encodeURIComponent(g.name)}/unlock`,
            { passphrase: f.get("passphrase"), minutes: Number(f.get("minutes")) || null }));
          if (done) loadVault();
        } },
          el("label", {}, "Passphrase", el("input", { type: "password", name: "passphrase", required: true, autocomplete: "off" })),
          el("label", {}, "Minutes", el("input", { type: "number", name: "minutes", min: 1, max: 480, value: 15, style: "width:5em" })),
          el("button", { type: "submit" }, "Unlock"));
      } else if (g.protected) {
        action = el("button", { type: "button", onclick: async () => {
          if (await act(`Lock ${g.name}`, () => api("POST", `vault/${encodeURIComponent(g.name)}/lock`, {}))) loadVault();
        } }, "Lock now");
      }
      const st = !g.protected ? "no passphrase" : g.locked ? "locked"
        : `unlocked until ${new Date(g.unlockedUntilMs).toLocaleTimeString()}`;
      return el("tr", {}, el("td", { class: "mono" }, g.name), el("td", {}, g.items),
        el("td", {}, el("span", { class: `badge ${g.locked ? "locked" : "idle"}` }, st)), el("td", {}, action));
    }));
    $("#vault-items").replaceChildren(...out.items.map((i) =>
      el("li", { title: `group ${i.group}${i.locked ? " (locked)" : ""}` }, `${i.name}`, el("span", { class: "sr-only" }, ` in ${i.group}`))));
  } catch (e) { body.replaceChildren(); toast(`Vault: ${e.message}`, true); }
}

/* ---------- start ---------- */

window.addEventListener("DOMContentLoaded", () => {
  bindActions();
  connectEvents();
  if (!location.hash) location.hash = "#/shells";
  route();
});
