// Replay: a session's recording in asciinema-player (GET …/recording), with a
// marker per block; jump to a block, change the speed, link to a block.

import { el, api, enc, APIError } from '../app.js';

let loading = null;

// player loads the vendored asciinema-player (a classic script: window.AsciinemaPlayer).
function player() {
  if (window.AsciinemaPlayer) return Promise.resolve(window.AsciinemaPlayer);
  loading ??= new Promise((resolve, reject) => {
    const s = el('script', { src: '/ui/vendor/asciinema-player/asciinema-player.min.js' });
    s.addEventListener('load', () => resolve(window.AsciinemaPlayer));
    s.addEventListener('error', () => reject(new Error('asciinema-player did not load')));
    document.head.append(s);
  });
  return loading;
}

export async function replayPage(main, [node, id], ctx) {
  main.append(el('h1', {}, 'Replay'));
  if (!node) {
    const { sessions = [] } = await api('GET', '/v1/sessions');
    main.append(el('p', { class: 'muted' }, 'Pick a session to replay its recording.'),
      el('ul', {}, sessions.map((s) => el('li', {}, el('a', { href: `/ui/replay/${enc(s.node)}/${enc(s.id)}`, 'data-nav': '' }, `${s.node}/${s.id}`), ' ', s.title || ''))));
    return;
  }
  const base = `/v1/sessions/${enc(node)}/${enc(id)}`;
  const msg = el('p', { class: 'muted', id: 'replay-status' }, 'Loading the recording…');
  const box = el('div', { class: 'player', id: 'player' });
  const speed = el('select', { id: 'speed' }, ['1', '2', '4', '0.5'].map((v) => el('option', { value: v }, `${v}×`)));
  const jumps = el('div', { class: 'toolbar', id: 'markers' });
  main.append(el('p', {}, el('a', { href: `/ui/sessions/${enc(node)}/${enc(id)}`, 'data-nav': '' }, `${node}/${id}`)), msg,
    el('div', { class: 'toolbar' }, 'Speed ', speed), box, jumps);

  const live = new URLSearchParams(location.search).has('live');
  main.querySelector('p').append(' · ', live
    ? el('a', { href: `/ui/replay/${enc(node)}/${enc(id)}`, 'data-nav': '' }, 'the recording')
    : el('a', { href: `/ui/replay/${enc(node)}/${enc(id)}?live=1`, 'data-nav': '', id: 'watch-live' }, 'watch live'));
  if (live) {
    // Live: the session's /live WebSocket (asciicast v3 or ALiS, from the current
    // screen), which the player speaks itself; the cookie and Origin check it.
    const AP = await player();
    const url = `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}${base}/live`;
    const p = AP.create({ driver: 'websocket', url }, box, { autoPlay: true, fit: 'width' });
    window.fleetmuxPlayer = p;
    ctx.onLeave(() => { p.dispose(); delete window.fleetmuxPlayer; });
    msg.textContent = 'Live.';
    speed.disabled = true;
    return;
  }
  const res = await fetch(`${base}/recording`, { credentials: 'same-origin', cache: 'no-store' });
  if (!res.ok) {
    const body = await res.json().catch(() => null);
    const e = new APIError(res.status, body);
    msg.textContent = `No recording: ${e.message}`;
    return;
  }
  const data = await res.text();
  const AP = await player();
  let p = null;
  const make = (startAt) => {
    if (p) p.dispose();
    box.replaceChildren();
    p = AP.create({ data }, box, { speed: Number(speed.value), startAt, fit: 'width' });
    window.fleetmuxPlayer = p;
  };
  make(0);
  ctx.onLeave(() => { if (p) p.dispose(); delete window.fleetmuxPlayer; });
  speed.addEventListener('change', () => make(p ? p.getCurrentTime() : 0));
  msg.textContent = '';
  // A marker per block ("block N: COMMAND", the exit code appended once known):
  // a button jumps to it; ?block=N opens there.
  const marks = markers(data);
  window.fleetmuxMarkers = marks;
  jumps.replaceChildren(marks.length ? 'Blocks: ' : 'No block markers in this recording.',
    ...marks.map((m) => el('button', { type: 'button', dataset: { block: String(m.block) }, title: m.label,
      on: { click: () => { p.seek({ marker: m.index }); history.replaceState(null, '', `?block=${m.block}`); } } }, `#${m.block}`)));
  const want = marks.find((m) => String(m.block) === new URLSearchParams(location.search).get('block'));
  if (want) p.seek({ marker: want.index });
}

// markers lists a recording's block markers: their index among its markers (what
// the player seeks to), time in seconds, label and block number. asciicast v3
// times are intervals since the event before; v2's are since the start.
export function markers(text) {
  const lines = text.split('\n');
  let version = 2;
  try { version = JSON.parse(lines[0]).version; } catch { return []; }
  const out = [];
  let t = 0;
  let index = 0;
  for (const line of lines.slice(1)) {
    if (!line.startsWith('[')) continue;
    let ev;
    try { ev = JSON.parse(line); } catch { continue; }
    t = version >= 3 ? t + Number(ev[0]) : Number(ev[0]);
    if (ev[1] !== 'm') continue;
    const m = /^block (\d+): /.exec(String(ev[2]));
    if (m) out.push({ index, time: t, label: String(ev[2]), block: Number(m[1]) });
    index++;
  }
  return out;
}
