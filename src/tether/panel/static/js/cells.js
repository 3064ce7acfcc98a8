/* Terminals: one cell per shell, each a real tmux client behind /panel/ws/term/<id>, drawn by
 * xterm.js; one to four cells side by side, each with its own typing focus and lock state.
 *
 * A terminal whose socket is lost (the server restarted, the network dropped) reattaches by itself,
 * with a growing pause, for as long as the shell is listed; one the server ended on purpose (the
 * shell ended, its client was detached, an error) or the person detached stays closed. Keys typed
 * while no socket is open are not sent, and the cell says so. */
import { $, act, api, el, shellPath, shellsHash, wsBase } from "./util.js";
import { list, shellById, watchdog } from "./list.js";

export const MAX_CELLS = 4;
const RETRY_MS = 500, RETRY_MAX_MS = 8000;
// A paste goes in pieces: the server takes at most 1 Mi characters a message (MAX_INPUT_CHARS in
// terminal/endpoint.py) and the socket at most 16 MiB a frame; one message held the whole paste.
const INPUT_PIECE = 64 * 1024;
// Replies to tmux's own queries (device attributes, cursor reports, focus) are not a person typing.
const REPLY = /^(\x1b\[[?>]?[\d;]*[cRn]|\x1bP[\s\S]*\x1b\\|\x1b\][\s\S]*(\x07|\x1b\\)|\x1b\[[IO]|\x1b\[\?[\d;]*\$y)$/;
const ALT_SCREEN = (p) => p.length > 0 && p.every((x) => [47, 1047, 1049].includes(x));

export const grid = {
  cells: [],
  focused: null,
  onFocus: [],      // (cell) => … after the focused cell changes
  onLeave: null,    // () => … Ctrl+] in a terminal: where the keyboard goes
};

export class TermCell {
  constructor(id) {
    this.id = id;
    this.lastUserEventAt = 0;
    this.socket = null;
    this.disposed = false;
    this.retryMs = RETRY_MS;
    this.retryTimer = 0;
    this.status = "";     // the note's text, before any word on unsent keys
    this.unsent = 0;      // characters typed while no socket was open
    this.title = el("button", { class: "cell-title", type: "button", title: "Focus this terminal" }, id);
    this.state = el("span", { class: "cell-state" });
    this.lock = el("button", { class: "quiet cell-lock", type: "button", "aria-pressed": "false",
      "aria-keyshortcuts": "l" }, "Lock");
    this.close = el("button", { class: "quiet cell-close", type: "button", "aria-label": `Detach from ${id}`,
      title: "Detach (x)", "aria-keyshortcuts": "x" }, "×");
    this.body = el("div", { class: "cell-term", role: "region", "aria-label": `Terminal of ${id}; Ctrl+] leaves it` });
    this.note = el("p", { class: "cell-note note" });
    this.node = el("article", { class: "cell", "data-shell": id, "aria-label": `Terminal of ${id}` },
      el("header", { class: "cell-head" }, this.title, this.state, this.lock, this.close), this.body, this.note);
    this.title.onclick = () => { grid.focus(this); this.term.focus(); };
    this.lock.onclick = () => toggleLock(this.id);
    this.close.onclick = () => removeCell(this.id);
    this.node.addEventListener("mousedown", () => grid.focus(this), true);
    this.node.addEventListener("focusin", () => grid.focus(this));
  }

  mount(parent) {
    parent.append(this.node);
    const term = new Terminal({
      cursorBlink: true, scrollback: 10000, convertEol: false, allowProposedApi: true,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace', fontSize: 13,
      theme: { background: "#000000" },
    });
    this.fit = new FitAddon.FitAddon();
    this.search = new SearchAddon.SearchAddon();
    term.loadAddon(this.fit);
    term.loadAddon(this.search);
    term.loadAddon(new WebLinksAddon.WebLinksAddon());
    term.open(this.body);
    // tmux switches the outer terminal to the alternate screen, which has no scrollback; stay on the
    // normal screen so lines tmux scrolls off the top land in xterm's scrollback.
    term.parser.registerCsiHandler({ prefix: "?", final: "h" }, ALT_SCREEN);
    term.parser.registerCsiHandler({ prefix: "?", final: "l" }, ALT_SCREEN);
    const mark = () => { this.lastUserEventAt = performance.now(); };
    term.attachCustomKeyEventHandler((ev) => {
      if (ev.type === "keydown" && ev.ctrlKey && ev.key === "]") { if (grid.onLeave) grid.onLeave(this); return false; }
      mark(); return true;
    });
    this.body.addEventListener("paste", mark, true);
    this.body.addEventListener("mousedown", mark, true);
    term.onData((d) => this.send(d, false));
    term.onBinary((d) => this.send(d, true));
    term.onResize(({ cols, rows }) => this.sendSize(cols, rows));
    new ResizeObserver(() => { if (this.node.isConnected) this.fit.fit(); }).observe(this.body);
    this.term = term;
    this.connect();
  }

  setNote(text) {
    if (text === this.status) return;  // the same state again (another failed retry): keep its word on unsent keys
    this.status = text;
    this.unsent = 0;
    this.note.textContent = text;
  }

  send(data, binary) {
    const ws = this.socket;
    if (!ws || ws.readyState !== WebSocket.OPEN) {
      // Never lost silently: the person is told their keys did not reach the shell. (Replies to
      // tmux's queries need no word: a new client asks again.)
      if (!REPLY.test(data)) {
        this.unsent += data.length;
        this.note.textContent = `${this.status} — not sent: ${this.unsent} character${this.unsent === 1 ? "" : "s"} typed while not attached`;
      }
      return;
    }
    const typed = performance.now() - this.lastUserEventAt < 1000 && !REPLY.test(data);
    for (let at = 0; at < data.length;) {
      let end = Math.min(at + INPUT_PIECE, data.length);
      // Never between the two halves of a character outside the BMP (each would be sent as U+FFFD).
      if (end < data.length && /[\ud800-\udbff]/.test(data[end - 1])) end -= 1;
      ws.send(JSON.stringify({ type: "input", data: data.slice(at, end), binary: !!binary, typed }));
      at = end;
    }
  }

  sendSize(cols, rows) {
    const ws = this.socket;
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols, rows }));
  }

  connect(lost = false) {
    clearTimeout(this.retryTimer);
    const term = this.term;
    this.fit.fit();
    if (!lost) { this.node.classList.remove("closed"); this.setNote("attaching…"); }
    const ws = new WebSocket(`${wsBase()}/ws/term/${encodeURIComponent(this.id)}?cols=${term.cols}&rows=${term.rows}`);
    ws.binaryType = "arraybuffer";
    this.socket = ws;
    let painted = false, ended = false, every = 0;
    // Silent for three heartbeats: the socket is dead though the page still holds it open (a laptop
    // that slept, a dropped network) — keys typed into it would be lost. Treated as lost: attach again.
    const dog = watchdog(() => { ws.onclose = null; ws.close(); dropped({ code: 1006, reason: "" }); });
    ws.onopen = () => {
      dog.heard(every);  // a socket cut before its first ping is noticed too
      // The layout may have settled (and the terminal been refitted) while the socket opened: a
      // resize then went nowhere, and tmux would draw for the old size, the cursor off by rows.
      this.fit.fit();
      this.sendSize(term.cols, term.rows);
      this.retryMs = RETRY_MS;
      this.node.classList.remove("closed");
      this.setNote("attached: typing goes to the shell · Ctrl+] leaves the terminal");
      if (grid.focused === this) term.focus();
    };
    ws.onmessage = (ev) => {
      dog.heard(every);
      if (typeof ev.data !== "string") {
        // A new client paints the whole scrollback and screen: start from a clean terminal (kept
        // until then, so a lost connection leaves the last screen in view).
        if (!painted) { term.reset(); painted = true; }
        term.write(new Uint8Array(ev.data));
        return;
      }
      const msg = JSON.parse(ev.data);
      if (msg.type === "ping") { every = msg.every; dog.heard(every); return; }
      if (msg.type === "exit" || msg.type === "error") { ended = true; this.setNote(msg.message); this.node.classList.add("closed"); }
      else if (msg.type === "notice") this.note.textContent = msg.message;
    };
    const dropped = (ev) => {
      dog.stop();
      if (this.socket !== ws) return;  // detached by the person, or replaced
      this.socket = null;
      this.node.classList.add("closed");
      // The server said why it ended it (the shell ended, the client detached, an unknown shell,
      // an unwritable audit log), or closed it with a code of its own: stay closed.
      if (ended || ev.code === 1000 || ev.code >= 4000 || ev.code === 1011) {
        if (ev.reason) this.setNote(ev.reason);
        else if (!ended) this.setNote("detached");
        return;
      }
      this.setNote("connection lost; reconnecting…");
      this.retryTimer = setTimeout(() => this.reconnect(), this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, RETRY_MAX_MS);
    };
    ws.onclose = dropped;
  }

  /* Attach again after a lost connection, while the shell is still listed. */
  reconnect() {
    if (this.disposed || this.socket) return;
    if (list.loaded && !shellById(this.id)) { this.setNote(`${this.id} is no longer listed: not reconnecting`); return; }
    this.connect(true);
  }

  render(row) {
    const label = row && row.label && row.label !== this.id ? row.label : "";
    this.title.textContent = label ? `${this.id} · ${label}` : this.id;
    // A person's lock has its own badge (who holds it): "locked" would say it twice.
    const hidden = new Set(["unlocked", "attached", ...(row && row.lockedBy ? ["locked"] : [])]);
    const badges = row ? [el("span", { class: "badge host" }, row.host), ...row.states.filter((s) => !hidden.has(s))
      .map((s) => el("span", { class: `badge ${s}` }, s))] : [];
    if (row && row.lockedBy) badges.push(el("span", { class: "badge locked", title: row.lockReason || "" }, `lock: ${row.lockedBy}`));
    this.state.replaceChildren(...badges);
    const locked = !!(row && row.lockedBy);
    // A shell the list no longer has has ended: there is nothing to lock (locking its record
    // would hold a lock nobody sees).
    const gone = notRunning(this.id);
    this.lock.disabled = !!gone;
    if (gone) this.lock.title = gone; else this.lock.removeAttribute("title");
    this.lock.textContent = locked ? "Unlock" : "Lock";
    this.lock.setAttribute("aria-pressed", locked ? "true" : "false");
    this.lock.setAttribute("aria-label", `${locked ? "Unlock" : "Lock"} ${this.id}`);
  }

  dispose() {
    this.disposed = true;
    clearTimeout(this.retryTimer);
    if (this.socket) { const ws = this.socket; this.socket = null; ws.close(1000, "detach"); }
    if (this.term) this.term.dispose();
    this.node.remove();
  }
}

