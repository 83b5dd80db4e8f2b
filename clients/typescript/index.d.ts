// Types of the fleetmux client: the API's JSON shapes (api/openapi.yaml), field
// names as the API writes them.

export declare const DEFAULT_ADDR: string;

export type Labels = Record<string, string>;
export type SessionState = "starting" | "idle" | "running" | "waiting_input" | "exited";
export type Role = "viewer" | "operator" | "admin";

export interface Node {
  name: string;
  status: "alive" | "suspect" | "disconnected" | "dead" | "left";
  labels?: Labels;
  addr: string;
  version: string;
  sessions: number;
  proto?: number;
  since?: string;
}

export interface Session {
  node: string;
  id: string;
  title: string;
  description: string;
  labels?: Labels;
  shell?: string;
  argv?: string[];
  state: SessionState;
  current_command?: string;
  cwd: string;
  last_exit_code?: number;
  exit_code?: number;
  cols: number;
  rows: number;
  pid: number;
  output_offset: number;
  created_at: string;
  waiting_input: boolean;
  echo: boolean;
  blocks: number;
  integration?: "ok" | "lost" | "none";
  /** The driver, when the session runs a coding agent. */
  agent?: string;
}

export interface SessionList {
  sessions: Session[];
  unavailable?: string[];
}

/** Who writes into a session: the verified principal, its actor label and role; attach: a person in an attach. */
export interface Writer {
  principal: string;
  actor?: string;
  role?: Role;
  attach?: boolean;
}

/** The reply of takeOver: the session, and the writer that held its lease before (absent: nobody did). */
export interface TakeOver {
  session: Session;
  previous?: Writer;
}

export interface Block {
  n: number;
  command: string;
  cwd: string;
  state: "running" | "done" | "";
  /** Absent while running, and when it is not known (exit_code_note says why). */
  exit_code?: number;
  started_at: string;
  finished_at?: string;
  start: number;
  end: number;
  fallback?: boolean;
  exit_code_note?: string;
}

/** The reply of run and block: a block, its rendered text within its budget, the session now. */
export interface BlockResult {
  block: Block;
  text: string;
  omitted_bytes: number;
  lost_bytes?: number;
  session: Session;
}

/** The reply of wait: ok is false when the timeout passed first. */
export interface WaitResult extends BlockResult {
  ok: boolean;
}

export interface Screen {
  text: string;
  cursor: { row: number; col: number };
  alt_screen: boolean;
  cols: number;
  rows: number;
  waiting_input: boolean;
  echo: boolean;
}

export interface ErrorInfo {
  code: string;
  message: string;
  /** denied, held: the guardrail rule. */
  rule?: string;
  /** held: the approval's address, NODE/aN. */
  approval?: string;
}

export interface FanoutResult {
  node: string;
  session?: string;
  block?: Block;
  exit_code?: number;
  text: string;
  omitted_bytes?: number;
  duration_ms: number;
  error: ErrorInfo | null;
}

export interface Fanout {
  results: FanoutResult[];
  ok: number;
  failed: number;
}

export interface Selector {
  all?: boolean;
  nodes?: string[];
  labels?: Labels;
  sessions?: string[];
}

/** A piece of raw output: data starts at offset. */
export interface Chunk {
  offset: number;
  data: Uint8Array;
  end?: number;
  oldest?: number;
}

export interface Token {
  name: string;
  role: Role;
  created_at: string;
  expires_at?: string;
  created_by?: string;
}

export interface NewToken extends Token {
  secret: string;
}

export interface Health {
  status: "ok" | "degraded";
  nats: boolean;
  nodes: number;
}

/** The guardrail policy in force: the document as stored and its version (0: none is set). */
export interface PolicyInfo {
  version: number;
  document: string;
  rules: number;
  redacts: number;
}

export type ApprovalState = "pending" | "approved" | "denied" | "expired";

