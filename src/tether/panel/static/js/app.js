/* tether panel — plain JS modules, no framework.
 *
 * Views: #/shells[/<id>[,<id>…]] (one terminal, or a grid of up to four), #/audit, #/vault. The shell
 * list and the vault's listing (vault.js) arrive by push over /panel/ws/events; each terminal is a
 * real tmux client behind /panel/ws/term/<id>, drawn by xterm.js. Every action is a same-origin JSON POST to /panel/api/…
 * (the server makes it a tool call, audited as source "panel"). A later view (the approvals queue
 * of confined shells) is one more entry in VIEWS with its section in index.html.
 */
import { $, $$, act, api, basePath, el, promptFor, shellPath, shellsHash, toast } from "./util.js";
import { bindList, connectEvents, list, moveInList, renderShells, shellById } from "./list.js";
import { addCell, grid, openCell, removeCell, showCells, shownIds, toggleLock } from "./cells.js";
import { bindTools, closeTools, copySelection, openTool, replay, searchStep, toolOpen } from "./tools.js";
import { bindPlayer } from "./player.js";
import { bindKeys, shortcut, showHelp } from "./keys.js";
import { loadVault } from "./vault.js";

const VIEWS = { shells: () => loadWorkspaces(), audit: () => loadAudit(), vault: () => loadVault() };

/* An id of the hash as typed when it is not valid percent-encoding (`#/shells/%`): such an id is
 * then refused like any invalid one, in its cell, instead of the page stopping on a URIError. */
function decoded(text) {
  try { return decodeURIComponent(text); } catch { return text; }
}

function route() {
  // Everything after `#/shells/` is the grid's ids (shellsHash): split at the commas, then each
  // decoded, so an encoded "/" or "," stays inside its id.
  const [, view = "shells", ...rest] = location.hash.split("/");
  const arg = rest.join("/");
  const name = view in VIEWS ? view : "shells";
  for (const v of Object.keys(VIEWS)) $(`#view-${v}`).hidden = v !== name;
  for (const a of $$(".top nav a")) {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  if (name === "shells") {
    const ids = arg.split(",").filter(Boolean).map(decoded);
    const had = shownIds().join();
    showCells(ids);
    if (ids.join() !== had && grid.focused) grid.focused.term.focus();
    if (!ids.length) closeTools();
    renderShells();
    renderFocusHead();
  }
  VIEWS[name]();
}

/* ---------- the focused terminal's head and actions ---------- */

function renderFocusHead() {
  const c = grid.focused;
  if (!c) return;
  const s = shellById(c.id);
  $("#focus-title").textContent = s && s.label && s.label !== c.id ? `${c.id} · ${s.label}` : c.id;
}
grid.onFocus.push(renderFocusHead);
list.listeners.push(renderFocusHead);

grid.onLeave = (cell) => {
  // The id comes from the address (any text): escaped, so a quote in it cannot break the selector.
  const btn = document.querySelector(`#shells [data-shell="${CSS.escape(cell.id)}"].open-btn`) || cell.title;
  btn.focus();
};

function focused() { return grid.focused ? grid.focused.id : null; }

function bindActions() {
  $("#act-rename").onclick = async () => {
    const id = focused(); if (!id) return;
    const s = shellById(id);
    const name = await promptFor(`Rename ${id}`, "New label (≤ 32 characters)", s ? s.label : "");
    if (name !== null) act("Rename", () => api("POST", shellPath(id, "rename"), { name }));
  };
  $("#act-snapshot").onclick = () => { const id = focused(); if (id) act("Snapshot", () => api("POST", shellPath(id, "snapshot"), {})); };
  $("#act-close").onclick = async () => {
    const id = focused(); if (!id) return;
    if (!confirm(`Close ${id}? Its process is ended (a snapshot is kept).`)) return;
    const out = await act("Close", () => api("POST", shellPath(id, "close"), {}));
    if (out) removeCell(id);
  };
  $("#act-list").onclick = toggleList;
  $("#new-shell").onsubmit = async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const out = await act("Open shell", () => api("POST", "shells", { label: f.get("label"), cwd: f.get("cwd") }));
    if (out && out.id) { ev.target.reset(); $("#new-shell-box").open = false; openCell(out.id); }
  };
  $("#restore-ws").onsubmit = (ev) => {
    ev.preventDefault();
    const name = new FormData(ev.target).get("name");
    if (name) act("Restore workspace", () => api("POST", `workspaces/${encodeURIComponent(name)}/restore`, {}));
  };
  $("#logout").onsubmit = signOut;
  showSignedIn();
  $("#audit-filters").onsubmit = (ev) => { ev.preventDefault(); loadAudit(); };
  $("#audit-verify").onclick = verifyAudit;
  window.addEventListener("hashchange", route);
}

/* Who this page acts as: a person signed in with access of their own is named in the header (the
 * audit log, the approvals and the locks name them too); the serve token's person is not. */
