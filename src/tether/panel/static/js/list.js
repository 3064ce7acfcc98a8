/* The live shell list: pushed over /panel/ws/events (what shell_state reports), filtered here;
 * the same socket pushes the pending approvals (approvals.js) and the vault's listing (vault.js). */
import { $, $$, basePath, el, fmtIdle, wsBase } from "./util.js";
import { renderApprovals } from "./approvals.js";
import { vaultPushed } from "./vault.js";

export const list = {
  shells: [],        // rows pushed by the server
  loaded: false,     // a list has arrived (an empty one then means: no shells)
  skewMs: 0,         // server clock minus ours, so idle times count from the server's view
  selected: new Set(),
  listeners: [],     // called after every push: (shells) => …
};

export const shellById = (id) => list.shells.find((s) => s.id === id);

/* Whether the server says this page is signed out (its cookie is gone or no longer valid: the token
 * was replaced). null when it cannot be asked (the server is down). */
async function signedOut() {
  try {
    const res = await fetch(`${basePath()}/api/shells`, { headers: { "Accept": "application/json" }, credentials: "same-origin" });
    return res.status === 401 || res.status === 403;
  } catch {
    return null;
  }
}

/* A socket that has heard nothing for three of the server's heartbeats is taken for dead: after a
 * laptop slept, or the network dropped without a word, a socket can stay open on the page with
 * nothing behind it — the list and the questions waiting for an answer would never change again. */
const HEARTBEAT_MS = 15000;  // HEARTBEAT_S of the server, until its first ping says its own
export function watchdog(onDead) {
  let timer = 0;
  return {
    heard(every) { clearTimeout(timer); timer = setTimeout(onDead, 3 * (every || HEARTBEAT_MS)); },
    stop() { clearTimeout(timer); },
  };
}

export function connectEvents(delay = 500) {
  const live = $("#live");
  const ws = new WebSocket(`${wsBase()}/ws/events`);
  let opened = false, every = 0;
  const dog = watchdog(() => { ws.onclose = null; ws.close(); lost({ code: 1006 }); });
  ws.onopen = () => { opened = true; live.textContent = "live"; live.className = "live ok"; delay = 500; dog.heard(every); };
  ws.onmessage = (ev) => {
    const msg = JSON.parse(ev.data);
    if (msg.type === "ping") every = msg.every;
    dog.heard(every);
    if (msg.type === "shells") {
      list.shells = msg.shells;
      list.loaded = true;
      list.skewMs = msg.now - Date.now();
      renderShells();
      for (const fn of list.listeners) fn(list.shells);
    } else if (msg.type === "approvals") {
      renderApprovals(msg.pending, msg.now - Date.now(), msg.decided || [], msg.decidedWindowMs || 0);
    } else if (msg.type === "vault") {
      vaultPushed(msg);
    } else if (msg.type === "error") {
      live.textContent = `list unavailable: ${msg.message}`; live.className = "live down";
    }
  };
  const lost = async (ev) => {
    dog.stop();
    live.textContent = ev.code === 1008 ? "signed out" : "reconnecting…";
    live.className = "live down";
    if (ev.code === 1008) { location.href = `${basePath()}/login`; return; }
    // A handshake the server refuses for want of a session (the token was replaced and the server
    // restarted) reaches the page as a bare 1006, like a server that is down: ask the API which.
    if (!opened && await signedOut()) {
      live.textContent = "signed out";
      location.href = `${basePath()}/login`;
      return;
    }
    setTimeout(() => connectEvents(Math.min(delay * 2, 8000)), delay);
  };
  ws.onclose = lost;
}

function matches(s) {
  const owner = $("#f-owner").value, st = $("#f-state").value, host = $("#f-host").value;
  const text = $("#f-text").value.trim().toLowerCase();
  if (owner && s.owner !== owner) return false;
  if (st && !s.states.includes(st)) return false;
  if (host && s.host !== host) return false;
  if (text) {
    const last = s.lastCommand ? s.lastCommand.text : "";
    const hay = [s.id, s.label, s.fg, s.cwd, s.ownerId, s.client || "", s.host, last].join(" ").toLowerCase();
    if (!hay.includes(text)) return false;
  }
  return true;
}

export const idleOf = (s) => (s.lastActivityMs ? Date.now() + list.skewMs - s.lastActivityMs : s.idleMs);

function renderHosts() {
  const sel = $("#f-host");
  const hosts = [...new Set(list.shells.map((s) => s.host))].sort();
  const have = $$("option", sel).slice(1).map((o) => o.value);
  if (hosts.join() === have.join()) return;
  const current = sel.value;
  sel.replaceChildren(el("option", { value: "" }, "any"), ...hosts.map((h) => el("option", { value: h }, h)));
  sel.value = hosts.includes(current) ? current : "";
}

function ownerCell(s) {
  const who = s.owner === "conversation" ? (s.client || "conversation") : s.owner;
  const sub = s.owner === "conversation" ? s.ownerId : null;
  return el("td", { title: s.owner === "conversation" ? `conversation ${s.ownerId}${s.client ? ` (${s.client})` : ""}` : s.owner },
    el("span", { class: "sub", style: "color:inherit;font-size:inherit" }, who), sub ? el("span", { class: "sub mono" }, sub) : null);
}

