/* The vault view: groups (lock state, how many secrets) and secret names — never a value. Filled
 * when the view opens and pushed over /panel/ws/events as {type: "vault", groups, items} whenever
 * the vault changes, whoever changed it (`tether vault set` at a terminal, an unlock, its expiry).
 *
 * A push rebuilds only the groups whose state changed: a passphrase a person is typing into
 * another group's unlock form keeps its text and the keyboard focus. */
import { $, act, api, el, toast } from "./util.js";

/* A row is rebuilt when its group or the unlock lengths config.toml allows change. */
const stateOf = (g, out) => JSON.stringify([g.protected, g.locked, g.unlockedUntilMs, g.items,
  out.unlockMinutes, out.maxUnlockMinutes]);

function groupRow(g, out) {
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
      el("label", {}, "Minutes", el("input", { type: "number", name: "minutes", min: 1, max: out.maxUnlockMinutes,
        value: out.unlockMinutes, style: "width:5em" })),
      el("button", { type: "submit" }, "Unlock"));
  } else if (g.protected) {
    action = el("button", { type: "button", onclick: async () => {
      if (await act(`Lock ${g.name}`, () => api("POST", `vault/${encodeURIComponent(g.name)}/lock`, {}))) loadVault();
    } }, "Lock now");
  }
  const st = !g.protected ? "no passphrase" : g.locked ? "locked"
    : `unlocked until ${new Date(g.unlockedUntilMs).toLocaleTimeString()}`;
  return el("tr", { "data-group": g.name, "data-state": stateOf(g, out) }, el("td", { class: "mono" }, g.name), el("td", {}, g.items),
    el("td", {}, el("span", { class: `badge ${g.locked ? "locked" : "idle"}` }, st)), el("td", {}, action));
}

export function renderVault(out) {
  $("#no-vault").hidden = out.groups.length > 0;
  $("#vault-groups").hidden = out.groups.length === 0;
  const body = $("#vault-groups tbody");
  const have = new Map([...body.children].map((tr) => [tr.dataset.group, tr]));
  const wanted = new Map(out.groups.map((g) => [g.name, stateOf(g, out)]));
  for (const [name, tr] of have) if (wanted.get(name) !== tr.dataset.state) { tr.remove(); have.delete(name); }
  // New rows go after the previous group; rows kept are never moved (that would drop a focus inside).
  let prev = null;
  for (const g of out.groups) {
    let tr = have.get(g.name);
    if (!tr) {
      tr = groupRow(g, out);
      if (prev) prev.after(tr); else body.prepend(tr);
    }
    prev = tr;
  }
  $("#vault-items").replaceChildren(...out.items.map((i) =>
    el("li", { title: `group ${i.group}${i.locked ? " (locked)" : ""}` }, `${i.name}`, el("span", { class: "sr-only" }, ` in ${i.group}`))));
}

/* A push: the listing, or why it cannot be read (said once, while the vault view is open). */
export function vaultPushed(msg) {
  if (msg.error) { if (!$("#view-vault").hidden) toast(`Vault: ${msg.message}`, true); return; }
  renderVault(msg);
}

export async function loadVault() {
  try {
    renderVault(await api("GET", "vault"));
  } catch (e) { $("#vault-groups tbody").replaceChildren(); toast(`Vault: ${e.message}`, true); }
}
