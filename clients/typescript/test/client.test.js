// Tests of the fleetmux TypeScript client against a real controller. The Go test
// TestTypeScriptClient (cmd/fleetmux/clients_test.go) starts `fleetmux dev` and a
// second controller, and runs these against that controller with FLEETMUX_ADDR and
// FLEETMUX_TOKEN set, and FLEETMUX_TEST_CONTROL: a URL whose GET /restart restarts that
// controller (the node and its sessions live on), /node2/start and /node2/stop start
// and stop a second node, /disk/break and /disk/fix make the dev node's next session
// directory unusable and usable again. Without FLEETMUX_ADDR they skip.

import assert from "node:assert/strict";
import { after, afterEach, beforeEach, describe, it } from "node:test";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServer } from "node:http";
import * as fm from "../index.js";

const skip = !process.env.FLEETMUX_ADDR && "FLEETMUX_ADDR not set (run through go test ./cmd/fleetmux)";
const CONTROL = process.env.FLEETMUX_TEST_CONTROL;
const noControl = !CONTROL && "FLEETMUX_TEST_CONTROL not set";

// The error codes the controller under test answered, written to
// FLEETMUX_TEST_CODES once the tests ran (the harness checks that each of the API's
// codes is there).
const seenCodes = new Set();
const fetch0 = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const resp = await fetch0(input, init);
  if (resp.status >= 400 && process.env.FLEETMUX_ADDR && String(input).startsWith(fm.resolve(process.env.FLEETMUX_ADDR, "-").addr + "/")) {
    const code = await resp.clone().json().then((b) => b?.error?.code, () => undefined);
    if (code) seenCodes.add(code);
  }
  return resp;
};
after(() => {
  if (process.env.FLEETMUX_TEST_CODES) writeFileSync(process.env.FLEETMUX_TEST_CODES, [...seenCodes].sort().map((c) => c + "\n").join(""));
});

/** Asks the harness for a change of the fleet under test; returns its answer. */
async function control(what) {
  const r = await fetch(`${CONTROL}/${what}`);
  const text = (await r.text()).trim();
  assert.equal(r.status, 200, text);
  return text;
}

async function eventually(what, fn, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("timed out waiting for " + what);
}

