/* Questions agents put to a person (a sandbox escalation, a guard block), pushed over
 * /panel/ws/events as {type: "approvals", pending}; shown on every view with Approve / Deny. */
import { $, act, api, el } from "./util.js";

export function renderApprovals(pending, skewMs) {
  $("#approvals").hidden = pending.length === 0;
  $("#approval-count").textContent = `(${pending.length})`;
  $("#approval-list").replaceChildren(...pending.map((a) => {
    const reason = el("input", { type: "text", name: "reason", maxlength: 500, placeholder: "your words (optional)", "aria-label": "Reason" });
    const answer = (approve) => act(approve ? "Approve" : "Deny", async () => {
      const out = await api("POST", `approvals/${encodeURIComponent(a.id)}`, { approve, reason: reason.value });
      return { message: `${out.status}: ${a.subject}` };
    });
    const until = new Date(a.expiresMs - skewMs).toLocaleTimeString();
    const what = a.kind === "bypass-guard" ? `guard rule ${a.mode}` : `sandbox ${a.mode}`;
    return el("li", { class: "approval", "data-id": a.id },
      el("p", {}, a.question),
      el("p", { class: "note" }, `${a.tool} · ${what} · refused at ${until} if nobody answers`),
      el("div", { class: "approval-actions" }, reason,
        el("button", { type: "button", class: "approve", onclick: () => answer(true) }, "Approve"),
        el("button", { type: "button", class: "danger deny", onclick: () => answer(false) }, "Deny")));
  }));
}
