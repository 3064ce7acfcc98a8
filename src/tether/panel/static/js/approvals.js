/* Questions agents put to a person (a sandbox escalation, a guard block), pushed over
 * /panel/ws/events as {type: "approvals", pending}; shown on every view with Approve / Deny.
 *
 * A push updates the list in place: a question still pending keeps its item — the reason a person
 * is typing and the keyboard focus in it — and only questions that arrived or left are added or
 * removed. (Rebuilding every item wiped the reason and dropped the focus to the page, where the
 * next keys fired the panel's shortcuts.) */
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

export function renderApprovals(pending, skewMs) {
  $("#approvals").hidden = pending.length === 0;
  $("#approval-count").textContent = `(${pending.length})`;
  const ul = $("#approval-list");
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
}