grid.focus = function (cell) {
  if (!cell || grid.focused === cell) return;
  grid.focused = cell;
  for (const c of grid.cells) c.node.classList.toggle("focused", c === cell);
  window.tetherTerm = cell.term;  // for the browser tests and the curious
  // In a narrow window the list comes first and the terminal below it: a terminal opened from
  // the list (Enter, a click) took the keys while it stayed out of sight, far down the page.
  cell.node.scrollIntoView({ block: "nearest" });
  for (const fn of grid.onFocus) fn(cell);
};

export const cellOf = (id) => grid.cells.find((c) => c.id === id);
export const shownIds = () => grid.cells.map((c) => c.id);

/* Make the grid show exactly ``ids`` (in order), keeping cells that stay. */
export function showCells(ids) {
  ids = [...new Set(ids)].slice(0, MAX_CELLS);
  for (const c of [...grid.cells]) if (!ids.includes(c.id)) { c.dispose(); grid.cells.splice(grid.cells.indexOf(c), 1); }
  const host = $("#grid");
  for (const id of ids) {
    let c = cellOf(id);
    if (!c) { c = new TermCell(id); grid.cells.push(c); c.mount(host); c.render(shellById(id)); }
    host.append(c.node);  // DOM order = ids order
  }
  grid.cells.sort((a, b) => ids.indexOf(a.id) - ids.indexOf(b.id));
  host.className = `grid n${Math.max(1, grid.cells.length)}`;
  $("#work").hidden = grid.cells.length === 0;
  if (!grid.cells.includes(grid.focused)) { grid.focused = null; if (grid.cells.length) grid.focus(grid.cells[grid.cells.length - 1]); }
  list.selected = new Set(ids);
  window.tetherTerms = Object.fromEntries(grid.cells.map((c) => [c.id, c.term]));
  for (const c of grid.cells) requestAnimationFrame(() => c.fit.fit());
}

