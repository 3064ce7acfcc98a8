/* The tools of the focused terminal: its command timeline (jump to a command's output, copy it),
 * search in its whole history (the exact log, not only the scrollback), copy, and recordings. */
import { $, $$, act, api, copyText, el, escapeRegex, fmtClock, fmtDuration, highlighted, shellPath, toast } from "./util.js";
import { grid } from "./cells.js";
import { list, shellById } from "./list.js";
import { playCast } from "./player.js";

const tools = { tab: null, timeline: [], timelineFor: null, lastSeen: "", search: null };

/* ---------- the drawer ---------- */

export function openTool(tab) {
  if (!grid.focused) { toast("Open a terminal first (choose a shell in the list)", true); return; }
  tools.tab = tab;
  $("#drawer").hidden = false;
  for (const t of ["timeline", "search", "record"]) {
    $(`#panel-${t}`).hidden = t !== tab;
    $(`#tab-${t}`).setAttribute("aria-selected", t === tab ? "true" : "false");
    $(`#tab-${t}`).tabIndex = t === tab ? 0 : -1;
  }
  for (const [t, btn] of [["timeline", "#act-timeline"], ["search", "#act-search"], ["record", "#act-record"]]) {
    $(btn).setAttribute("aria-pressed", t === tab ? "true" : "false");
  }
  if (tab === "timeline") { loadTimeline(); $("#panel-timeline").focus(); }
  if (tab === "search") { const q = $("#search-q"); q.focus(); q.select(); }
  if (tab === "record") $("#record-export").focus();
}

export function closeTools() {
  tools.tab = null;
  $("#drawer").hidden = true;
  for (const b of ["#act-timeline", "#act-search", "#act-record"]) $(b).setAttribute("aria-pressed", "false");
  if (grid.focused) grid.focused.term.focus();
}

export const toolOpen = () => tools.tab;

/* ---------- timeline ---------- */

/* Beside the author's badge: an agent's client, or who pressed Enter on a line a person typed at
   the panel (typist "panel:alice", or "panel" for whoever holds the serve token). */
function byText(c) {
  if (c.authorKind === "conversation") return c.client ? `${c.client}` : c.by;
  if (c.typist) return c.typist.startsWith("panel:") ? c.typist.slice(6) : "at the panel";
  return "";
}

function byTitle(c) {
  if (c.authorKind === "conversation") return `conversation ${c.by}${c.client ? ` (${c.client})` : ""}`;
  return c.typist ? `${c.by}: ${byText(c)} pressed Enter` : c.by;
}

function exitCell(c) {
  if (c.endedMs === null) return el("td", { class: "exit-run" }, "running");
  return el("td", { class: c.exitCode === 0 ? "exit-ok" : "exit-bad", title: `exit status ${c.exitCode}` },
    c.exitCode === 0 ? "✓ 0" : `✗ ${c.exitCode}`);
}

export async function loadTimeline() {
  const cell = grid.focused;
  if (!cell) return;
  const id = cell.id;
  try {
    const out = await api("GET", shellPath(id, "timeline"));
    if (!grid.focused || grid.focused.id !== id) return;
    tools.timeline = out.commands;
    tools.timelineFor = id;
    renderTimeline();
  } catch (e) {
    if (!grid.focused || grid.focused.id !== id) return;
    // No rows rather than the previous shell's rows under this shell's name.
    tools.timeline = [];
    tools.timelineFor = id;
    $("#timeline tbody").replaceChildren();
    $("#output-view").hidden = true;
    $("#timeline-note").textContent = `${id}: ${e.message}`;
  }
}

function renderTimeline() {
  const rows = tools.timeline.slice().reverse();  // newest first
  // Rows are rebuilt on every push: the row a person moved to keeps the keyboard focus.
  const focused = document.activeElement?.closest?.("#timeline tbody tr")?.dataset.index;
  $("#timeline-note").textContent = rows.length
    ? `${rows.length} command${rows.length === 1 ? "" : "s"} in ${tools.timelineFor}, newest first — Enter or a click jumps to the output`
    : `${tools.timelineFor} has run no command yet`;
  $("#timeline tbody").replaceChildren(...rows.map((c) => {
    const who = el("td", { title: byTitle(c) },
      el("span", { class: `badge ${c.authorKind}` }, c.authorKind === "conversation" ? "agent" : c.by), " ", byText(c));
    const jump = el("button", { type: "button", class: "quiet", "aria-label": `Jump to the output of ${c.text}` }, "Jump");
    const copy = el("button", { type: "button", class: "quiet", "aria-label": `Copy the output of ${c.text}` }, "Copy");
    jump.onclick = (ev) => { ev.stopPropagation(); jumpTo(c); };
    copy.onclick = (ev) => { ev.stopPropagation(); copyOutput(c); };
    const tr = el("tr", { tabindex: "0", "data-index": c.index, "aria-label": `${c.text}, exit ${c.exitCode ?? "running"}, by ${c.by}${c.typist ? ` (${byText(c)})` : ""}` },
      el("td", { class: "mono", title: new Date(c.startedMs).toISOString() }, fmtClock(c.startedMs)),
      el("td", { class: "mono" }, fmtDuration(c.durationMs)), exitCell(c), who,
      el("td", { class: "mono", title: c.text }, c.text), el("td", {}, jump, " ", copy));
    tr.onclick = () => jumpTo(c);
    tr.onkeydown = (ev) => {
      if (ev.key === "Enter") { ev.preventDefault(); jumpTo(c); }
      else if (ev.key === "ArrowDown" || ev.key === "j") { ev.preventDefault(); tr.nextElementSibling?.focus(); }
      else if (ev.key === "ArrowUp" || ev.key === "k") { ev.preventDefault(); tr.previousElementSibling?.focus(); }
      else if (ev.key === "y") { ev.preventDefault(); copyOutput(c); }
    };
    return tr;
  }));
  if (focused !== undefined) $(`#timeline tbody tr[data-index="${focused}"]`)?.focus();
}

