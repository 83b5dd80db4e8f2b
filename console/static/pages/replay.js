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

  const res = await fetch(`${base}/recording`, { credentials: 'same-origin', cache: 'no-store' });
  if (!res.ok) {
    const body = await res.json().catch(() => null);
    const e = new APIError(res.status, body);
    msg.textContent = res.status === 404 && (body?.error?.message || '').startsWith('no route')
      ? 'This controller does not serve recordings yet.'
      : `No recording: ${e.message}`;
    return;
  }
  const data = await res.text();
  const AP = await player();
  let p = null;
  const make = (startAt) => {
    if (p) p.dispose();
    box.replaceChildren();
    p = AP.create({ data }, box, { speed: Number(speed.value), startAt, fit: 'width', idleTimeLimit: 2 });
    window.fleetmuxPlayer = p;
  };
  make(0);
  ctx.onLeave(() => { if (p) p.dispose(); delete window.fleetmuxPlayer; });
  speed.addEventListener('change', () => make(p ? p.getCurrentTime() : 0));
  msg.textContent = '';
  // A marker per block: jump to block N (?block=N links to one).
  let blocks = [];
  try { blocks = (await api('GET', `${base}/blocks`)).blocks || []; } catch { blocks = []; }
  jumps.replaceChildren('Blocks: ', ...blocks.map((b, i) => el('button', { type: 'button', dataset: { block: String(b.n) }, title: b.command || '', on: { click: () => p.seek({ marker: i }) } }, `#${b.n}`)));
  const want = new URLSearchParams(location.search).get('block');
  const i = blocks.findIndex((b) => String(b.n) === want);
  if (i >= 0) p.seek({ marker: i });
}