/**
 * A command held by a guardrail rule until a person decides. kind: "run" (the node
 * types it once approved, then block and exit_code) or "line" (a line typed at a
 * shell's prompt, which runs it once approved).
 */
export interface Approval {
  /** a<N>; the approval's address is node/id. */
  id: string;
  node: string;
  session: string;
  kind: "run" | "line";
  command: string;
  principal?: string;
  actor?: string;
  role?: string;
  rule: string;
  policy_version: number;
  approvers?: string[];
  state: ApprovalState;
  requested_at: string;
  expires_at: string;
  decided_at?: string;
  decided_by?: string;
  reason?: string;
  block?: number;
  exit_code?: number;
  error?: string;
  done: boolean;
}

export type AgentState = "spawning" | "booting" | "ready" | "working" | "waiting_permission" | "waiting_input" | "done" | "error" | "exited";

/** A coding agent (docs/agents.md): a session running a CLI its driver knows. */
export interface Agent {
  node: string;
  id: string;
  driver: "claude" | "codex" | "opencode" | "gemini" | "aider" | "generic";
  state: AgentState;
  state_source: "hook" | "stream" | "screen" | "process";
  state_since: string;
  /** What the source saw: a hook's event, or a screen rule and the line it matched. */
  evidence?: string;
  /** The parent agent (NODE/ID), or the principal that spawned a root agent. */
  parent?: string;
  depth: number;
  children?: string[];
  usage?: { input_tokens?: number; output_tokens?: number; cost_usd?: number; turns?: number };
  prompt?: string;
  workdir?: string;
  labels?: Labels;
  program?: string;
  rules?: string;
  owner?: string;
  created_at: string;
  exit_code?: number;
}

export interface AgentList {
  agents: Agent[];
  unavailable?: string[];
}

export interface AgentWait {
  agent: Agent;
  ok: boolean;
}

export interface AgentOutput {
  agent: Agent;
  text: string;
  screen: string;
  cursor: number;
  omitted_bytes?: number;
}

export interface SpawnRequest {
  driver: Agent["driver"];
  node?: string;
  cwd?: string;
  prompt?: string;
  parent?: string;
  labels?: Labels;
  env?: Record<string, string>;
  /** ENVVAR to the name of a secret stored on the node. */
  secrets?: Record<string, string>;
  program?: string;
  args?: string[];
  /** The generic driver's rule file. */
  rules?: string;
}

export interface ApprovalList {
  approvals: Approval[];
  unavailable?: string[];
}

/** What anyone learns of a secret stored on a node: never its value. */
export interface SecretInfo {
  node: string;
  name: string;
  updated_at: string;
}

export interface NewSession {
  node?: string;
  title?: string;
  description?: string;
  labels?: Labels;
  shell?: string;
  argv?: string[];
  cwd?: string;
  env?: Record<string, string>;
  cols?: number;
  rows?: number;
}

