/* Replaying a recording (asciicast v2) in the page: 1× or 4×, pause, restart, jump to a command.
 * Pauses longer than IDLE_CAP_S are shortened to it (the file keeps the real times). */
import { $, el } from "./util.js";

const IDLE_CAP_S = 2;

export const player = {
  term: null, events: [], marks: [], at: 0, speed: 1, playing: false, timer: 0, done: false, drawing: false,
};
window.tetherPlayer = player;  // for the browser tests

function parse(cast) {
  const lines = cast.split("\n").filter((l) => l.trim());
  const header = JSON.parse(lines[0]);
  if (header.version !== 2) throw new Error(`not an asciicast v2 recording (version ${header.version})`);
  const events = lines.slice(1).map((l) => JSON.parse(l));
  return { header, events };
}

function status() {
  const total = player.events.length ? player.events[player.events.length - 1][0] : 0;
  const shown = player.at < player.events.length ? player.events[player.at][0] : total;
  $("#player-status").textContent = `${player.done ? "done" : player.playing ? "playing" : "paused"} · ` +
    `${Math.min(shown, total).toFixed(1)} s of ${total.toFixed(1)} s · ${player.speed}×`;
  $("#player-toggle").textContent = player.playing ? "Pause" : "Play";
  for (const s of [1, 4]) $(`#player-speed-${s}`).setAttribute("aria-pressed", player.speed === s ? "true" : "false");
  const current = player.marks.filter((m) => m.index < player.at).length - 1;
  [...$("#player-marks").children].forEach((li, i) => li.classList.toggle("current", i === current));
}

function step() {
  clearTimeout(player.timer);
  if (!player.playing) return;
  // Everything due now in one write (fast output is thousands of events).
  let chunk = "";
  const now = player.events[player.at] ? player.events[player.at][0] : 0;
  while (player.at < player.events.length && player.events[player.at][0] <= now) {
    const [, kind, data] = player.events[player.at++];
    if (kind === "o") chunk += data;
  }
  if (chunk) player.term.write(chunk);
  if (player.at >= player.events.length) { player.playing = false; player.done = true; status(); return; }
  const wait = Math.min(player.events[player.at][0] - now, IDLE_CAP_S) / player.speed;
  player.timer = setTimeout(step, Math.max(0, wait * 1000));
  status();
}

function play() { if (player.done) restart(); player.playing = true; step(); }
function pause() { player.playing = false; clearTimeout(player.timer); status(); }

function seek(index) {
  clearTimeout(player.timer);
  player.term.reset();
  let chunk = "";
  for (let i = 0; i < index; i++) if (player.events[i][1] === "o") chunk += player.events[i][2];
  player.drawing = true;  // xterm.js parses a write later; this says when the jump is on screen
  player.term.write(chunk, () => { player.drawing = false; });
  player.at = index;
  player.done = false;
  status();
  if (player.playing) step();
}

function restart() { player.done = false; seek(0); }

function setSpeed(s) { player.speed = s; status(); if (player.playing) step(); }

export function playCast(cast, title) {
  const { header, events } = parse(cast);
  const dlg = $("#player-dialog");
  $("#player-title").textContent = title;
  if (player.term) player.term.dispose();
  const term = new Terminal({ cols: header.width, rows: header.height, disableStdin: true, scrollback: 10000,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace', fontSize: 12, theme: { background: "#000000" } });
  dlg.showModal();
  term.open($("#player-term"));
  Object.assign(player, { term, events, at: 0, playing: false, done: false,
    marks: events.map((e, index) => ({ e, index })).filter(({ e }) => e[1] === "m") });
  $("#player-marks").replaceChildren(...player.marks.map((m, i) => el("li", {},
    el("button", { type: "button", "data-mark": i, title: `at ${m.e[0].toFixed(1)} s` }, m.e[2] || `command ${i + 1}`))));
  play();
  $("#player-toggle").focus();
}

export function bindPlayer() {
  const dlg = $("#player-dialog");
  $("#player-toggle").onclick = () => (player.playing ? pause() : play());
  $("#player-speed-1").onclick = () => setSpeed(1);
  $("#player-speed-4").onclick = () => setSpeed(4);
  $("#player-restart").onclick = restart;
  $("#player-close").onclick = () => dlg.close();
  $("#player-marks").onclick = (ev) => {
    const b = ev.target.closest("[data-mark]");
    if (b) seek(player.marks[Number(b.dataset.mark)].index);
  };
  dlg.addEventListener("close", () => { pause(); if (player.term) { player.term.dispose(); player.term = null; } });
  dlg.addEventListener("keydown", (ev) => {
    if (ev.target.closest("[data-mark]") && ev.key === "Enter") return;
    if (ev.key === " ") { ev.preventDefault(); player.playing ? pause() : play(); }
    else if (ev.key === "1") setSpeed(1);
    else if (ev.key === "4") setSpeed(4);
    else if (ev.key === "0") restart();
    else if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
      const buttons = [...$("#player-marks").querySelectorAll("button")];
      if (!buttons.length) return;
      ev.preventDefault();
      const at = buttons.indexOf(document.activeElement);
      buttons[Math.max(0, Math.min(buttons.length - 1, at + (ev.key === "ArrowDown" ? 1 : -1)))].focus();
    }
  });
}