function shellRow(s) {
  const label = s.label && s.label !== s.id ? s.label : "";
  const open = el("button", { class: "open-btn", type: "button", "data-shell": s.id,
    "aria-label": `Open terminal of ${s.id}${label ? " " + label : ""}`, "aria-keyshortcuts": "Enter" }, s.id);
  const add = el("button", { class: "quiet add-btn", type: "button", "data-shell": s.id, "data-add": "1",
    title: "Add to the grid (+)", "aria-label": `Add ${s.id} to the terminal grid`, "aria-keyshortcuts": "+" }, "+");
  const last = s.lastCommand;
  const cmd = last ? `${last.text}` : (s.fg || "—");
  return el("tr", { "data-id": s.id, "aria-selected": list.selected.has(s.id) ? "true" : "false" },
    el("td", {}, open, add, label ? el("span", { class: "sub" }, label) : null,
      el("span", { class: "badge host", title: `host ${s.host}` }, s.host)),
    ownerCell(s),
    el("td", {}, s.states.filter((x) => x !== "unlocked" && !(x === "locked" && s.lockedBy))
      .map((x) => el("span", { class: `badge ${x}` }, x)),
      s.lockedBy ? el("span", { class: "badge locked", title: `locked by ${s.lockedBy}${s.lockReason ? ": " + s.lockReason : ""}; agents are refused` },
        `lock: ${s.lockedBy}`) : null),
    el("td", {}, el("span", { class: "sub mono", style: "color:inherit", title: cmd }, cmd),
      el("span", { class: "sub mono", title: s.cwd }, s.cwd || "")),
    el("td", { class: "idle mono", "data-id": s.id }, fmtIdle(idleOf(s))));
}

/* Bring a row already on the page up to date in place. Its buttons stay the same elements: a push
 * comes every second while an agent prints, and a row rebuilt between a person's mousedown and
 * mouseup on its button lost the click (and a focused button its focus). */
function updateRow(tr, fresh) {
  tr.setAttribute("aria-selected", fresh.getAttribute("aria-selected"));
  const [head, ...rest] = [...tr.children];
  const [freshHead, ...freshRest] = [...fresh.children];
  const [open, add, ...extra] = [...freshHead.childNodes];
  const keep = [head.querySelector(".open-btn"), head.querySelector(".add-btn")];
  for (const [old, now] of [[keep[0], open], [keep[1], add]]) {
    for (const a of ["aria-label", "title"]) if (now.hasAttribute(a)) old.setAttribute(a, now.getAttribute(a));
    if (old.textContent !== now.textContent) old.textContent = now.textContent;
  }
  for (const node of [...head.childNodes]) if (!keep.includes(node)) node.remove();
  head.append(...extra);
  rest.forEach((td, i) => { if (td.outerHTML !== freshRest[i].outerHTML) td.replaceWith(freshRest[i]); });
}

export function renderShells() {
  renderHosts();
  const body = $("#shells tbody");
  const rows = list.shells.filter(matches);
  const total = list.shells.length;
  $("#shell-count").textContent = `(${rows.length}${rows.length !== total ? ` of ${total}` : ""})`;
  $("#no-shells").hidden = rows.length > 0;
  const active = document.activeElement;
  const keep = active && active.closest && active.closest("#shells tbody") ? [active.dataset.shell, active.className] : null;
  const have = new Map([...body.children].map((tr) => [tr.dataset.id, tr]));
  const wanted = new Set(rows.map((s) => s.id));
  for (const [id, tr] of have) if (!wanted.has(id)) tr.remove();
  rows.forEach((s, i) => {
    const fresh = shellRow(s);
    let tr = have.get(s.id);
    if (tr) updateRow(tr, fresh); else tr = fresh;
    // Moved only when out of place (a move drops a press or a focus inside the row).
    if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
  });
  if (keep && !(document.activeElement && document.activeElement.closest && document.activeElement.closest("#shells tbody"))) {
    const again = $$(`#shells tbody [data-shell="${CSS.escape(keep[0])}"]`).find((b) => b.className === keep[1]);
    if (again) again.focus();
  }
}

setInterval(() => {  // idle times tick between pushes
  for (const cell of $$("#shells td.idle")) {
    const s = shellById(cell.dataset.id);
    if (s) cell.textContent = fmtIdle(idleOf(s));
  }
}, 1000);

/* Move the keyboard focus to the next (+1) or previous (-1) shell of the list. */
export function moveInList(step) {
  const buttons = $$("#shells tbody .open-btn");
  if (!buttons.length) return;
  const at = buttons.indexOf(document.activeElement.closest ? document.activeElement.closest("tr")?.querySelector(".open-btn") : null);
  const next = at < 0 ? (step > 0 ? 0 : buttons.length - 1) : Math.max(0, Math.min(buttons.length - 1, at + step));
  buttons[next].focus();
}

export function bindList({ open, add }) {
  for (const id of ["#f-owner", "#f-state", "#f-host", "#f-text"]) $(id).addEventListener("input", renderShells);
  $("#filters").onsubmit = (ev) => ev.preventDefault();
  $("#shells tbody").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr");
    if (!tr) return;
    if (ev.target.closest("[data-add]")) add(tr.dataset.id); else open(tr.dataset.id);
  });
}