describe("fleetmux client", { skip, concurrency: 1 }, () => {
  let c, s;
  beforeEach(async () => {
    c = new fm.Client();
    s = await c.createSession({ title: "ts", labels: { lang: "ts" } });
    assert.ok((await c.wait(s.node, s.id, { until: "idle", timeoutMs: 15000 })).ok);
  });
  afterEach(async () => {
    await c.closeSession(s.node, s.id).catch((e) => {
      if (!(e instanceof fm.NotFound)) throw e;
    });
  });

  it("creates a session and runs a command that exits 3", async () => {
    assert.ok(s.node && s.id);
    assert.equal(s.title, "ts");
    const r = await c.run(s.node, s.id, "echo hi; (exit 3)", { timeoutMs: 20000 });
    assert.equal(r.block.exit_code, 3);
    assert.equal(r.block.state, "done");
    assert.equal(r.block.n, 1);
    assert.equal(r.text, "hi");
    assert.equal(r.omitted_bytes, 0);
    assert.equal(r.session.state, "idle");
    assert.equal(r.session.last_exit_code, 3);
    assert.deepEqual((await c.blocks(s.node, s.id)).map((b) => b.n), [1]);
    const list = await c.sessions({ node: s.node, labels: { lang: "ts" } });
    assert.ok(list.sessions.some((x) => x.id === s.id));
    assert.equal((await c.updateSession(s.node, s.id, { title: "ts2" })).title, "ts2");
    assert.equal((await c.resize(s.node, s.id, 100, 30)).cols, 100);
    assert.ok((await c.nodes()).some((n) => n.name === s.node && n.status === "alive"));
    assert.match(await c.openapi(), /openapi: 3\.1/);
  });

  it("spawns an agent, prompts it, reads it and kills it", async () => {
    const a = await c.spawnAgent({ driver: "generic", node: s.node, program: "sh", args: ["-c", "printf 'READY> '; exec cat"],
      rules: "version 1\nrule prompt ready -- READY>\n" });
    assert.equal(a.driver, "generic");
    assert.equal(a.depth, 1);
    const w = await c.waitAgent(a.node, a.id, { states: ["ready"], timeoutMs: 10000 });
    assert.ok(w.ok, JSON.stringify(w.agent));
    assert.equal(w.agent.state_source, "screen");
    assert.ok((await c.agents()).agents.some((x) => x.id === a.id && x.node === a.node));
    assert.equal((await c.sendAgent(a.node, a.id, "hello agent")).id, a.id);
    // The terminal echoes the line, then cat prints it: both on the screen.
    const out = await eventually("the prompt echoed and printed", async () => {
      const o = await c.agentOutput(a.node, a.id);
      return o.screen.split("hello agent").length === 3 ? o : null;
    });
    assert.ok(out.text.includes("hello agent"));
    assert.ok(out.cursor > 0);
    assert.equal((await c.agentOutput(a.node, a.id, { cursor: out.cursor })).text, "");
    assert.equal((await c.killAgent(a.node, a.id)).state, "exited");
    await assert.rejects(c.agent(a.node, a.id), fm.NotFound);
  });

  it("budgets a 5 MB output and pages it", async () => {
    const r = await c.run(s.node, s.id, "seq 1 700000", { timeoutMs: 60000 });
    assert.equal(r.block.exit_code, 0);
    assert.ok(r.block.end - r.block.start > 5_000_000);
    assert.ok(r.omitted_bytes > 4_000_000, String(r.omitted_bytes));
    assert.ok(r.text.startsWith("1\n2\n3\n"));
    assert.ok(r.text.endsWith("699999\n700000"));
    const page = await c.block(s.node, s.id, r.block.n, { offset: 1000, limit: 3 });
    assert.deepEqual(page.text.split("\n"), ["1001", "1002", "1003"]);
    const g = await c.block(s.node, s.id, r.block.n, { grep: "^12345[0-9]$" });
    assert.equal(g.text.split("\n").length, 10);
    let off = r.block.start;
    while (off < r.block.end) {
      const ch = await c.output(s.node, s.id, { from: off, maxBytes: Math.min(1 << 20, r.block.end - off) });
      assert.equal(ch.offset, off);
      assert.ok(ch.data.length > 0);
      off += ch.data.length;
    }
    assert.equal(off, r.block.end);
    const dec = new TextDecoder();
    assert.ok(dec.decode((await c.recording(s.node, s.id)).slice(0, 20)).startsWith('{"version":3,'));
    assert.ok(dec.decode((await c.recording(s.node, s.id, { format: "v2" })).slice(0, 20)).startsWith('{"version":2,'));
  });

  it("waits for waiting_input, then types", async () => {
    const r = await c.run(s.node, s.id, "read -r name; echo hello-$name", { timeoutMs: 200 });
    assert.equal(r.block.state, "running");
    let w = await c.wait(s.node, s.id, { until: "waiting_input", timeoutMs: 15000 });
    assert.ok(w.ok);
    assert.equal(w.session.state, "waiting_input");
    await c.input(s.node, s.id, "bob\n");
    w = await c.wait(s.node, s.id, { until: "idle", timeoutMs: 15000 });
    assert.ok(w.ok);
    assert.equal(w.block.exit_code, 0);
    assert.match(w.text, /hello-bob/);
  });

  it("reads vim's screen", { skip: process.env.FLEETMUX_TEST_NO_VIM ? "vim not installed" : false }, async () => {
    await c.input(s.node, s.id, "vim -u NONE -N\n");
    const scr = await eventually("vim's screen", async () => {
      const x = await c.screen(s.node, s.id);
      return x.alt_screen && x.text.includes("~") ? x : null;
    });
    assert.equal(scr.rows, (await c.session(s.node, s.id)).rows);
    await c.keys(s.node, s.id, "Esc");
    await c.input(s.node, s.id, ":q!\r");
    await eventually("vim to quit", async () => !(await c.screen(s.node, s.id)).alt_screen);
    assert.ok((await c.wait(s.node, s.id, { until: "idle", timeoutMs: 15000 })).ok);
  });

  it("execs a process with stdout and stderr apart, and digests", async () => {
    const r = await c.exec({ node: s.node, command: "echo out; echo err >&2; exit 4" });
    assert.deepEqual([r.stdout, r.stderr, r.exit_code, r.state], ["out\n", "err\n", 4, "done"]);
    const b = await c.exec({ node: s.node, command: "echo bg; sleep 30", background: true, timeoutMs: 1 });
    assert.equal(b.state, "running");
    assert.equal((await c.getExec(s.node, b.exec_id)).exec_id, b.exec_id);
    // Its output first: a kill may come before the echo.
    for (const deadline = Date.now() + 10000; (await c.execOutput(s.node, b.exec_id, { stream: "stdout" })).data !== "bg\n"; ) {
      assert.ok(Date.now() < deadline, "the background exec's output");
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal((await c.killExec(s.node, b.exec_id)).signal, "SIGKILL");
    assert.equal((await c.waitExec(s.node, b.exec_id, { timeoutMs: 1000 })).state, "done");
    assert.equal((await c.execOutput(s.node, b.exec_id, { stream: "stdout" })).data, "bg\n");
    const d = await c.digest({ budgetTokens: 500 });
    assert.ok(d.tokens <= 500 && d.next.startsWith("c"));
  });

  it("fans out", async () => {
    const addr = `${s.node}/${s.id}`;
    let f = await c.fanout("echo fan-$((40+2))", { selector: { sessions: [addr] }, timeoutMs: 20000 });
    assert.deepEqual([f.ok, f.failed], [1, 0]);
    assert.equal(f.results[0].text, "fan-42");
    assert.equal(f.results[0].block.exit_code, 0);
    assert.equal(f.results[0].error, null);
    f = await c.fanout("exit 5", { selector: { sessions: [addr] }, timeoutMs: 20000 });
    assert.deepEqual([f.ok, f.failed], [0, 1]);
    assert.equal(f.results[0].error.code, "exit_status");
  });

  it("follows output across a controller restart, gap-free", { skip: noControl }, async () => {
    const start = (await c.session(s.node, s.id)).output_offset;
    await c.run(s.node, s.id, "for i in $(seq 1 300); do echo line-$i; sleep 0.005; done; exit", { timeoutMs: 50 });
    const parts = [];
    let n = 0;
    let restarts = 0;
    const deadline = Date.now() + 40000;
    for await (const ch of c.follow(s.node, s.id, { from: start })) {
      assert.equal(ch.offset, start + n);
      parts.push(Buffer.from(ch.data));
      n += ch.data.length;
      if (restarts === 0 && Buffer.concat(parts).includes("line-20\r\n")) {
        await control("restart");
        restarts++;
      }
      assert.ok(Date.now() < deadline, "follow did not end");
    }
    const lines = [...Buffer.concat(parts).toString().matchAll(/line-(\d+)\r\n/g)].map((m) => Number(m[1]));
    assert.deepEqual(lines, Array.from({ length: 300 }, (_, i) => i + 1));
    assert.equal(restarts, 1);
    assert.equal(start + n, (await c.session(s.node, s.id)).output_offset);
  });

  it("runs the README's agent loop", async () => {
    let r = await c.run(s.node, s.id, "for i in $(seq 1 3000); do echo compiling $i; done; echo 'main.c:3: error: boom'; (exit 2)", { timeoutMs: 30000 });
    while (r.block.state === "running") r = await c.wait(s.node, s.id, { until: "idle", timeoutMs: 30000 });
    assert.equal(r.block.exit_code, 2);
    assert.ok(r.omitted_bytes > 0);
    assert.ok(r.text.endsWith("main.c:3: error: boom"), r.text.slice(-100));
    const errors = await c.block(s.node, s.id, r.block.n, { grep: "error|FAIL", maxBytes: -1 });
    assert.deepEqual(errors.text.split("\n"), ["3001: main.c:3: error: boom"]);
  });

  it("throws a typed error for each code", async () => {
    await assert.rejects(c.session(s.node, "nope"), (e) => e instanceof fm.NotFound && e.code === "not_found" && e.status === 404);
    await assert.rejects(c.block(s.node, s.id, 0), fm.BadRequest);
    await assert.rejects(c.session(s.node, "bad name"), fm.BadRequest);
    await assert.rejects(new fm.Client(undefined, "wrong").nodes(), fm.Unauthorized);
    await assert.rejects(c.input(s.node, s.id, "x".repeat(2 << 20)), fm.TooLarge);
    const r = await c.run(s.node, s.id, "sleep 5", { timeoutMs: 50 });
    assert.equal(r.block.state, "running");
    await assert.rejects(c.run(s.node, s.id, "true"), (e) => e instanceof fm.Busy && e.status === 409);
    await c.keys(s.node, s.id, "C-c");
    assert.equal((await c.wait(s.node, s.id, { until: "idle", timeoutMs: 15000 })).block.exit_code, 130);
    const name = `ts-viewer-${process.pid}`;
    const t = await c.createToken(name, "viewer", "1h");
    assert.ok(t.secret);
    await assert.rejects(c.createToken(name, "viewer"), fm.Exists);
    assert.ok((await c.tokens()).some((x) => x.name === name));
    const viewer = new fm.Client(undefined, t.secret);
    assert.equal((await viewer.session(s.node, s.id)).id, s.id);
    await assert.rejects(viewer.run(s.node, s.id, "true"), fm.Forbidden);
    await c.revokeToken(name);
    await assert.rejects(viewer.nodes(), fm.Unauthorized);
    const e2 = await c.createSession({ argv: ["sh", "-c", "exit 0"] });
    assert.ok((await c.wait(e2.node, e2.id, { until: "exited", timeoutMs: 15000 })).ok);
    await assert.rejects(c.run(e2.node, e2.id, "true"), fm.Exited);
    await c.closeSession(e2.node, e2.id);
    assert.equal((await c.health()).status, "ok");
  });

  it("throws Gone for output no longer held", async () => {
    // About 11 MB: more than the 8 MiB scrollback and the two 1 MiB parts of the
    // recording that the harness's node keeps.
    const r = await c.run(s.node, s.id, "seq 1 1500000", { timeoutMs: 60000, maxOutputBytes: 1000 });
    assert.equal(r.block.exit_code, 0);
    await assert.rejects(c.output(s.node, s.id, { from: 0 }), (e) => e instanceof fm.Gone && e.code === "gone" && e.status === 410);
    await assert.rejects(c.follow(s.node, s.id, { from: 1 }).next(), fm.Gone);
    // What is still held is served: from the oldest offset on.
    const { oldest } = await c.output(s.node, s.id, { from: r.block.end });
    assert.ok(oldest > 0 && oldest < r.block.end, String(oldest));
    assert.equal((await c.output(s.node, s.id, { from: oldest, maxBytes: 10 })).offset, oldest);
  });

  it("throws Unavailable for a node that went away", { skip: noControl }, async () => {
    const node2 = await control("node2/start");
    const t = await c.createSession({ node: node2, title: "on-node2" });
    assert.equal((await c.run(t.node, t.id, "echo up", { timeoutMs: 20000 })).text, "up");
    await control("node2/stop");
    // The node is gone: requests to it fail at once, whether the controller has
    // heard of it from gossip yet or not.
    await assert.rejects(c.session(t.node, t.id), (e) => e instanceof fm.Unavailable && e.code === "unavailable" && e.status === 503 && e.detail.includes(node2));
    await assert.rejects(c.run(t.node, t.id, "true"), fm.Unavailable);
  });

  it("throws Timeout when the node does not answer in time", async () => {
    // A program that never reads its terminal: the node cannot type 256 KB of lines
    // into it, and the controller stops waiting for the node's answer.
    const p = await c.createSession({ node: s.node, argv: ["sleep", "60"] });
    try {
      await assert.rejects(c.input(p.node, p.id, ("x".repeat(63) + "\n").repeat(4000)), (e) => e instanceof fm.Timeout && e.code === "timeout" && e.status === 504);
    } finally {
      await c.closeSession(p.node, p.id); // answered: the node is no longer suspect
    }
  });

  it("throws Internal when the node fails", { skip: noControl }, async () => {
    // The node's data dir cannot take the new session's recording: the node fails
    // the request and keeps the details for its log.
    await control("disk/break");
    try {
      await assert.rejects(c.createSession({ node: s.node, argv: ["sleep", "60"] }),
        (e) => e instanceof fm.Internal && e.code === "internal" && e.status === 500 && e.detail.includes("details in its log") && !e.detail.includes("not a directory"));
    } finally {
      await control("disk/fix");
    }
    const made = await c.createSession({ node: s.node, argv: ["sleep", "60"] });
    await c.closeSession(made.node, made.id);
  });

  it("takes a session's writer lease over", async () => {
    // One writer per session: while A's command runs, B is busy until it takes the
    // session over; then A is the one who is busy.
    const names = [`ts-a-${process.pid}`, `ts-b-${process.pid}`];
    const [a, b] = await Promise.all(names.map(async (n) => new fm.Client(undefined, (await c.createToken(n, "operator", "1h")).secret)));
    try {
      assert.equal((await a.run(s.node, s.id, "sleep 30", { timeoutMs: 50 })).block.state, "running");
      await assert.rejects(b.keys(s.node, s.id, "C-c"), (e) => e instanceof fm.Busy && e.detail.includes(`token:${names[0]}`));
      const t = await b.takeOver(s.node, s.id);
      assert.deepEqual([t.session.id, t.previous?.principal, t.previous?.role], [s.id, `token:${names[0]}`, "operator"]);
      await b.keys(s.node, s.id, "C-c");
      assert.equal((await c.wait(s.node, s.id, { until: "idle", timeoutMs: 15000 })).block.exit_code, 130);
      await assert.rejects(a.run(s.node, s.id, "true"), (e) => e instanceof fm.Busy && e.detail.includes(`token:${names[1]}`));
    } finally {
      for (const n of names) await c.revokeToken(n);
    }
  });

  it("sets a policy whose rule denies, and removes it", async () => {
    const doc = "version: 1\nrules:\n  - name: no-ts-marker\n    match: {command: 'fm-deny-ts'}\n    action: deny\n  - name: default\n    action: allow\n";
    const denied = async (fn) => {
      try {
        await fn();
      } catch (e) {
        if (e instanceof fm.Denied) return e;
        throw e;
      }
      return null;
    };
    const before = await c.policy();
    const info = await c.setPolicy(doc);
    const dir = mkdtempSync(join(tmpdir(), "fleetmux-ts-"));
    try {
      assert.ok(info.version > before.version);
      assert.deepEqual([info.document, info.rules, info.redacts], [doc, 2, 0]);
      assert.equal((await c.policy()).version, info.version);
      // Each node applies it within a second: a harmless command that the rule
      // matches is denied once it did.
      const e = await eventually("the node to apply the policy", () => denied(() => c.run(s.node, s.id, "echo fm-deny-ts", { timeoutMs: 20000 })), 10000);
      assert.deepEqual([e.code, e.status, e.rule], ["denied", 403, "no-ts-marker"]);
      assert.ok(e instanceof fm.Forbidden);
      const marker = join(dir, "fm-deny-ts");
      await assert.rejects(c.run(s.node, s.id, `touch ${marker}`, { timeoutMs: 20000 }), (x) => x instanceof fm.Denied && x.rule === "no-ts-marker");
      const f = await c.fanout(`touch ${marker}`, { selector: { sessions: [`${s.node}/${s.id}`] }, timeoutMs: 20000 });
      assert.deepEqual([f.ok, f.failed], [0, 1]);
      assert.deepEqual([f.results[0].error.code, f.results[0].error.rule], ["denied", "no-ts-marker"]);
      assert.ok(!existsSync(marker));
      assert.equal((await c.run(s.node, s.id, "echo allowed", { timeoutMs: 20000 })).text, "allowed");
      // A document that does not parse changes nothing.
      await assert.rejects(c.setPolicy("version: 1\nrules:\n  - name: x\n    action: explode\n"), (x) => x instanceof fm.BadRequest && x.detail.includes("line"));
      assert.equal((await c.policy()).version, info.version);
    } finally {
      const old = await c.deletePolicy();
      assert.equal(old.version, info.version);
      rmSync(dir, { recursive: true, force: true });
    }
    assert.equal((await c.policy()).version, 0);
    await eventually("the node to drop the policy", async () => (await denied(() => c.run(s.node, s.id, "echo fm-deny-ts", { timeoutMs: 20000 }))) === null, 10000);
  });

  it("refuses a looser sandbox than the policy's with code sandbox", async () => {
    const doc = "version: 1\nrules:\n  - name: default\n    action: allow\nsandboxes:\n  profiles:\n    tight: {network: none}\n    open: {network: full}\n  default: tight\n";
    await c.setPolicy(doc);
    try {
      const e = await eventually("the node to apply the sandbox policy", async () => {
        try {
          const made = await c.createSession({ node: s.node, argv: ["sleep", "60"], sandbox: "open" });
          await c.closeSession(made.node, made.id); // the node had not applied the policy yet
          return null;
        } catch (x) {
          if (x instanceof fm.Sandbox) return x;
          if (x instanceof fm.BadRequest) return null; // no such profile yet: the node has not applied the policy
          throw x;
        }
      }, 10000);
      assert.deepEqual([e.code, e.status], ["sandbox", 403]);
      assert.ok(e instanceof fm.Forbidden);
    } finally {
      await c.deletePolicy();
    }
  });

  it("holds a command for a person, who approves or denies it", async () => {
    const doc = "version: 1\nrules:\n  - name: ts-needs-a-human\n    match: {command: 'fm-hold-ts'}\n    action: approve\n    approve_within: 1m\n";
    // The one who asked may not approve: a second admin decides.
    const name = `ts-approver-${process.pid}`;
    const approver = new fm.Client(undefined, (await c.createToken(name, "admin", "1h")).secret);
    const info = await c.setPolicy(doc);
    const dir = mkdtempSync(join(tmpdir(), "fleetmux-ts-"));
    try {
      const cmd = "echo fm-hold-ts; (exit 4)";
      const held = await eventually("the node to apply the policy", async () => {
        try {
          await c.run(s.node, s.id, cmd, { timeoutMs: 20000 });
        } catch (e) {
          if (e instanceof fm.Held) return e;
          throw e;
        }
        return null;
      }, 10000);
      assert.deepEqual([held.code, held.status, held.rule], ["held", 409, "ts-needs-a-human"]);
      assert.ok(held.approval.startsWith(`${s.node}/a`), held.approval);
      assert.ok((await c.approvals()).approvals.some((x) => `${x.node}/${x.id}` === held.approval));
      const a = await c.approval(held.approval);
      assert.deepEqual([a.state, a.kind, a.session, a.command, a.rule, a.policy_version, a.done],
        ["pending", "run", s.id, cmd, "ts-needs-a-human", info.version, false]);
      await assert.rejects(c.approve(held.approval), fm.Forbidden);
      const [node, id] = held.approval.split("/");
      const d = await approver.approve(node, id, { reason: "looks fine" });
      assert.deepEqual([d.state, d.reason], ["approved", "looks fine"]);
      // Approved: the node types it once; its block has the real exit code.
      const done = await c.approval(held.approval, undefined, { waitMs: 20000 });
      assert.ok(done.done);
      assert.equal(done.exit_code, 4);
      const b = await c.block(s.node, s.id, done.block);
      assert.deepEqual([b.block.exit_code, b.block.command, b.text], [4, cmd, "fm-hold-ts"]);
      // Denied: it never runs.
      const marker = join(dir, "fm-hold-ts");
      const h = await c.run(s.node, s.id, `touch ${marker}`, { timeoutMs: 20000 }).then(() => null, (e) => e);
      assert.ok(h instanceof fm.Held, String(h));
      assert.equal((await approver.deny(h.approval, undefined, { reason: "no" })).state, "denied");
      assert.ok((await c.approval(h.approval, undefined, { waitMs: 20000 })).done);
      assert.ok((await c.approvals({ state: "denied" })).approvals.some((x) => `${x.node}/${x.id}` === h.approval));
      assert.ok(!(await c.approvals()).approvals.some((x) => `${x.node}/${x.id}` === h.approval));
      await assert.rejects(approver.approve(h.approval), fm.Gone);
      // A fan-out target is held the same way, its result naming the approval.
      const f = await c.fanout(`touch ${marker}`, { selector: { sessions: [`${s.node}/${s.id}`] }, timeoutMs: 20000 });
      const err = f.results[0].error;
      assert.deepEqual([f.failed, err?.code, err?.rule], [1, "held", "ts-needs-a-human"]);
      assert.equal((await c.deny(err.approval)).state, "denied"); // the asker may deny
      assert.ok(!existsSync(marker));
    } finally {
      await c.deletePolicy();
      await c.revokeToken(name);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("stores a secret on a node and never gets it back", async () => {
    const name = `ts-secret-${process.pid}`;
    const op = `ts-op-secret-${process.pid}`;
    const operator = new fm.Client(undefined, (await c.createToken(op, "operator", "1h")).secret);
    try {
      const info = await c.setSecret(s.node, name, "hunter2-ts");
      assert.deepEqual([info.node, info.name], [s.node, name]);
      assert.ok(info.updated_at);
      const listed = (await c.secrets(s.node)).filter((x) => x.name === name);
      assert.equal(listed.length, 1);
      assert.ok(!JSON.stringify(listed).includes("hunter2-ts"));
      await assert.rejects(c.setSecret(s.node, name, "line\nend"), fm.BadRequest);
      await assert.rejects(operator.secrets(s.node), fm.Forbidden);
      await assert.rejects(operator.setSecret(s.node, name, "x"), fm.Forbidden);
      assert.equal((await c.deleteSecret(s.node, name)).name, name);
      assert.ok(!(await c.secrets(s.node)).some((x) => x.name === name));
      await assert.rejects(c.deleteSecret(s.node, name), fm.NotFound);
    } finally {
      await c.revokeToken(op);
      if ((await c.secrets(s.node)).some((x) => x.name === name)) await c.deleteSecret(s.node, name);
    }
  });

  it("throws Limit past the node's session limit", async () => {
    const made = [];
    try {
      await assert.rejects(async () => {
        for (let i = 0; i < 100; i++) made.push(await c.createSession({ node: s.node, argv: ["sleep", "60"] }));
      }, (e) => e instanceof fm.Limit && e.status === 429);
    } finally {
      for (const x of made) await c.closeSession(x.node, x.id);
    }
  });
});

// Every error code of the API (api/openapi.yaml) has its class, and a reply without
// the API's error body (a proxy's page) gets one by its HTTP status.
describe("errors", () => {
  it("has a class for every code", () => {
    const doc = readFileSync(new URL("../../../api/openapi.yaml", import.meta.url), "utf8");
    const codes = doc.match(/enum: \[(bad_request[^\]]*)\]/)[1].split(",").map((x) => x.trim());
    assert.ok(codes.includes("not_found"));
    for (const code of codes) {
      const e = fm.errorFor(418, code, "m");
      assert.notEqual(e.constructor, fm.FleetmuxError, code);
      assert.ok(e instanceof fm.FleetmuxError);
      assert.deepEqual([e.code, e.detail, e.status], [code, "m", 418]);
    }
    for (const [status, cls] of [[410, fm.Gone], [503, fm.Unavailable], [504, fm.Timeout], [500, fm.Internal], [502, fm.Unavailable], [418, fm.BadRequest]]) {
      assert.ok(fm.errorFor(status, undefined, "proxy page") instanceof cls, String(status));
    }
  });
});

// Each operation of api/openapi.yaml is a Client method: its operationId, or renamed
// here, or left out here with the reason.
describe("operations", () => {
  it("each has a method", () => {
    const renamed = {
      listNodes: "nodes", listSessions: "sessions", getSession: "session", listApprovals: "approvals",
      getApproval: "approval", decideApproval: "decide", listTokens: "tokens", getPolicy: "policy", listSecrets: "secrets",
      listAgents: "agents", getAgent: "agent",
    };
    const leftOut = { attach: "a WebSocket", live: "a WebSocket for players", events: "the console's EventSource stream", metrics: "Prometheus text", mcpPost: "MCP's own clients", mcpGet: "MCP's own clients", mcpDelete: "MCP's own clients" };
    const doc = readFileSync(new URL("../../../api/openapi.yaml", import.meta.url), "utf8");
    const ops = [...doc.matchAll(/operationId: (\w+)/g)].map((m) => m[1]);
    assert.ok(ops.includes("run"));
    for (const op of ops) {
      if (op in leftOut) continue;
      const name = renamed[op] ?? op;
      assert.equal(typeof fm.Client.prototype[name], "function", `operation ${op}: no Client.${name}`);
    }
  });
});

// A denied or held reply names its rule, a held one its approval: the error carries
// both (against a fake controller with canned replies).
describe("guardrail errors", () => {
  it("carry the rule and the approval", async () => {
    const replies = {
      "/v1/sessions/n/s/run": [409, { error: { code: "held", message: "held for a person", rule: "prod-needs-a-human", approval: "n/a7" } }],
      "/v1/sessions/n/t/run": [403, { error: { code: "denied", message: "no", rule: "no-disk-wipes" } }],
    };
    const srv = createServer((req, res) => {
      req.resume();
      const [status, body] = replies[req.url];
      res.writeHead(status, { "Content-Type": "application/json" });
      res.end(JSON.stringify(body));
    });
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    try {
      const c = new fm.Client(`http://127.0.0.1:${srv.address().port}`, "t");
      await assert.rejects(c.run("n", "s", "deploy"), (e) => e instanceof fm.Held && e.status === 409 && e.rule === "prod-needs-a-human" && e.approval === "n/a7");
      await assert.rejects(c.run("n", "t", "rm -rf /"), (e) => e instanceof fm.Denied && e.status === 403 && e.rule === "no-disk-wipes" && e.approval === "");
    } finally {
      srv.closeAllConnections?.();
      await new Promise((r) => srv.close(r));
    }
  });
});

// follow resumes from the offset reached when a stream is cut abruptly (no final
// chunk), against a fake controller: the first stream breaks after 5 bytes.
describe("follow", () => {
  it("resumes after a cut", async () => {
    const data = Buffer.from("0123456789abcdef");
    const asked = [];
    const srv = createServer((req, res) => {
      const u = new URL(req.url, "http://x");
      if (u.pathname === "/v1/sessions/n/s/output") {
        const from = Number(u.searchParams.get("from"));
        asked.push(from);
        res.writeHead(200, { "Content-Type": "application/octet-stream", "Fleetmux-Offset": String(from) });
        if (asked.length === 1) {
          res.write(data.subarray(from, from + 5), () => res.socket.destroy()); // cut: no final chunk
          return;
        }
        res.end(data.subarray(from));
        return;
      }
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ node: "n", id: "s", state: "exited", output_offset: data.length }));
    });
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    try {
      const c = new fm.Client(`http://127.0.0.1:${srv.address().port}`, "t");
      const parts = [];
      let n = 0;
      for await (const ch of c.follow("n", "s", { from: 0, minBackoffMs: 10 })) {
        assert.equal(ch.offset, n);
        parts.push(Buffer.from(ch.data));
        n += ch.data.length;
      }
      assert.equal(Buffer.concat(parts).toString(), data.toString());
      assert.deepEqual(asked, [0, 5]);
    } finally {
      srv.closeAllConnections?.();
      await new Promise((r) => srv.close(r));
    }
  });
});

