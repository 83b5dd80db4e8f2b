// Approvals: pending ones live, each with who asked, the rule and the command
// (or the agent's tool and its input); approve or deny with a reason; the
// decided ones with who and when.

import { el, api, enc, can, state, fmtTime } from '../app.js';

// what shows what was asked: a command, or an agent's tool and its input (in
// command for agent_tool approvals).
function what(a) {
  const cmd = el('pre', { class: 'out command' }, a.command || '');
  if (a.kind === 'agent_tool' || a.tool) return [el('div', {}, `${a.agent || 'an agent'} asks to use `, el('code', {}, a.tool || '?')), cmd];
  return [a.kind && a.kind !== 'run' ? el('div', { class: 'muted' }, a.kind) : null, cmd];
}

export async function approvalsPage(main, _params, ctx) {
  const pending = el('div', { id: 'pending' });
  const decided = el('tbody', { id: 'decided' });
  const msg = el('p', { class: 'error' });
  main.append(el('h1', {}, 'Approvals'), msg, el('h2', {}, 'Pending'), pending,
    el('h2', {}, 'Decided'),
    el('table', {}, el('thead', {}, el('tr', {}, ['Approval', 'State', 'Command', 'Asked by', 'Rule', 'Decided by', 'When', 'Reason'].map((h) => el('th', {}, h)))), decided));
  const shown = new Map(); // pending approvals shown, by address: a poll keeps the reason being typed
  const decide = async (a, decision, reason) => {
    msg.textContent = '';
    try {
      await api('POST', `/v1/approvals/${enc(a.node)}/${enc(a.id)}`, { decision, reason });
      await load();
    } catch (e) {
      msg.textContent = `${a.node}/${a.id}: ${e.message}`;
    }
  };
  const card = (a) => {
    const reason = el('input', { class: 'reason', placeholder: 'reason', maxlength: 500 });
    return el('div', { class: 'approval', dataset: { approval: `${a.node}/${a.id}` } },
      el('div', {}, el('strong', { class: 'mono' }, `${a.node}/${a.id}`), ' ', state(a.state), ' in ',
        el('a', { href: `/ui/sessions/${enc(a.node)}/${enc(a.session)}`, 'data-nav': '' }, `${a.node}/${a.session}`)),
      el('div', { class: 'muted' }, `asked by ${a.principal || '?'}${a.actor ? ' (' + a.actor + ')' : ''} as ${a.role || '?'}; rule ${a.rule}; expires ${fmtTime(a.expires_at)}`),
      what(a),
      can('operator') ? el('div', { class: 'actions' }, reason,
        el('button', { type: 'button', class: 'approve', on: { click: () => decide(a, 'approve', reason.value) } }, 'Approve'),
        el('button', { type: 'button', class: 'deny', on: { click: () => decide(a, 'deny', reason.value) } }, 'Deny')) : null);
  };
  const load = async () => {
    const { approvals = [] } = await api('GET', '/v1/approvals?state=all');
    const open = approvals.filter((a) => a.state === 'pending');
    const keep = new Set(open.map((a) => `${a.node}/${a.id}`));
    for (const k of [...shown.keys()]) if (!keep.has(k)) shown.delete(k);
    for (const a of open) if (!shown.has(`${a.node}/${a.id}`)) shown.set(`${a.node}/${a.id}`, card(a));
    pending.replaceChildren(...(open.length ? [...shown.values()] : [el('p', { class: 'muted' }, 'Nothing waits for a decision.')]));
    decided.replaceChildren(...approvals.filter((a) => a.state !== 'pending')
      .sort((x, y) => String(y.decided_at || '').localeCompare(String(x.decided_at || '')))
      .map((a) => el('tr', { dataset: { approval: `${a.node}/${a.id}` } },
        el('td', { class: 'mono' }, `${a.node}/${a.id}`), el('td', {}, state(a.state)),
        el('td', { class: 'mono' }, a.tool ? `${a.tool}: ${a.command || ''}` : a.command || ''), el('td', {}, a.principal || ''),
        el('td', {}, a.rule || ''), el('td', {}, a.decided_by || ''), el('td', {}, fmtTime(a.decided_at)),
        el('td', {}, a.reason || ''))));
  };
  ctx.live(['approval'], load);
}
