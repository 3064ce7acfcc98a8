/* Questions agents put to a person (a sandbox escalation, a guard block), pushed over
 * /panel/ws/events as {type: "approvals", pending}; shown on every view with Approve / Deny.
 *
 * A push updates the list in place: a question still pending keeps its item — the reason a person
 * is typing and the keyboard focus in it — and only questions that arrived or left are added or
 * removed. (Rebuilding every item wiped the reason and dropped the focus to the page, where the
 * next keys fired the panel's shortcuts.) A question that left is listed under "Decided lately"
 * with who decided it and when, on every page — not only on the page that answered. */
import { $, act, api, el } from "./util.js";

function item(a) {
  const reason = el("input", { type: "text", name: "reason", maxlength: 500, placeholder: "your words (optional)", "aria-label": "Reason" });
  const answer = (approve) => act(approve ? "Approve" : "Deny", async () => {
    const out = await api("POST", `approvals/${encodeURIComponent(a.id)}`, { approve, reason: reason.value });
    return { message: `${out.status}: ${a.subject}` };
  });
  const what = a.kind === "bypass-guard" ? `guard rule ${a.mode}` : `sandbox ${a.mode}`;
  return el("li", { class: "approval", "data-id": a.id },
    el("p", {}, a.question),
    el("p", { class: "note approval-when", "data-tool": a.tool, "data-what": what }),
    el("div", { class: "approval-actions" }, reason,
      el("button", { type: "button", class: "approve", onclick: () => answer(true) }, "Approve"),
      el("button", { type: "button", class: "danger deny", onclick: () => answer(false) }, "Deny")));
}

/* A question no longer pending, as every page shows it for a while (``decidedWindowMs``): what
 * became of it, by whom and when — the page that answered and every other page alike. */
function decidedItem(d, skewMs) {
  const when = d.decidedMs ? new Date(d.decidedMs - skewMs).toLocaleTimeString() : "?";
  return el("li", { class: `approval decided decided-${d.status}`, "data-id": d.id, tabindex: "-1" },
    el("p", {}, el("strong", {}, d.id), ` ${d.outcome} · ${when}`),
    el("p", { class: "note" }, `${d.tool} · ${d.mode} · ${d.subject}`));
}

const last = { pending: [], decided: [], skewMs: 0, windowMs: 0 };

export function renderApprovals(pending, skewMs, decided = [], windowMs = 0) {
  Object.assign(last, { pending, decided, skewMs, windowMs });
  const ul = $("#approval-list");
  const active = document.activeElement;
  const focusIn = active && ul.contains(active) ? active.closest("li") : null;
  const have = new Map([...ul.children].map((li) => [li.dataset.id, li]));
  const wanted = new Set(pending.map((a) => a.id));
  for (const [id, li] of have) if (!wanted.has(id)) li.remove();
  // New items go after the previous pending one; items already shown are never moved (moving a
  // node out of the document and back would drop the focus inside it).
  let prev = null;
  for (const a of pending) {
    let li = have.get(a.id);
    if (!li) {
      li = item(a);
      if (prev) prev.after(li); else ul.prepend(li);
    }
    const when = li.querySelector(".approval-when");
    const until = new Date(a.expiresMs - skewMs).toLocaleTimeString();
    when.textContent = `${when.dataset.tool} · ${when.dataset.what} · refused at ${until} if nobody answers`;
    prev = li;
  }
  showSection(renderDecided());
  $("#approval-count").textContent = `(${pending.length})`;
  // The question whose buttons had the keyboard focus was answered (here or on another page): the
  // focus goes to its outcome, not to the page (where the next keys would fire the shortcuts).
  if (focusIn && !focusIn.isConnected) {
    const to = $(`#approval-decided li[data-id="${CSS.escape(focusIn.dataset.id)}"]`)
      || $("#approval-list li button") || $("#approvals-h");
    to.focus();
  }
}

function showSection(decidedShown) {
  const box = $("#approvals");
  box.hidden = last.pending.length === 0 && decidedShown === 0;
  box.classList.toggle("only-decided", last.pending.length === 0);  // nothing waits: no alarm
}

/* The decided list: those the server listed, less the ones older than its window by now. */
function renderDecided() {
  const now = Date.now() + last.skewMs;
  const fresh = last.decided.filter((d) => !last.windowMs || (d.decidedMs || 0) + last.windowMs > now);
  const ul = $("#approval-decided");
  const have = new Map([...ul.children].map((li) => [li.dataset.id, li]));
  const wanted = new Set(fresh.map((d) => d.id));
  for (const [id, li] of have) if (!wanted.has(id)) li.remove();
  let prev = null;
  for (const d of fresh) {
    let li = have.get(d.id);
    if (!li) {
      li = decidedItem(d, last.skewMs);
      if (prev) prev.after(li); else ul.prepend(li);
    }
    prev = li;
  }
  $("#decided-h").hidden = fresh.length === 0;
  return fresh.length;
}

setInterval(() => {  // a decision leaves every page once its window has passed
  if (last.decided.length) showSection(renderDecided());
}, 5000);
