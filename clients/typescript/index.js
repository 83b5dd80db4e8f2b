// fleetmux: a client of the fleetmux controller's HTTP API (api/openapi.yaml) for
// Node >= 18: global fetch, no dependencies. Types: index.d.ts. Results are the
// API's JSON as it is (r.block.exit_code, r.text); errors are FleetmuxError
// subclasses by code.

import { lstatSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

export const DEFAULT_ADDR = "http://127.0.0.1:7070";
const NAME = /^[A-Za-z0-9_-]{1,63}$/;

/**
 * An error reply of the API, or a check made before sending (status 0). rule names
 * the guardrail rule behind a denied or held reply; approval is the address
 * ("NODE/aN") of the approval a held command waits for ("" when the reply has none).
 */
export class FleetmuxError extends Error {
  constructor(code, message, status = 0, extra = {}) {
    super(`${code}: ${message}`);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.detail = message;
    this.rule = extra.rule ?? "";
    this.approval = extra.approval ?? "";
  }
}
export class BadRequest extends FleetmuxError {}
export class Unauthorized extends FleetmuxError {}
export class Forbidden extends FleetmuxError {}
export class NotFound extends FleetmuxError {}
export class Busy extends FleetmuxError {}
export class Exited extends FleetmuxError {}
export class Exists extends FleetmuxError {}
export class Gone extends FleetmuxError {}
export class TooLarge extends FleetmuxError {}
export class Limit extends FleetmuxError {}
export class Unavailable extends FleetmuxError {}
export class Timeout extends FleetmuxError {}
export class Internal extends FleetmuxError {}
/** A guardrail denied the command: .rule names the rule. */
export class Denied extends Forbidden {}
/** The node cannot confine the session as its sandbox profile asks (nothing ran). */
export class Sandbox extends Forbidden {}
/** A guardrail holds the command until a person approves it: .approval is its address (NODE/aN). */
export class Held extends FleetmuxError {}

/** The error class of each API error code. */
export const ERRORS = {
  bad_request: BadRequest, unauthorized: Unauthorized, forbidden: Forbidden, not_found: NotFound,
  busy: Busy, exited: Exited, exists: Exists, gone: Gone, too_large: TooLarge, limit: Limit,
  unavailable: Unavailable, timeout: Timeout, internal: Internal, denied: Denied, sandbox: Sandbox, held: Held,
};

const STATUS_CODES = {
  400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "bad_request",
  409: "busy", 410: "gone", 413: "too_large", 429: "limit", 502: "unavailable", 503: "unavailable", 504: "timeout",
};

/** The error for a reply: by its code, else by its HTTP status. extra: {rule, approval}. */
export function errorFor(status, code, message, extra = {}) {
  if (!code) code = STATUS_CODES[status] ?? (status >= 400 && status < 500 ? "bad_request" : "internal");
  const Cls = ERRORS[code] ?? FleetmuxError;
  return new Cls(code, message, status, extra);
}

/** $XDG_CONFIG_HOME/fleetmux/dev.json (default ~/.config/...), which `fleetmux dev` writes. */
export function devConfigPath() {
  const base = process.env.XDG_CONFIG_HOME || join(homedir(), ".config");
  return join(base, "fleetmux", "dev.json");
}

/** dev.json when it is the user's alone (a regular file, mode 0600 or stricter, not a link); else null. */
export function readDevConfig() {
  const p = devConfigPath();
  try {
    const st = lstatSync(p);
    if (!st.isFile() || (st.mode & 0o077) !== 0) return null;
    const dc = JSON.parse(readFileSync(p, "utf8"));
    if (!dc || typeof dc.addr !== "string" || !dc.addr) return null;
    return { addr: dc.addr, token: typeof dc.token === "string" ? dc.token : "", data: dc.data || "" };
  } catch {
    return null; // no dev.json
  }
}

function normalize(addr) {
  if (!addr.includes("://")) addr = "http://" + addr;
  return addr.replace(/\/+$/, "");
}

function addrKey(addr) {
  let u;
  try {
    u = new URL(normalize(addr));
  } catch {
    return null;
  }
  let host = u.hostname.toLowerCase().replace(/\.$/, "");
  if (host === "localhost" || host === "[::1]" || host === "127.0.0.1") host = "127.0.0.1";
  const port = u.port || (u.protocol === "https:" ? "443" : "80");
  return `${u.protocol}//${host}:${port}${u.pathname.replace(/\/+$/, "")}`;
}

/** Whether a and b are the same controller address (localhost, 127.0.0.1 and ::1 are one host; a trailing slash is nothing). */
export function sameAddr(a, b) {
  const ka = addrKey(a);
  return ka !== null && ka === addrKey(b);
}

/**
 * The address and token as the CLI finds them (docs/api.md): the arguments, else
 * FLEETMUX_ADDR / FLEETMUX_TOKEN. Neither: dev.json's, else the default address
 * without a token. An address alone: dev.json's token when the address is dev's.
 * A token alone: dev.json's address; without a dev.json an error, since a token is
 * never sent to the default address unless it is named.
 */
export function resolve(addr, token) {
  addr = addr || process.env.FLEETMUX_ADDR || "";
  token = token || process.env.FLEETMUX_TOKEN || "";
  const dev = readDevConfig();
  if (!addr && !token) {
    if (dev) ({ addr, token } = dev);
  } else if (addr && !token) {
    if (dev && sameAddr(addr, dev.addr)) ({ addr, token } = dev);
  } else if (!addr && token) {
    if (!dev) {
      throw new BadRequest("bad_request",
        `FLEETMUX_TOKEN (or a token) is given but no address: set FLEETMUX_ADDR (or pass addr) to the controller the token belongs to; it is not sent to the default ${DEFAULT_ADDR}, where anyone on this machine may listen`);
    }
    addr = dev.addr;
  }
  return { addr: normalize(addr || DEFAULT_ADDR), token };
}

function checkName(what, s) {
  if (typeof s !== "string" || !NAME.test(s)) {
    throw new BadRequest("bad_request", `${what} ${JSON.stringify(s)}: want [A-Za-z0-9_-]{1,63}`);
  }
}

const APPROVAL_ID = /^a[1-9][0-9]*$/;

// approvalPath is /v1/approvals/NODE/ID, from node and id or from an address NODE/ID alone.
function approvalPath(node, id) {
  if (id === undefined && typeof node === "string" && node.includes("/")) [node, id] = node.split("/", 2);
  checkName("node", node);
  if (typeof id !== "string" || !APPROVAL_ID.test(id)) {
    throw new BadRequest("bad_request", `approval id ${JSON.stringify(id)}: want a1, a2, ...`);
  }
  return `/v1/approvals/${node}/${id}`;
}

function dropUndefined(o) {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function retryable(e) {
  if (e instanceof FleetmuxError) return e.status >= 500 || e.code === "unavailable" || e.code === "timeout";
  return !(e && e.name === "AbortError");
}

/** Calls one controller. */
export class Client {
  /**
   * @param {string} [addr] the controller's URL (default: FLEETMUX_ADDR, dev.json, http://127.0.0.1:7070)
   * @param {string} [token] the API token (default: FLEETMUX_TOKEN, dev.json)
   * @param {{actor?: string}} [opts]
   */
  constructor(addr, token, opts = {}) {
    const r = resolve(addr, token);
    this.addr = r.addr;
    this.token = r.token;
    this.actor = opts.actor;
  }

  // body is sent as JSON; raw ({data, type}) as it is, with its content type.
  async #request(method, path, { query, body, raw, accept = "application/json", signal } = {}) {
    const u = new URL(this.addr + path);
    for (const [k, v] of query ?? []) if (v !== undefined && v !== null) u.searchParams.append(k, String(v));
    const headers = { Accept: accept, "User-Agent": "fleetmux-typescript" };
    let data;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      data = JSON.stringify(body);
    } else if (raw !== undefined) {
      headers["Content-Type"] = raw.type;
      data = raw.data;
    }
    if (this.token) headers.Authorization = "Bearer " + this.token;
    if (this.actor) headers["Fleetmux-Actor"] = this.actor;
    let resp;
    try {
      resp = await fetch(u, { method, headers, body: data, signal });
    } catch (e) {
      if (e?.name === "AbortError" || !(e instanceof TypeError)) throw e;
      // fetch's "fetch failed": the reason (ECONNREFUSED, ENOTFOUND…) is its cause
      const c = e.cause;
      const why = c?.code ? `${c.code}${c.message ? ": " + c.message : ""}` : (c?.message ?? e.message);
      const err = new Unavailable("unavailable",
        `no controller at ${this.addr} (${why}): is \`fleetmux dev\` running? Set FLEETMUX_ADDR (or pass addr) to the controller's address`);
      err.cause = e;
      throw err;
    }
    if (resp.status >= 400) {
      const raw = await resp.text().catch(() => "");
      let code, msg, extra;
      try {
        const err = JSON.parse(raw).error;
        code = err.code;
        msg = err.message;
        extra = { rule: err.rule, approval: err.approval };
      } catch {
        msg = `HTTP ${resp.status}: ${raw.slice(0, 200).trim()}`;
      }
      throw errorFor(resp.status, code, msg, extra);
    }
    return resp;
  }

  async #json(method, path, opts) {
    const resp = await this.#request(method, path, opts);
    const text = await resp.text();
    return text.trim() ? JSON.parse(text) : {};
  }

  #spath(node, id, suffix = "") {
    checkName("node", node);
    checkName("session", id);
    return `/v1/sessions/${node}/${id}${suffix}`;
  }

  async nodes() {
    return (await this.#json("GET", "/v1/nodes")).nodes;
  }

  async sessions({ node, labels } = {}) {
    const query = [["node", node], ...Object.entries(labels ?? {}).sort().map(([k, v]) => ["label", `${k}=${v}`])];
    return this.#json("GET", "/v1/sessions", { query });
  }

  async createSession(req = {}) {
    return this.#json("POST", "/v1/sessions", { body: dropUndefined(req) });
  }

  async session(node, id) {
    return this.#json("GET", this.#spath(node, id));
  }

  async updateSession(node, id, patch) {
    return this.#json("PATCH", this.#spath(node, id), { body: dropUndefined(patch) });
  }

  async closeSession(node, id) {
    return this.#json("DELETE", this.#spath(node, id));
  }

  async run(node, id, command, opts = {}) {
    const body = dropUndefined({
      command, timeout_ms: opts.timeoutMs, max_output_bytes: opts.maxOutputBytes, idempotency_key: opts.idempotencyKey,
    });
    return this.#json("POST", this.#spath(node, id, "/run"), { body, signal: opts.signal });
  }

  async input(node, id, data) {
    await this.#json("POST", this.#spath(node, id, "/input"), { body: { data } });
  }

  async keys(node, id, ...keys) {
    await this.#json("POST", this.#spath(node, id, "/keys"), { body: { keys } });
  }

  /**
   * Takes the session's writer lease (operator or admin): one writer per session at a
   * time, others get Busy naming the holder. The writer that held it is told;
   * .previous names it (absent: nobody held it).
   */
  async takeOver(node, id) {
    return this.#json("POST", this.#spath(node, id, "/take_over"));
  }

  async resize(node, id, cols, rows) {
    return this.#json("POST", this.#spath(node, id, "/resize"), { body: { cols, rows } });
  }

  async screen(node, id) {
    return this.#json("GET", this.#spath(node, id, "/screen"));
  }

  async blocks(node, id) {
    return (await this.#json("GET", this.#spath(node, id, "/blocks"))).blocks;
  }

  async block(node, id, n, opts = {}) {
    const query = [["offset", opts.offset], ["limit", opts.limit], ["grep", opts.grep], ["max_bytes", opts.maxBytes]];
    return this.#json("GET", this.#spath(node, id, `/blocks/${n}`), { query });
  }

  async wait(node, id, opts = {}) {
    const query = [["until", opts.until ?? "idle"], ["timeout_ms", opts.timeoutMs], ["after", opts.after]];
    return this.#json("GET", this.#spath(node, id, "/wait"), { query, signal: opts.signal });
  }

  async output(node, id, opts = {}) {
    const from = opts.from ?? 0;
    const resp = await this.#request("GET", this.#spath(node, id, "/output"), {
      query: [["from", from], ["max_bytes", opts.maxBytes]], accept: "application/octet-stream",
    });
    const data = new Uint8Array(await resp.arrayBuffer());
    const h = (k, d) => Number(resp.headers.get(k) ?? d);
    return { offset: h("Fleetmux-Offset", from), data, end: h("Fleetmux-End", 0), oldest: h("Fleetmux-Oldest", 0) };
  }

  /** The session's whole recording as one asciicast file: v3, or v2 with opts.format "v2". */
  async recording(node, id, opts = {}) {
    const resp = await this.#request("GET", this.#spath(node, id, "/recording"), {
      query: [["format", opts.format ?? "v3"]], accept: "application/x-asciicast",
    });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /**
   * Yields the session's raw output from opts.from, in order, until the session has
   * exited and all of its output was yielded. It survives a controller restart: a
   * broken stream (or 5xx, unavailable, timeout) reconnects from the offset reached,
   * so no byte is yielded twice and none is skipped; when that offset is no longer
   * held it throws Gone. Stop early with break or opts.signal.
   */
  async *follow(node, id, opts = {}) {
    const from = opts.from ?? 0;
    const minBackoff = opts.minBackoffMs ?? 100;
    const maxBackoff = opts.maxBackoffMs ?? 2000;
    let next = from;
    let connected = false;
    let backoff = minBackoff;
    const pause = async () => {
      await sleep(backoff);
      backoff = Math.min(2 * backoff, maxBackoff);
    };
    for (;;) {
      if (opts.signal?.aborted) return;
      let resp;
      try {
        resp = await this.#request("GET", this.#spath(node, id, "/output"), {
          query: [["from", next], ["follow", 1]], accept: "application/octet-stream", signal: opts.signal,
        });
      } catch (e) {
        if (opts.signal?.aborted) return;
        if (connected && e instanceof NotFound) return;
        if (!retryable(e)) throw e;
        await pause();
        continue;
      }
      const off = Number(resp.headers.get("Fleetmux-Offset") ?? next);
      let skip = 0;
      if (off > next && !connected && from === 0) {
        next = off;
      } else if (off > next) {
        await resp.body?.cancel();
        throw new Gone("gone", `output of ${node}/${id} from offset ${next} is no longer held (the controller resumed at ${off})`, 200);
      } else if (off < next) {
        skip = next - off;
      }
      connected = true;
      let got = 0;
      let clean = false;
      const reader = resp.body.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) {
            clean = true;
            break;
          }
          let data = value;
          if (skip > 0) {
            const d = Math.min(skip, data.length);
            data = data.subarray(d);
            skip -= d;
          }
          if (data.length > 0) {
            const chunk = { offset: next, data };
            next += data.length;
            got += data.length;
            yield chunk;
          }
        }
      } catch (e) {
        if (opts.signal?.aborted) return;
        // cut: reconnect from next
      } finally {
        reader.releaseLock?.();
      }
      if (got > 0) backoff = minBackoff;
      if (clean) {
        try {
          const s = await this.session(node, id);
          if (s.state === "exited" && (next >= s.output_offset || got === 0)) return;
        } catch (e) {
          if (e instanceof NotFound) return;
          if (!retryable(e)) throw e;
        }
      }
      if (got === 0) await pause();
    }
  }

  #apath(node, id, suffix = "") {
    checkName("node", node);
    checkName("agent", id);
    return `/v1/agents/${node}/${id}${suffix}`;
  }

  /** Coding agents (docs/agents.md), of one node with opts.node. */
  async agents(opts = {}) {
    return this.#json("GET", "/v1/agents", { query: [["node", opts.node]] });
  }

  /** Starts a coding agent: req.driver is claude, codex, opencode, gemini, aider or generic (with req.rules). */
  async spawnAgent(req) {
    return this.#json("POST", "/v1/agents", { body: dropUndefined(req) });
  }

  async agent(node, id) {
    return this.#json("GET", this.#apath(node, id));
  }

  /** Ends the agent, and its children first. */
  async killAgent(node, id) {
    return this.#json("DELETE", this.#apath(node, id));
  }

  /** Types a prompt into the agent and submits it. */
  async sendAgent(node, id, text) {
    return this.#json("POST", this.#apath(node, id, "/send"), { body: { text } });
  }

  async interruptAgent(node, id) {
    return this.#json("POST", this.#apath(node, id, "/interrupt"));
  }

  /** Waits until the agent is in one of opts.states (default: ready or ended); ok false when opts.timeoutMs passed first. */
  async waitAgent(node, id, opts = {}) {
    const query = [["state", opts.states?.join(",")], ["timeout_ms", opts.timeoutMs]];
    return this.#json("GET", this.#apath(node, id, "/wait"), { query, signal: opts.signal });
  }

  /** What the agent printed since opts.cursor, as text; pass the reply's cursor next time. */
  async agentOutput(node, id, opts = {}) {
    const query = [["cursor", opts.cursor || undefined], ["max_bytes", opts.maxBytes]];
    return this.#json("GET", this.#apath(node, id, "/output"), { query });
  }

  /**
   * Runs one command on many targets: selector.nodes and/or selector.labels (or
   * selector.all) select nodes; selector.sessions names NODE/ID sessions directly.
   */
  async fanout(command, opts = {}) {
    const body = dropUndefined({
      selector: dropUndefined(opts.selector ?? {}), command, session: opts.session, shell: opts.shell,
      timeout_ms: opts.timeoutMs, max_output_bytes: opts.maxOutputBytes, batch: opts.batch,
      stop_on_failure: opts.stopOnFailure, idempotency_key: opts.idempotencyKey,
    });
    return this.#json("POST", "/v1/run", { body });
  }

  /**
   * Runs a one-shot process without a terminal: req.argv as it is, or req.command
   * under sh -c. With req.node: an ExecResult; with req.selector (nodes, labels,
   * all): an ExecFanout, one result per node.
   */
  async exec(req) {
    if (req.node !== undefined) checkName("node", req.node);
    const body = dropUndefined({
      node: req.node, selector: req.selector && dropUndefined(req.selector), argv: req.argv, command: req.command,
      cwd: req.cwd, env: req.env, stdin: req.stdin, timeout_ms: req.timeoutMs, max_output_bytes: req.maxOutputBytes,
      background: req.background,
    });
    return this.#json("POST", "/v1/exec", { body });
  }

  #execPath(node, id) {
    checkName("node", node);
    checkName("exec id", id);
    return `/v1/exec/${node}/${id}`;
  }

  /** One exec, running or ended, with its output so far. */
  async getExec(node, id, opts = {}) {
    return this.#json("GET", this.#execPath(node, id), { query: [["max_output_bytes", opts.maxOutputBytes]] });
  }

  /** Waits up to opts.timeoutMs for an exec to end; the exec as it is then. */
  async waitExec(node, id, opts = {}) {
    return this.#json("GET", this.#execPath(node, id) + "/wait", {
      query: [["timeout_ms", opts.timeoutMs], ["max_output_bytes", opts.maxOutputBytes]],
    });
  }

  /** One stream of an exec (opts.stream: stdout or stderr) from opts.from. */
  async execOutput(node, id, opts = {}) {
    return this.#json("GET", this.#execPath(node, id) + "/output", {
      query: [["stream", opts.stream], ["from", opts.from], ["max", opts.max]],
    });
  }

  /** Ends a running exec with its process group (its owner or an admin). */
  async killExec(node, id) {
    return this.#json("DELETE", this.#execPath(node, id));
  }

  /** What happened since opts.since (the next of the last digest), within opts.budgetTokens (4 bytes a token). */
  async digest(opts = {}) {
    return this.#json("GET", "/v1/digest", {
      query: [["since", opts.since], ["scope", opts.scope], ["node", opts.node], ["session", opts.session], ["budget_tokens", opts.budgetTokens]],
    });
  }

  /** The guardrail policy in force (version 0: none is set, everything is allowed). */
  async policy() {
    return this.#json("GET", "/v1/policy");
  }

  /**
   * Stores a policy document (YAML, or JSON) as the one in force (admin); every node
   * applies it within a second. A document that does not parse is a BadRequest
   * naming its line and field, and changes nothing.
   */
  async setPolicy(document) {
    return this.#json("PUT", "/v1/policy", { raw: { data: document, type: "application/yaml" } });
  }

  /** Removes the policy (admin): every node then allows every command. Returns the policy that was in force. */
  async deletePolicy() {
    return this.#json("DELETE", "/v1/policy");
  }

  /**
   * Approvals fleet-wide (or of opts.node), oldest first: pending ones by default;
   * opts.state: pending, approved, denied, expired, or "all". Nodes that did not
   * answer are listed in .unavailable.
   */
  async approvals(opts = {}) {
    if (opts.node !== undefined) checkName("node", opts.node);
    return this.#json("GET", "/v1/approvals", { query: [["node", opts.node], ["state", opts.state]] });
  }

  /**
   * One approval, by node and id or by its address ("NODE/aN", as Held's .approval
   * gives it; id then undefined). With opts.waitMs it waits (up to that, at most 10
   * min) until the approval is done: decided, and when an approved run was typed by
   * the node, until its block finished (.block, .exit_code).
   */
  async approval(node, id, opts = {}) {
    return this.#json("GET", approvalPath(node, id), { query: [["wait_ms", opts.waitMs]], signal: opts.signal });
  }

  /**
   * Approves ("approve") or denies ("deny") a pending approval: admin, or a role its
   * rule names as approvers; never the one who asked.
   */
  async decide(node, id, decision, opts = {}) {
    return this.#json("POST", approvalPath(node, id), { body: dropUndefined({ decision, reason: opts.reason }) });
  }

  /** Approves a pending approval (see decide): a held run is then typed by the node. */
  async approve(node, id, opts = {}) {
    return this.decide(node, id, "approve", opts);
  }

  /** Denies a pending approval (see decide): the command never runs. */
  async deny(node, id, opts = {}) {
    return this.decide(node, id, "deny", opts);
  }

  /**
   * Stores a secret on a node (admin), replacing one of the same name; the node types
   * it at a password prompt (sudo) that a policy `secrets` entry names. No call
   * returns a value back.
   */
  async setSecret(node, name, value) {
    checkName("node", node);
    checkName("secret", name);
    return this.#json("PUT", `/v1/nodes/${node}/secrets/${name}`, { body: { value } });
  }

  /** The names of a node's secrets (admin); never a value. */
  async secrets(node) {
    checkName("node", node);
    return (await this.#json("GET", `/v1/nodes/${node}/secrets`)).secrets;
  }

  /** Removes a secret from a node (admin). */
  async deleteSecret(node, name) {
    checkName("node", node);
    checkName("secret", name);
    return this.#json("DELETE", `/v1/nodes/${node}/secrets/${name}`);
  }

  async tokens() {
    return (await this.#json("GET", "/v1/tokens")).tokens;
  }

  async createToken(name, role, ttl) {
    return this.#json("POST", "/v1/tokens", { body: dropUndefined({ name, role, ttl }) });
  }

  async revokeToken(name) {
    checkName("token", name);
    return this.#json("DELETE", `/v1/tokens/${name}`);
  }

  async health() {
    try {
      return await this.#json("GET", "/healthz");
    } catch (e) {
      if (e instanceof FleetmuxError && e.status === 503) return { status: "degraded", nats: false, nodes: 0 };
      throw e;
    }
  }

  /** The API's OpenAPI 3.1 document (YAML). */
  async openapi() {
    const resp = await this.#request("GET", "/v1/openapi.yaml", { accept: "application/yaml" });
    return resp.text();
  }
}