const setHash = (ids) => { location.hash = shellsHash(ids); };

/* Open ``id`` in the focused cell's place (or alone when only one is shown). */
export function openCell(id) {
  const ids = shownIds();
  if (ids.includes(id)) {
    const c = cellOf(id);
    grid.focus(c); c.term.focus();
    if (!c.socket) c.connect();  // closed (or waiting to reconnect): choosing it attaches it now
    return;
  }
  if (ids.length <= 1) setHash([id]);
  else { ids[ids.indexOf(grid.focused.id)] = id; setHash(ids); }
}

export function addCell(id) {
  const ids = shownIds();
  if (ids.includes(id)) { grid.focus(cellOf(id)); return; }
  if (ids.length >= MAX_CELLS) { act("Add to grid", async () => { throw new Error(`the grid holds ${MAX_CELLS} terminals; detach one first (x)`); }); return; }
  setHash([...ids, id]);
}

export function removeCell(id) { setHash(shownIds().filter((x) => x !== id)); }

/* Why ``id`` cannot be locked or unlocked now (the live list no longer has it), or null. Before
 * the first push nothing is known: the server answers for itself. */
function notRunning(id) {
  return list.loaded && !shellById(id) ? `shell ${id} is not running (it ended or was closed): there is nothing to lock` : null;
}

export function toggleLock(id) {
  const gone = notRunning(id);
  if (gone) return act("Lock", async () => { throw new Error(gone); });
  const s = shellById(id);
  const unlocking = !!(s && s.lockedBy);
  return act(unlocking ? "Unlock" : "Lock", () => api("POST", shellPath(id, unlocking ? "unlock" : "lock"), {}));
}

list.listeners.push(() => { for (const c of grid.cells) c.render(shellById(c.id)); });
