// A type check of index.d.ts (npm run check): the README's agent loop, typed.
import { Client, Busy, Held, type Agent, type AgentWait, type Approval, type BlockResult, type Chunk } from "../index.js";

async function agent(): Promise<number | undefined> {
  const c = new Client();
  const s = await c.createSession({ title: "build" });
  const r: BlockResult = await c.run(s.node, s.id, "make test", { timeoutMs: 600_000 });
  if (r.block.exit_code !== 0) {
    const tail = await c.block(s.node, s.id, r.block.n, { grep: "error|FAIL" });
    console.log(tail.text, r.omitted_bytes, r.session.state);
  }
  for await (const ch of c.follow(s.node, s.id, { from: 0 })) {
    const piece: Chunk = ch;
    console.log(piece.offset, piece.data.length);
    break;
  }
  try {
    await c.run(s.node, s.id, "true");
  } catch (e) {
    if (e instanceof Busy) console.log(e.code, e.status, e.detail);
    if (e instanceof Held) {
      const a: Approval = await c.approval(e.approval, undefined, { waitMs: 60_000 });
      console.log(a.state, a.exit_code, e.rule);
    }
  }
  const a: Agent = await c.spawnAgent({ driver: "claude", prompt: "fix the tests" });
  const w: AgentWait = await c.waitAgent(a.node, a.id, { states: ["ready", "waiting_permission"], timeoutMs: 600_000 });
  console.log(w.ok, w.agent.state, w.agent.evidence, (await c.agentOutput(a.node, a.id)).cursor);
  const f = await c.fanout("uptime", { selector: { labels: { role: "web" } } });
  return f.results[0]?.block?.exit_code;
}
void agent;
