/* Keyboard: every action without a mouse. Shortcuts act outside terminals and text fields (in a
 * terminal every key belongs to the shell; Ctrl+] leaves it); `?` lists them. */
import { $, el } from "./util.js";

const SHORTCUTS = [];   // [keys, what, run, when]
let prefix = null, prefixTimer = 0;

export function shortcut(keys, what, run) { SHORTCUTS.push([keys, what, run]); }

// Enter on a button, a link or a <summary> is that control's own activation (its click), never a
// shortcut: the Enter shortcut taken there left every button unusable from the keyboard. (The list's
// open buttons open their shell by that click, as the shortcut would.)
const activates = (t, key) => key === "Enter" && t && t.closest && t.closest("button, a[href], summary, [role='button']");

const typingTarget = (t) => t && (t.closest(".xterm") || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName) || t.isContentEditable);

export function showHelp() {
  $("#help-keys").replaceChildren(...SHORTCUTS.flatMap(([keys, what]) => [
    el("dt", {}, ...keys.split(" ").flatMap((k, i) => [i ? " then " : "", el("kbd", {}, k)])), el("dd", {}, what)]));
  $("#help-dialog").showModal();
  $("#help-close").focus();
}

export function bindKeys() {
  $("#help-open").onclick = showHelp;
  $("#help-close").onclick = () => $("#help-dialog").close();
  document.addEventListener("keydown", (ev) => {
    if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (document.querySelector("dialog[open]")) return;  // a dialog has its own keys (Escape closes it)
    if (typingTarget(ev.target)) {
      if (ev.key === "Escape" && !ev.target.closest(".xterm")) ev.target.blur();
      return;
    }
    if (activates(ev.target, ev.key)) { prefix = null; return; }
    const key = ev.key;
    const wanted = prefix ? `${prefix} ${key}` : key;
    const hit = SHORTCUTS.find(([keys]) => keys === wanted);
    clearTimeout(prefixTimer);
    if (hit) { ev.preventDefault(); prefix = null; hit[2](ev); return; }
    if (!prefix && SHORTCUTS.some(([keys]) => keys.startsWith(`${key} `))) {
      ev.preventDefault(); prefix = key; prefixTimer = setTimeout(() => { prefix = null; }, 1500);
      return;
    }
    prefix = null;
  });
}