/* Scroll the terminal to where ``text`` was typed (the n-th such line from the bottom); true when found. */
function revealLine(cell, needle, nth) {
  const term = cell.term, buf = term.buffer.active;
  const probe = needle.split("\n")[0].trim().slice(0, 120);
  if (!probe) return false;
  let seen = 0;
  for (let y = buf.length - 1; y >= 0; y--) {
    const line = buf.getLine(y);
    if (!line || !line.translateToString(true).includes(probe)) continue;
    if (seen++ < nth) continue;
    term.scrollToLine(Math.max(0, y - 1));
    term.select(0, y, term.cols);
    return true;
  }
  return false;
}

async function fetchOutput(c) {
  return api("POST", shellPath(tools.timelineFor, "output"), { start: c.outputStart, end: c.outputEnd });
}

async function jumpTo(c) {
  const cell = grid.focused;
  if (!cell) return;
  for (const tr of $$("#timeline tbody tr")) tr.classList.toggle("current", Number(tr.dataset.index) === c.index);
  const later = tools.timeline.filter((x) => x.index > c.index && x.text.trim() === c.text.trim()).length;
  const inTerm = revealLine(cell, c.text, later);
  try {
    const out = await fetchOutput(c);
    $("#output-view").hidden = false;
    $("#output-title").textContent = `Output of ${c.text}`;
    $("#output-text").textContent = out.text;
    $("#output-copy").onclick = () => copyOutput(c);
    $("#output-note").textContent = (inTerm ? "Shown in the terminal too (selected)." :
      "No longer in the terminal's scrollback: from the shell's log.") +
      (out.dropped ? ` The first ${out.dropped} lines are left out.` : "");
  } catch (e) { toast(`Output: ${e.message}`, true); }
}

async function copyOutput(c) {
  await act("Copy output", async () => {
    const out = await fetchOutput(c);
    await copyText(out.text);
    return { message: `copied the output of ${c.text} (${out.total} line${out.total === 1 ? "" : "s"})` };
  });
}

/* ---------- copy ---------- */

export async function copySelection() {
  const cell = grid.focused;
  if (!cell) return;
  let text = cell.term.getSelection();
  let what = "the selection";
  if (!text) {  // nothing selected: the screen (so copying works without a mouse)
    const buf = cell.term.buffer.active, lines = [];
    for (let y = buf.viewportY; y < buf.viewportY + cell.term.rows; y++) lines.push(buf.getLine(y)?.translateToString(true) ?? "");
    text = lines.join("\n").replace(/\s+$/, "");
    what = "the screen";
  }
  await act("Copy", async () => { await copyText(text); return { message: `copied ${what} (${text.length} characters)` }; });
}

/* ---------- search the whole history ---------- */

function searchRegex(q, isRegex) {
  try { return new RegExp(isRegex ? q : escapeRegex(q), "g"); } catch { return null; }
}

async function loadSearchPage(s, offset) {
  const out = await api("POST", shellPath(s.shell, "search"), { pattern: s.q, regex: s.regex, offset, context: 1 });
  s.total = out.total;
  s.next = out.next;
  s.hits.push(...out.hits);
}

/* One step at a time: a step taken while a page of matches is loading waits for it. (Two at once
 * both loaded the next page and listed its matches twice — "match 261 of 251" — and a step before
 * a new query's first answer said "no match".) */
let searching = Promise.resolve();
export function searchStep(step) {
  searching = searching.then(() => stepOnce(step)).catch((e) => { $("#search-note").textContent = e.message; });
  return searching;
}

