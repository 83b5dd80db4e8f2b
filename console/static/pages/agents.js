// Agents: coding agents as workloads (GET /v1/agents), as a tree by parent,
// with their states and where each state came from. A controller without the
// agents API says so.

import { el, api, enc, state, APIError } from '../app.js';

export async function agentsPage(main, _params, ctx) {
  const tree = el('div', { class: 'tree', id: 'agents' });
  main.append(el('h1', {}, 'Agents'), tree);
  ctx.every(2000, async () => {
    let list;
    try {
      list = await api('GET', '/v1/agents');
    } catch (e) {
      if (e instanceof APIError && (e.status === 404 || e.status === 405)) {
        tree.replaceChildren(el('p', { class: 'muted', id: 'no-agents' }, 'No agents: this controller does not run coding agents.'));
        return;
      }
      throw e;
    }
    const agents = (list && list.agents) || [];
    if (!agents.length) {
      tree.replaceChildren(el('p', { class: 'muted', id: 'no-agents' }, 'No agents are running.'));
      return;
    }
    const key = (a) => `${a.node}/${a.id}`;
    const kids = new Map();
    for (const a of agents) {
      const p = a.parent || '';
      if (!kids.has(p)) kids.set(p, []);
      kids.get(p).push(a);
    }
    const known = new Set(agents.map(key));
    const item = (a) => el('li', { dataset: { agent: key(a) } },
      el('span', { class: 'mono' }, key(a)), ' ', a.kind || a.driver || '', ' ', state(a.state),
      a.state_source ? el('span', { class: 'muted' }, ` (${a.state_source})`) : null,
      a.session ? [' ', el('a', { href: `/ui/sessions/${enc(a.node)}/${enc(a.session)}`, 'data-nav': '' }, 'terminal')] : null,
      kids.has(key(a)) ? el('ul', {}, kids.get(key(a)).map(item)) : null);
    const roots = agents.filter((a) => !a.parent || !known.has(a.parent));
    tree.replaceChildren(el('ul', {}, roots.map(item)));
  });
}
