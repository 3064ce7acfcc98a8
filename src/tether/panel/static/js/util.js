/* Small helpers shared by the panel's modules: DOM, the JSON API, messages, formatting, clipboard. */

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];
export const basePath = () => location.pathname.replace(/\/[^/]*$/, "");  // "/panel"
export const wsBase = () => `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${basePath()}`;

export function el(tag, attrs = {}, ...children) {
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
export function toast(message, isError = false) {
  const t = $("#toast");
  t.textContent = message;
  t.className = "toast" + (isError ? " error" : "");
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, isError ? 9000 : 4000);
}

/* Addresses built from shell ids. Every real id is plain (dsh-ab12cd), but an id comes from the
 * address bar too, so each is percent-encoded on its own: any text reaches the server whole, to be
 * refused there like any other id that is no shell's. The grid's ids are joined by commas. */
export const shellPath = (id, what) => `shells/${encodeURIComponent(id)}/${what}`;
export const shellsHash = (ids) => (ids.length ? `#/shells/${ids.map(encodeURIComponent).join(",")}` : "#/shells");

/* One JSON call of /panel/api/…; a failure throws an Error with the server's code and message. */
export async function api(method, path, body) {
  const init = { method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(`${basePath()}/api/${path}`, init);
  } catch {
    // The browser's own words ("Failed to fetch", "NetworkError when attempting to fetch
    // resource.") say nothing to a person. Whether the request reached the server is unknown (the
    // connection may have dropped after it), so the person is told to look, not that nothing happened.
    const err = new Error("no answer from the panel's server (stopped, restarting, or the network is down); once the header says live again, check whether it was done");
    err.code = "UNAVAILABLE"; throw err;
  }
  if (res.status === 401) { location.href = `${basePath()}/login`; throw new Error("signed out"); }
  const data = await res.json().catch(() => ({ message: res.statusText }));
  if (!res.ok || data.error) {
    const err = new Error(data.message || `${res.status} ${res.statusText}`);
    err.code = data.error; throw err;
  }
  return data;
}

/* Run an action; say what happened (its message, or the error) in the toast. */
export async function act(label, fn) {
  try {
    const out = await fn();
    toast(out && out.message ? out.message : `${label}: done`);
    return out;
  } catch (e) {
    toast(`${label}: ${e.message}`, true);
    return null;
  }
}

export function fmtIdle(ms) {
  if (ms === null || ms === undefined || ms < 0) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined) return "…";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)}m ${Math.floor(ms / 1000) % 60}s`;
}

export function fmtClock(ms) {
  if (!ms) return "?";
  const d = new Date(ms);
  const today = new Date();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return d.toDateString() === today.toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

export function promptFor(title, text, initial = "", type = "text") {
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

/* Put text on the clipboard (the Clipboard API where the page may use it, else a hidden field). */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = el("textarea", { class: "sr-only", "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("the browser refused to copy");
}

/* A plain string as a RegExp that matches it literally. */
export const escapeRegex = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/* Text with every match of ``re`` wrapped in <mark>, as DOM nodes (never HTML). */
export function highlighted(text, re) {
  const out = [];
  let pos = 0;
  if (re) {
    re.lastIndex = 0;
    for (let m = re.exec(text); m; m = re.exec(text)) {
      if (m[0] === "") { re.lastIndex++; continue; }
      out.push(text.slice(pos, m.index), el("mark", {}, m[0]));
      pos = m.index + m[0].length;
    }
  }
  out.push(text.slice(pos));
  return out.filter((x) => x !== "");
}
