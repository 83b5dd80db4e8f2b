// Agents: coding agents as workloads (GET /v1/agents), as a tree by parent,
// with their states, where each state came from, usage and first prompt; the
// pending permission prompts are on the approvals page. A controller without the
// agents API says so.

import { el, api, enc, state, fmtTime, APIError } from '../app.js';

export async function agentsPage(main, _params, ctx) {
  const tree = el('div', { class: 'tree', id: 'agents' });
  main.append(el('h1', {}, 'Agents'), tree);
  ctx.live(['agent', 'approval', 'node'], async () => {
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
    // The permission prompts waiting on a person, by the agent (its session) that asked.
    const asks = new Map();
    try {
      for (const a of (await api('GET', '/v1/approvals')).approvals || []) {
        if (a.kind !== 'agent_tool') continue;
        const k = `${a.node}/${a.session}`;
        if (!asks.has(k)) asks.set(k, []);
        asks.get(k).push(a);
      }
    } catch { /* the tree still shows */ }
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
    const usage = (u) => u ? [u.input_tokens && `${u.input_tokens} in`, u.output_tokens && `${u.output_tokens} out`,
      u.cost_usd && `$${Number(u.cost_usd).toFixed(2)}`, u.turns && `${u.turns} turns`].filter(Boolean).join(', ') : '';
    const item = (a) => el('li', { dataset: { agent: key(a) } },
      el('a', { class: 'mono', href: `/ui/sessions/${enc(a.node)}/${enc(a.id)}`, 'data-nav': '' }, key(a)), ' ',
      a.driver || '', ' ', state(a.state),
      el('span', { class: 'muted' }, ` from ${a.state_source || '?'}${a.evidence ? ': ' + a.evidence : ''}${a.state_since ? ' since ' + fmtTime(a.state_since) : ''}`),
      a.usage ? el('span', { class: 'muted' }, ` · ${usage(a.usage)}`) : null,
      a.prompt ? el('div', { class: 'muted mono' }, a.prompt) : null,
      (asks.get(key(a)) || []).map((p) => el('div', { class: 'warn', dataset: { approval: `${p.node}/${p.id}` } },
        'asks to use ', el('code', {}, p.tool || '?'), ': ', el('code', {}, p.command || ''), ' — ',
        el('a', { href: '/ui/approvals', 'data-nav': '' }, `decide ${p.node}/${p.id}`))),
      kids.has(key(a)) ? el('ul', {}, kids.get(key(a)).map(item)) : null);
    const roots = agents.filter((a) => !a.parent || !known.has(a.parent));
    tree.replaceChildren(el('ul', {}, roots.map(item)));
  });
}