export interface RunOptions {
  timeoutMs?: number;
  /** The text budget (default 16 KiB; -1: unlimited). */
  maxOutputBytes?: number;
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface BlockOptions {
  offset?: number;
  limit?: number;
  grep?: string;
  /** -1: unlimited. */
  maxBytes?: number;
}

export interface WaitOptions {
  until?: "idle" | "waiting_input" | "exited" | "output";
  timeoutMs?: number;
  after?: number;
  signal?: AbortSignal;
}

export interface FollowOptions {
  from?: number;
  signal?: AbortSignal;
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

export interface FanoutOptions {
  selector: Selector;
  session?: string;
  shell?: string;
  timeoutMs?: number;
  maxOutputBytes?: number;
  batch?: number;
  stopOnFailure?: boolean;
  idempotencyKey?: string;
}

/** An error reply of the API, or a check made before sending (status 0). */
export declare class FleetmuxError extends Error {
  constructor(code: string, message: string, status?: number, extra?: { rule?: string; approval?: string });
  /** The API's error code (bad_request, not_found, busy, ...). */
  readonly code: string;
  /** The HTTP status (0 for a local check). */
  readonly status: number;
  /** The API's message. */
  readonly detail: string;
  /** The guardrail rule behind a denied or held reply ("" otherwise). */
  readonly rule: string;
  /** The address (NODE/aN) of the approval a held command waits for ("" otherwise). */
  readonly approval: string;
}
export declare class BadRequest extends FleetmuxError {}
export declare class Unauthorized extends FleetmuxError {}
export declare class Forbidden extends FleetmuxError {}
export declare class NotFound extends FleetmuxError {}
export declare class Busy extends FleetmuxError {}
export declare class Exited extends FleetmuxError {}
export declare class Exists extends FleetmuxError {}
export declare class Gone extends FleetmuxError {}
export declare class TooLarge extends FleetmuxError {}
export declare class Limit extends FleetmuxError {}
export declare class Unavailable extends FleetmuxError {}
export declare class Timeout extends FleetmuxError {}
export declare class Internal extends FleetmuxError {}
export declare class Denied extends Forbidden {}
export declare class Sandbox extends Forbidden {}
export declare class Held extends FleetmuxError {}
export declare const ERRORS: Record<string, typeof FleetmuxError>;
export declare function errorFor(status: number, code: string | undefined, message: string, extra?: { rule?: string; approval?: string }): FleetmuxError;

export declare function devConfigPath(): string;
/** dev.json when it is the user's alone (a regular file, mode 0600, not a link); else null. */
export declare function readDevConfig(): { addr: string; token: string; data: string } | null;
/** Whether a and b are the same controller address (localhost, 127.0.0.1 and ::1 are one host). */
export declare function sameAddr(a: string, b: string): boolean;
/** The address and token as the CLI finds them; throws BadRequest for a token without an address and no dev.json. */
export declare function resolve(addr?: string, token?: string): { addr: string; token: string };

export declare class Client {
  /** addr and token default to FLEETMUX_ADDR/FLEETMUX_TOKEN, else `fleetmux dev`'s dev.json. */
  constructor(addr?: string, token?: string, opts?: { actor?: string });
  readonly addr: string;
  readonly token: string;
  nodes(): Promise<Node[]>;
  sessions(filter?: { node?: string; labels?: Labels }): Promise<SessionList>;
  createSession(req?: NewSession): Promise<Session>;
  session(node: string, id: string): Promise<Session>;
  updateSession(node: string, id: string, patch: { title?: string; description?: string; labels?: Labels }): Promise<Session>;
  closeSession(node: string, id: string): Promise<Session>;
  run(node: string, id: string, command: string, opts?: RunOptions): Promise<BlockResult>;
  input(node: string, id: string, data: string): Promise<void>;
  keys(node: string, id: string, ...keys: string[]): Promise<void>;
  takeOver(node: string, id: string): Promise<TakeOver>;
  resize(node: string, id: string, cols: number, rows: number): Promise<Session>;
  screen(node: string, id: string): Promise<Screen>;
  blocks(node: string, id: string): Promise<Block[]>;
  block(node: string, id: string, n: number, opts?: BlockOptions): Promise<BlockResult>;
  wait(node: string, id: string, opts?: WaitOptions): Promise<WaitResult>;
  output(node: string, id: string, opts?: { from?: number; maxBytes?: number }): Promise<Chunk>;
  recording(node: string, id: string, opts?: { format?: "v3" | "v2" }): Promise<Uint8Array>;
  follow(node: string, id: string, opts?: FollowOptions): AsyncGenerator<Chunk, void, undefined>;
  agents(opts?: { node?: string }): Promise<AgentList>;
  spawnAgent(req: SpawnRequest): Promise<Agent>;
  agent(node: string, id: string): Promise<Agent>;
  killAgent(node: string, id: string): Promise<Agent>;
  sendAgent(node: string, id: string, text: string): Promise<Agent>;
  interruptAgent(node: string, id: string): Promise<Agent>;
  waitAgent(node: string, id: string, opts?: { states?: AgentState[]; timeoutMs?: number; signal?: AbortSignal }): Promise<AgentWait>;
  agentOutput(node: string, id: string, opts?: { cursor?: number; maxBytes?: number }): Promise<AgentOutput>;
  fanout(command: string, opts: FanoutOptions): Promise<Fanout>;
  exec(req: ExecRequest): Promise<ExecResult | ExecFanout>;
  getExec(node: string, id: string, opts?: { maxOutputBytes?: number }): Promise<ExecResult>;
  waitExec(node: string, id: string, opts?: { timeoutMs?: number; maxOutputBytes?: number }): Promise<ExecResult>;
  execOutput(node: string, id: string, opts?: { stream?: "stdout" | "stderr"; from?: number; max?: number }): Promise<ExecOutput>;
  killExec(node: string, id: string): Promise<ExecResult>;
  digest(opts?: { since?: string; scope?: "fleet" | "node" | "session"; node?: string; session?: string; budgetTokens?: number }): Promise<Digest>;
  policy(): Promise<PolicyInfo>;
  setPolicy(document: string): Promise<PolicyInfo>;
  deletePolicy(): Promise<PolicyInfo>;
  approvals(opts?: { node?: string; state?: ApprovalState | "all" }): Promise<ApprovalList>;
  /** By node and id, or by the address alone (node "NODE/aN", id undefined). */
  approval(node: string, id?: string, opts?: { waitMs?: number; signal?: AbortSignal }): Promise<Approval>;
  decide(node: string, id: string | undefined, decision: "approve" | "deny", opts?: { reason?: string }): Promise<Approval>;
  approve(node: string, id?: string, opts?: { reason?: string }): Promise<Approval>;
  deny(node: string, id?: string, opts?: { reason?: string }): Promise<Approval>;
  setSecret(node: string, name: string, value: string): Promise<SecretInfo>;
  secrets(node: string): Promise<SecretInfo[]>;
  deleteSecret(node: string, name: string): Promise<SecretInfo>;
  tokens(): Promise<Token[]>;
  createToken(name: string, role: Role, ttl?: string): Promise<NewToken>;
  revokeToken(name: string): Promise<Token>;
  health(): Promise<Health>;
  openapi(): Promise<string>;
}

/** A one-shot process to run (POST /v1/exec): node, or selector for one result per node. */
export interface ExecRequest {
  node?: string;
  selector?: { all?: boolean; nodes?: string[]; labels?: Record<string, string> };
  argv?: string[];
  command?: string;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  timeoutMs?: number;
  maxOutputBytes?: number;
  background?: boolean;
}

/** An exec: stdout and stderr apart, each cut to head and tail (*_omitted). */
export interface ExecResult {
  node: string;
  exec_id: string;
  argv?: string[];
  state: "running" | "done";
  exit_code?: number;
  signal?: string;
  stdout: string;
  stderr: string;
  stdout_omitted: number;
  stderr_omitted: number;
  stdout_bytes: number;
  stderr_bytes: number;
  timed_out: boolean;
  background?: boolean;
  duration_ms: number;
  started_at: string;
  error?: { code: string; message: string; rule?: string; approval?: string };
}

export interface ExecFanout {
  results: ExecResult[];
  ok: number;
  failed: number;
}

export interface ExecOutput {
  stream: string;
  offset: number;
  next: number;
  data: string;
  end: number;
  oldest: number;
  done: boolean;
}

/** What happened since a cursor, within a token budget; pass next as since next time. */
export interface Digest {
  scope: string;
  since: string;
  next: string;
  budget_tokens: number;
  tokens: number;
  text: string;
  failed: number;
  succeeded: number;
  running: number;
  waiting: number;
  pending: number;
  decided: number;
  omitted: number;
  read_block: string[];
  unavailable?: string[];
}