async function stepOnce(step) {
  const cell = grid.focused;
  const q = $("#search-q").value;
  if (!cell || !q) return;
  const regex = $("#search-regex").checked;
  let s = tools.search;
  try {
    if (!s || s.q !== q || s.regex !== regex || s.shell !== cell.id) {
      s = tools.search = { q, regex, shell: cell.id, hits: [], total: 0, next: null, at: -1 };
      $("#search-note").textContent = "searching…";
      $("#search-hits").replaceChildren();
      await loadSearchPage(s, 0);
      const re = searchRegex(q, regex);
      if (re) cell.search.findNext(q, { regex, decorations: { matchOverviewRuler: "#ffe08a", activeMatchColorOverviewRuler: "#ff9900",
        matchBackground: "#7a5d00", activeMatchBackground: "#ff9900" } });
      s.at = step > 0 ? 0 : s.hits.length - 1;
    } else {
      let at = s.at + step;
      if (at >= s.hits.length && s.next !== null) await loadSearchPage(s, s.next);
      if (at >= s.hits.length) at = 0;  // wrap around
      if (at < 0) at = s.hits.length - 1;
      s.at = at;
    }
  } catch (e) {
    if (tools.search === s) $("#search-note").textContent = e.message;
    return;
  }
  if (tools.search === s) renderSearch();  // not when another terminal took the focus meanwhile
}

function renderSearch() {
  const s = tools.search;
  const re = searchRegex(s.q, s.regex);
  if (!s.total) {
    $("#search-note").textContent = `no match for ${s.q} in ${s.shell}'s whole history`;
    $("#search-hits").replaceChildren();
    return;
  }
  const hit = s.hits[s.at];
  $("#search-note").textContent = `match ${s.at + 1} of ${s.total} in the whole history (line ${hit.line})`;
  $("#search-hits").replaceChildren(...s.hits.map((h, i) => el("li", { class: i === s.at ? "current" : null, "data-line": h.line },
    ...h.before.map((c) => el("pre", { class: "ctx" }, el("span", { class: "ln" }, c.line), c.text)),
    el("pre", {}, el("span", { class: "ln" }, h.line), ...highlighted(h.text, re)),
    ...h.after.map((c) => el("pre", { class: "ctx" }, el("span", { class: "ln" }, c.line), c.text)))));
  const current = $("#search-hits li.current");
  if (current) current.scrollIntoView({ block: "nearest" });
  if (grid.focused) revealLine(grid.focused, hit.text, s.hits.slice(s.at + 1).filter((h) => h.text === hit.text).length);
}

/* ---------- recordings ---------- */

async function fetchCast() {
  const id = grid.focused.id;
  $("#record-note").textContent = "reading the recording…";
  const out = await api("POST", shellPath(id, "recording"), {});
  $("#record-note").textContent = `${out.events} output events over ${Number(out.durationS).toFixed(1)} s; vault values masked`;
  return { id, cast: out.cast };
}

async function exportCast() {
  if (!grid.focused) return;
  await act("Export recording", async () => {
    const { id, cast } = await fetchCast();
    const url = URL.createObjectURL(new Blob([cast], { type: "application/x-asciicast" }));
    const a = el("a", { href: url, download: `${id}.cast` });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    return { message: `saved ${id}.cast` };
  });
}

export async function replay() {
  if (!grid.focused) return;
  try {
    const { id, cast } = await fetchCast();
    playCast(cast, `Replay of ${id}`);
  } catch (e) { toast(`Replay: ${e.message}`, true); }
}

/* ---------- wiring ---------- */

export function bindTools() {
  $("#act-timeline").onclick = () => (tools.tab === "timeline" ? closeTools() : openTool("timeline"));
  $("#act-search").onclick = () => (tools.tab === "search" ? closeTools() : openTool("search"));
  $("#act-record").onclick = () => (tools.tab === "record" ? closeTools() : openTool("record"));
  $("#act-copy").onclick = copySelection;
  for (const t of ["timeline", "search", "record"]) $(`#tab-${t}`).onclick = () => openTool(t);
  $(".drawer-tabs").addEventListener("keydown", (ev) => {
    const order = ["timeline", "search", "record"];
    if (ev.key !== "ArrowRight" && ev.key !== "ArrowLeft") return;
    const next = order[(order.indexOf(tools.tab) + (ev.key === "ArrowRight" ? 1 : 2)) % 3];
    openTool(next); $(`#tab-${next}`).focus();
  });
  $("#drawer-close").onclick = closeTools;
  $("#output-hide").onclick = () => { $("#output-view").hidden = true; };
  $("#search-form").onsubmit = (ev) => { ev.preventDefault(); searchStep(1); };
  $("#search-prev").onclick = () => searchStep(-1);
  $("#search-q").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && ev.shiftKey) { ev.preventDefault(); searchStep(-1); }
  });
  $("#record-export").onclick = exportCast;
  $("#record-play").onclick = replay;
  grid.onFocus.push(() => {
    tools.search = null;
    $("#search-hits").replaceChildren(); $("#search-note").textContent = "";
    $("#output-view").hidden = true;
    if (tools.tab === "timeline") loadTimeline();
  });
  // The list is pushed when a shell's state or last command changes: the timeline follows it.
  list.listeners.push(() => {
    if (tools.tab !== "timeline" || !grid.focused) return;
    const s = shellById(grid.focused.id);
    const seen = JSON.stringify(s ? [s.lastCommand, s.states] : null);
    if (seen !== tools.lastSeen) { tools.lastSeen = seen; loadTimeline(); }
  });
}
