// The fleetmux console: a router over the pages, the signed-in caller, and the
// API helper every page uses. Everything a page shows goes into the DOM as text
// (el() below), never as HTML: titles, commands and output are untrusted.

import { fleetPage } from './pages/fleet.js';
import { sessionsPage } from './pages/sessions.js';
import { sessionPage } from './pages/session.js';
import { approvalsPage } from './pages/approvals.js';
import { agentsPage } from './pages/agents.js';
import { replayPage } from './pages/replay.js';
import { signinPage } from './pages/signin.js';

// el makes an element: attrs are properties or attributes (never "on…" strings;
// pass functions in attrs.on), children are nodes or text.
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') {
      for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    } else if (k === 'class') {
      e.className = v;
    } else if (k === 'dataset') {
      Object.assign(e.dataset, v);
    } else if (k.startsWith('on')) {
      throw new Error('el: event handlers go in attrs.on');
    } else if (k in e && typeof v !== 'string') {
      e[k] = v;
    } else {
      e.setAttribute(k, String(v));
    }
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// APIError is an error reply of the API: its status, code and message.
export class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || '';
    this.rule = e.rule || '';
    this.approval = e.approval || '';
  }
}

// me is who the console is signed in as: {principal, role, csrf, expires_at}.
export const me = { principal: '', role: '', csrf: '' };

const roles = ['viewer', 'operator', 'admin'];
// can reports whether the signed-in role reaches role.
export function can(role) {
  return roles.indexOf(me.role) >= roles.indexOf(role);
}

// api calls the API with the session cookie; mutations carry the CSRF token.
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') headers['X-Fleetmux-CSRF'] = me.csrf;
  const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!res.ok) {
    const err = new APIError(res.status, data);
    if (res.status === 401 && path !== '/ui/me') signedOut();
    throw err;
  }
  return data;
}

// enc encodes a path segment.
export const enc = encodeURIComponent;

// fmtTime shows a time as the browser's local time.
export function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t);
  return isNaN(d) ? '' : d.toLocaleString();
}

// state shows a state word with its colour.
export function state(s) {
  return el('span', { class: 'badge state-' + String(s || '').replace(/[^a-z_-]/g, '') }, s || '?');
}

// labels shows labels as k=v text.
export function labels(l) {
  return Object.entries(l || {}).map(([k, v]) => `${k}=${v}`).join(' ');
}

// A page is a function (main, params, ctx) that fills main; ctx.every(ms, fn)
// polls while the page is shown, ctx.live(kinds, fn) runs fn now and again when
// the fleet's change stream tells of a change of one of kinds, and
// ctx.onLeave(fn) runs when the page is left.
const routes = [
  [/^\/ui\/?$/, fleetPage, 'Fleet'],
  [/^\/ui\/sessions\/?$/, sessionsPage, 'Sessions'],
  [/^\/ui\/sessions\/([A-Za-z0-9_-]{1,63})\/([A-Za-z0-9_-]{1,63})$/, sessionPage, 'Session'],
  [/^\/ui\/approvals\/?$/, approvalsPage, 'Approvals'],
  [/^\/ui\/agents\/?$/, agentsPage, 'Agents'],
  [/^\/ui\/replay(?:\/([A-Za-z0-9_-]{1,63})\/([A-Za-z0-9_-]{1,63}))?\/?$/, replayPage, 'Replay'],
];

let leave = [];
let after = ''; // the page asked for before signing in

function cleanup() {
  for (const fn of leave) {
    try { fn(); } catch (e) { console.error(e); }
  }
  leave = [];
  document.adoptedStyleSheets = [];
}

async function render() {
  cleanup();
  const main = document.getElementById('main');
  main.replaceChildren();
  const path = location.pathname;
  if (path === '/ui/signin' || !me.role) {
    showChrome(false);
    signinPage(main, { signedIn });
    return;
  }
  showChrome(true);
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.getAttribute('href') === path || (a.getAttribute('href') !== '/ui/' && path.startsWith(a.getAttribute('href'))));
  }
  for (const [re, page, title] of routes) {
    const m = path.match(re);
    if (!m) continue;
    document.title = `${title} · fleetmux`;
    const ctx = {
      onLeave(fn) { leave.push(fn); },
      live(kinds, fn, match) { liveList(kinds, fn, leave, match); },
      every(ms, fn) {
        let stopped = false;
        let timer = 0;
        const tick = async () => {
          if (stopped) return;
          try { await fn(); } catch (e) { if (!(e instanceof APIError)) console.error(e); }
          if (!stopped) timer = setTimeout(tick, ms);
        };
        leave.push(() => { stopped = true; clearTimeout(timer); });
        tick();
      },
    };
    try {
      await page(main, m.slice(1), ctx);
    } catch (e) {
      main.append(el('p', { class: 'error' }, String(e.message || e)));
    }
    return;
  }
  main.append(el('p', { class: 'error' }, 'No such page.'));
}

// liveList runs fn now, then again whenever GET /v1/events (server-sent events)
// tells of a change of one of kinds ("session", "approval", "agent", "node") that
// match (given the event's {node, id}) accepts, a resync, or a reconnect; changes that come together make one run (at most one
// run at a time, one more after it when more came meanwhile). A slow poll
// (liveFallbackMS) stays as a floor, for a stream that cannot connect.
const liveFallbackMS = 30000;
function liveList(kinds, fn, leave, match) {
  let stopped = false;
  let running = false;
  let again = false;
  let timer = 0;
  const run = async () => {
    if (stopped) return;
    if (running) { again = true; return; }
    running = true;
    clearTimeout(timer);
    try { await fn(); } catch (e) { if (!(e instanceof APIError)) console.error(e); }
    running = false;
    if (stopped) return;
    timer = setTimeout(run, liveFallbackMS);
    if (again) { again = false; run(); }
  };
  const es = new EventSource('/v1/events');
  let opened = false;
  es.addEventListener('open', () => { if (opened) run(); opened = true; }); // a reconnect may have missed changes
  const on = (e) => {
    let where = {};
    try { where = JSON.parse(e.data || '{}'); } catch { /* run anyway */ }
    if (!match || match(where)) run();
  };
  for (const k of kinds) es.addEventListener(k, on);
  es.addEventListener('resync', run);
  leave.push(() => { stopped = true; clearTimeout(timer); es.close(); });
  run();
}

// navigate shows the page at path.
export function navigate(path) {
  history.pushState(null, '', path);
  render();
}

function showChrome(on) {
  document.getElementById('nav').hidden = !on;
  document.getElementById('signout').hidden = !on;
  document.getElementById('who').textContent = on ? `${me.principal} (${me.role})` : '';
}

function signedIn(who) {
  Object.assign(me, who);
  history.replaceState(null, '', after || (location.pathname === '/ui/signin' ? '/ui/' : location.pathname));
  after = '';
  render();
}

function signedOut() {
  me.principal = me.role = me.csrf = '';
  if (location.pathname !== '/ui/signin') history.replaceState(null, '', '/ui/signin');
  render();
}

async function start() {
  document.addEventListener('click', (e) => {
    const a = e.target.closest && e.target.closest('a[data-nav]');
    if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    navigate(a.getAttribute('href'));
  });
  window.addEventListener('popstate', render);
  document.getElementById('signout').addEventListener('click', async () => {
    try { await api('POST', '/ui/signout'); } catch (e) { console.error(e); }
    signedOut();
  });
  if (location.pathname !== '/ui/signin') {
    try {
      Object.assign(me, await api('GET', '/ui/me'));
    } catch {
      after = location.pathname;
      history.replaceState(null, '', '/ui/signin');
    }
  }
  render();
}

start();
