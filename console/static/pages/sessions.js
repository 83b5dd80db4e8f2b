// Sessions: every session fleet-wide, filtered by node, label, state and text,
// live.

import { el, api, enc, state, labels, fmtTime } from '../app.js';

export async function sessionsPage(main, _params, ctx) {
  const q = new URLSearchParams(location.search);
  const node = el('input', { id: 'f-node', placeholder: 'node', value: q.get('node') || '' });
  const label = el('input', { id: 'f-label', placeholder: 'label k=v', value: q.get('label') || '' });
  const st = el('select', { id: 'f-state' }, ['', 'idle', 'running', 'exited'].map((s) => el('option', { value: s }, s || 'any state')));
  const text = el('input', { id: 'f-text', placeholder: 'title or command', type: 'search' });
  const body = el('tbody', { id: 'sessions' });
  const note = el('p', { class: 'muted' });
  main.append(el('h1', {}, 'Sessions'),
    el('div', { class: 'filters' }, node, label, st, text),
    el('table', {}, el('thead', {}, el('tr', {}, ['Session', 'Title', 'State', 'Command', 'Last exit', 'Labels', 'Owner', 'Created'].map((h) => el('th', {}, h)))), body),
    note);
  let all = [];
  const show = () => {
    const t = text.value.toLowerCase();
    const rows = all.filter((s) => (!st.value || s.state === st.value) &&
      (!t || (s.title || '').toLowerCase().includes(t) || (s.current_command || '').toLowerCase().includes(t)));
    body.replaceChildren(...rows.map((s) => el('tr', { dataset: { session: `${s.node}/${s.id}` } },
      el('td', { class: 'mono' }, el('a', { href: `/ui/sessions/${enc(s.node)}/${enc(s.id)}`, 'data-nav': '' }, `${s.node}/${s.id}`)),
      el('td', { class: 'title' }, s.title || ''),
      el('td', {}, state(s.state)),
      el('td', { class: 'mono' }, s.current_command || ''),
      el('td', {}, s.last_exit_code === undefined ? '' : String(s.last_exit_code)),
      el('td', { class: 'mono' }, labels(s.labels)),
      el('td', {}, s.owner || ''),
      el('td', {}, fmtTime(s.created_at)))));
    note.textContent = rows.length ? '' : 'No sessions match.';
  };
  const load = async () => {
    const p = new URLSearchParams();
    if (node.value) p.set('node', node.value);
    if (label.value) p.set('label', label.value);
    const { sessions = [] } = await api('GET', '/v1/sessions' + (p.size ? '?' + p : ''));
    all = sessions;
    show();
  };
  for (const i of [node, label]) i.addEventListener('change', load);
  st.addEventListener('change', show);
  text.addEventListener('input', show);
  ctx.live(['session', 'node'], load);
}
