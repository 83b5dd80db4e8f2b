// A session: its live terminal (xterm.js over the attach WebSocket: the current
// screen first, then live bytes), view for everyone and control for operators
// (typing takes the writer lease; take over with a confirmation; resize), and
// the block list beside it with exit codes, each block's output on click, and a
// search in the output.

import { Terminal } from '../vendor/xterm/xterm.mjs';
import { FitAddon } from '../vendor/xterm/addon-fit.mjs';
import { el, api, enc, can, state } from '../app.js';
import { adoptStyles } from '../styles.js';

export async function sessionPage(main, [node, id], ctx) {
  const base = `/v1/sessions/${enc(node)}/${enc(id)}`;
  // The attach opens at once, beside the request for the session's details:
  // what it sends before the terminal exists waits, in order. timing is when it
  // opened and when its first byte came (ms since the page started), which the
  // browser tests report.
  const timing = { wsOpen: undefined, firstByte: undefined };
  window.fleetmuxTiming = timing;
  const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}${base}/attach`);
  ws.binaryType = 'arraybuffer';
  let closed = false;
  ctx.onLeave(() => { closed = true; ws.close(); });
  const early = [];
  let handle = (ev) => early.push(ev);
  for (const type of ['open', 'message', 'close']) {
    ws.addEventListener(type, (ev) => {
      if (type === 'open') timing.wsOpen ??= performance.now();
      if (type === 'message' && typeof ev.data !== 'string') timing.firstByte ??= performance.now();
      handle(ev);
    });
  }
  const s = await api('GET', base);
  const control = can('operator');
  const status = el('span', { id: 'term-status', class: 'muted' }, 'connecting…');
  const title = el('span', { class: 'title' }, s.title || '');
  const stateEl = el('span', {}, state(s.state));
  const box = el('div', { class: 'term', id: 'terminal' });
  const takeOver = el('button', { type: 'button', id: 'take-over', on: { click: () => doTakeOver() } }, 'Take over');
  const fitBtn = el('button', { type: 'button', id: 'fit', on: { click: () => fitToWindow() } }, 'Fit to window');
  const search = el('input', { id: 'block-search', type: 'search', placeholder: 'search the output' });
  const blockList = el('ul', { id: 'blocks' });
  const blockOut = el('pre', { id: 'block-output', class: 'out', hidden: true });
  const blockHead = el('div', { class: 'muted', id: 'block-head' });

  main.append(
    el('h1', {}, el('span', { class: 'mono' }, `${node}/${id}`), ' ', title, ' ', stateEl),
    el('div', { class: 'toolbar' },
      control ? [fitBtn, takeOver] : el('span', { class: 'badge', id: 'view-only' }, 'view only'),
      el('a', { href: `/ui/replay/${enc(node)}/${enc(id)}`, 'data-nav': '' }, 'Replay'),
      status),
    el('div', { class: 'session' },
      box,
      el('div', { class: 'blocks' }, el('h2', {}, 'Blocks'), search, blockList, blockHead, blockOut)));

  // The terminal. A viewer's has no input path at all: stdin disabled and no
  // handler that could send a byte.
  const term = new Terminal({ cols: s.cols || 80, rows: s.rows || 24, disableStdin: !control, scrollback: 5000, fontSize: 13, cursorBlink: control });
  const fit = new FitAddon();
  term.loadAddon(fit);
  ctx.onLeave(adoptStyles(box));
  term.open(box);
  window.fleetmuxTerm = term; // the browser tests read its buffer
  ctx.onLeave(() => { delete window.fleetmuxTerm; term.dispose(); });

  const say = (text, cls = 'muted') => { status.textContent = text; status.className = cls; };
  handle = (ev) => {
    if (ev.type === 'open') {
      say(control ? 'live: typing takes the writer lease' : 'live (view only)', 'ok');
    } else if (ev.type === 'close') {
      if (!closed) say('disconnected: reload the page to attach again', 'error');
    } else if (typeof ev.data !== 'string') {
      term.write(new Uint8Array(ev.data));
    } else {
      let m = {};
      try { m = JSON.parse(ev.data); } catch { return; }
      if (m.type === 'exit') {
        say(`the session exited${m.exit_code === undefined ? '' : ' with ' + m.exit_code}`, 'warn');
      } else if (m.type === 'error' && m.error) {
        const busy = m.error.code === 'busy';
        say(busy ? `${m.error.message} (take over to type)` : m.error.message, busy ? 'warn' : 'error');
      }
    }
  };
  for (const ev of early.splice(0)) handle(ev);

  if (control) {
    const enc8 = new TextEncoder();
    const send = (d) => { if (ws.readyState === WebSocket.OPEN) ws.send(enc8.encode(d)); };
    term.onData(send);
    term.onBinary((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)); });
  }

  function fitToWindow() {
    const d = fit.proposeDimensions();
    if (!d || ws.readyState !== WebSocket.OPEN) return;
    const cols = Math.max(20, Math.min(500, d.cols));
    const rows = Math.max(5, Math.min(300, d.rows));
    term.resize(cols, rows);
    ws.send(JSON.stringify({ type: 'resize', cols, rows }));
  }

  async function doTakeOver() {
    if (!confirm(`Take over ${node}/${id}? Whoever types in it now loses the writer lease.`)) return;
    try {
      const r = await api('POST', `${base}/take_over`);
      const prev = r.previous ? ` from ${r.previous.principal}` : '';
      say(`you hold the writer lease${prev}`, 'ok');
      term.focus();
    } catch (e) {
      say(e.message, 'error');
    }
  }

  // Blocks: the list, fetched again when the change stream tells of this session;
  // a click shows one block's output (grep: the search).
  let selected = 0;
  const showBlock = async (n) => {
    selected = n;
    for (const li of blockList.children) li.classList.toggle('selected', li.dataset.n === String(n));
    const p = new URLSearchParams();
    if (search.value) p.set('grep', search.value);
    try {
      const r = await api('GET', `${base}/blocks/${n}${p.size ? '?' + p : ''}`);
      const b = r.block || {};
      blockHead.textContent = `#${b.n} ${b.command || ''} — ${b.state}${b.exit_code === undefined ? '' : ', exit ' + b.exit_code}${r.omitted_bytes ? `, ${r.omitted_bytes} bytes omitted` : ''}`;
      blockOut.textContent = r.text || '';
      blockOut.hidden = false;
    } catch (e) {
      blockHead.textContent = e.message;
      blockOut.hidden = true;
    }
  };
  let blocks = [];
  const drawBlocks = () => {
    const q = search.value.toLowerCase();
    blockList.replaceChildren(...blocks.filter((b) => !q || (b.command || '').toLowerCase().includes(q) || selected === b.n)
      .map((b) => el('li', { dataset: { n: String(b.n) }, class: b.n === selected ? 'selected' : '', on: { click: () => showBlock(b.n) } },
        el('span', { class: 'mono' }, `#${b.n} `), el('code', {}, b.command || ''), ' ',
        b.exit_code === undefined ? state(b.state) : el('span', { class: 'badge ' + (b.exit_code === 0 ? 'ok' : 'error') }, `exit ${b.exit_code}`))));
  };
  search.addEventListener('input', () => { drawBlocks(); if (selected) showBlock(selected); });
  ctx.live(['session'], async () => {
    const [bl, cur] = await Promise.all([api('GET', `${base}/blocks`), api('GET', base)]);
    blocks = (bl.blocks || []).slice().reverse();
    drawBlocks();
    title.textContent = cur.title || '';
    stateEl.replaceChildren(state(cur.state));
    if (!control && (cur.cols !== term.cols || cur.rows !== term.rows) && cur.cols > 0 && cur.rows > 0) term.resize(cur.cols, cur.rows);
  }, (w) => w.node === node && w.id === id);
}
