// Fleet: every node with its status, labels, version and counts, live.

import { el, api, state, labels, fmtTime } from '../app.js';

export async function fleetPage(main, _params, ctx) {
  const body = el('tbody', { id: 'nodes' });
  const note = el('p', { class: 'muted' });
  main.append(el('h1', {}, 'Fleet'),
    el('table', {}, el('thead', {}, el('tr', {}, ['Node', 'Status', 'Labels', 'Version', 'Sessions', 'Agents', 'Address', 'Since'].map((h) => el('th', {}, h)))), body),
    note);
  ctx.live(['node', 'session', 'agent'], async () => {
    const { nodes = [] } = await api('GET', '/v1/nodes');
    body.replaceChildren(...nodes.map((n) => el('tr', { dataset: { node: n.name } },
      el('td', {}, el('a', { href: `/ui/sessions?node=${encodeURIComponent(n.name)}`, 'data-nav': '' }, n.name)),
      el('td', {}, state(n.status)),
      el('td', { class: 'mono' }, labels(n.labels)),
      el('td', {}, n.version || ''),
      el('td', {}, String(n.sessions ?? '')),
      el('td', {}, n.agents === undefined ? '' : String(n.agents)),
      el('td', { class: 'mono' }, n.addr || ''),
      el('td', {}, fmtTime(n.since)))));
    note.textContent = nodes.length ? '' : 'No nodes yet: start one with fleetmux node.';
  });
}