// The token rule (docs/api.md): a token goes only to an address the user gave or
// that dev.json names with it.
describe("resolve", { concurrency: 1 }, () => {
  const saved = {};
  let dir;
  beforeEach(() => {
    for (const k of ["XDG_CONFIG_HOME", "FLEETMUX_ADDR", "FLEETMUX_TOKEN"]) saved[k] = process.env[k];
    dir = mkdtempSync(join(tmpdir(), "fm-resolve-"));
    process.env.XDG_CONFIG_HOME = dir;
    delete process.env.FLEETMUX_ADDR;
    delete process.env.FLEETMUX_TOKEN;
  });
  afterEach(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    rmSync(dir, { recursive: true, force: true });
  });
  const writeDev = (mode = 0o600) => {
    mkdirSync(join(dir, "fleetmux"), { mode: 0o700, recursive: true });
    writeFileSync(fm.devConfigPath(), JSON.stringify({ addr: "http://127.0.0.1:41234", token: "devtok" }), { mode });
    chmodSync(fm.devConfigPath(), mode);
  };
  it("follows the rule", () => {
    assert.deepEqual(fm.resolve(), { addr: fm.DEFAULT_ADDR, token: "" });
    assert.throws(() => fm.resolve(undefined, "mine"), (e) => e instanceof fm.BadRequest && /FLEETMUX_ADDR/.test(e.message));
    writeDev();
    const dev = { addr: "http://127.0.0.1:41234", token: "devtok" };
    assert.deepEqual(fm.resolve(), dev);
    assert.deepEqual(fm.resolve("localhost:41234/"), dev);
    assert.deepEqual(fm.resolve("http://[::1]:41234"), dev);
    assert.deepEqual(fm.resolve("http://127.0.0.1:41235"), { addr: "http://127.0.0.1:41235", token: "" });
    assert.deepEqual(fm.resolve(undefined, "mine"), { addr: dev.addr, token: "mine" });
    assert.deepEqual(fm.resolve("http://10.0.0.1:7070", "mine"), { addr: "http://10.0.0.1:7070", token: "mine" });
    process.env.FLEETMUX_ADDR = "http://localhost:41234";
    assert.deepEqual(fm.resolve(), dev);
  });
  it("says what to do when no controller answers", async () => {
    // a port nothing listens on (any longer)
    const srv = createServer();
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    const addr = `http://127.0.0.1:${srv.address().port}`;
    await new Promise((r) => srv.close(r));
    const c = new fm.Client(addr, "tok");
    await assert.rejects(c.nodes(), (e) => e instanceof fm.Unavailable && e.code === "unavailable" &&
      e.message.includes(`no controller at ${addr} (ECONNREFUSED`) && /fleetmux dev/.test(e.message) && /FLEETMUX_ADDR/.test(e.message));
  });
  it("ignores a dev.json others may read", () => {
    writeDev(0o644);
    assert.equal(fm.readDevConfig(), null);
    assert.deepEqual(fm.resolve(), { addr: fm.DEFAULT_ADDR, token: "" });
  });
});