async function showSignedIn() {
  try {
    const { who } = await api("GET", "me");
    const box = $("#signed-in");
    box.textContent = who ? `signed in as ${who}` : "";
    box.hidden = !who;
  } catch { /* the header just does not say it */ }
}

/* Sign out by fetch, not by the form's own post: the page is served with Referrer-Policy:
 * no-referrer, under which a browser posts a form with `Origin: null` — refused by the server, as
 * any opaque origin must be. A fetch with a same-origin referrer policy says where it comes from. */
async function signOut(ev) {
  ev.preventDefault();
  try {
    const res = await fetch(`${basePath()}/logout`, { method: "POST", credentials: "same-origin", referrerPolicy: "same-origin" });
    if (!res.ok) throw new Error(`${res.status} ${(await res.text()).slice(0, 200)}`);
    location.href = `${basePath()}/login`;
  } catch (e) { toast(`Sign out: ${e.message}`, true); }
}

function toggleList() {
  const wide = $("#view-shells").classList.toggle("wide");
  $("#act-list").setAttribute("aria-pressed", wide ? "true" : "false");
}

function focusCell(n) {
  const c = grid.cells[n];
  if (c) { grid.focus(c); c.term.focus(); }
}

function bindShortcuts() {
  const row = () => document.activeElement && document.activeElement.closest && document.activeElement.closest("#shells tbody tr");
  shortcut("?", "show this list", showHelp);
  shortcut("g s", "go to the shells", () => { location.hash = shellsHash(shownIds()); });
  shortcut("g a", "go to the audit log", () => { location.hash = "#/audit"; });
  shortcut("g v", "go to the vault", () => { location.hash = "#/vault"; });
  shortcut("/", "filter the shell list", () => { location.hash.startsWith("#/shells") || (location.hash = "#/shells"); $("#f-text").focus(); });
  shortcut("j", "next shell in the list", () => moveInList(1));
  shortcut("k", "previous shell in the list", () => moveInList(-1));
  shortcut("Enter", "open the shell (in the list) in the focused terminal", () => { const r = row(); if (r) openCell(r.dataset.id); });
  shortcut("+", "add the shell (in the list) to the grid — up to four side by side", () => { const r = row(); if (r) addCell(r.dataset.id); });
  shortcut("n", "new shell", () => { $("#new-shell-box").open = true; $('#new-shell input[name="label"]').focus(); });
  for (const n of [1, 2, 3, 4]) shortcut(String(n), `type into terminal ${n} of the grid`, () => focusCell(n - 1));
  shortcut("i", "type into the focused terminal", () => grid.focused && grid.focused.term.focus());
  shortcut("l", "lock or unlock the focused shell (agents are refused while locked)", () => focused() && toggleLock(focused()));
  shortcut("x", "detach the focused terminal", () => focused() && removeCell(focused()));
  shortcut("t", "the focused shell's command timeline (Enter on a command: jump to its output; y: copy it)", () => openTool("timeline"));
  shortcut("f", "search the focused shell's whole history (Enter: next, Shift+Enter: previous)", () => openTool("search"));
  shortcut("F3", "next search match", () => searchStep(1));
  shortcut("c", "copy the terminal's selection (or its screen when nothing is selected)", () => copySelection());
  shortcut("r", "recordings: export or replay", () => openTool("record"));
  shortcut("p", "replay the focused shell's recording (Space: pause, 1/4: speed, 0: restart)", () => replay());
  shortcut("b", "hide or show the shell list (wider terminals)", toggleList);
  shortcut("Escape", "close the tools", () => { if (toolOpen()) closeTools(); });
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
        el("td", { class: "mono" }, r.actor, r.client ? el("span", { class: "sub" }, r.client) : null),
        el("td", {}, r.source),
        el("td", {}, `${r.tool} ${r.action}`),
        el("td", { class: "mono" }, r.targets.join(", ")),
        el("td", { class: "mono" },
          bypass ? el("span", { class: "badge bypass", title: "dangerous-command guard bypassed" }, "bypass-guard") : null,
          r.command ?? "", r.detail ? el("span", { class: "sub" }, r.detail) : null,
          r.reason ? el("span", { class: "sub" }, `reason: ${r.reason}`) : null),
        el("td", { class: `outcome-${r.outcome}` }, r.outcome,
          r.extra && typeof r.extra.cause === "string" ? el("span", { class: "sub" }, r.extra.cause) : null));
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

/* ---------- start ---------- */

function start() {
  bindList({ open: openCell, add: addCell });
  bindActions();
  bindTools();
  bindPlayer();
  bindKeys();
  bindShortcuts();
  connectEvents();
  if (!location.hash) location.hash = "#/shells";
  route();
}

// Module scripts run after the deferred vendor scripts (xterm.js and its addons) have run.
if (document.readyState === "loading") window.addEventListener("DOMContentLoaded", start); else start();
