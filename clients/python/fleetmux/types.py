"""The API's JSON shapes as dataclasses: field names are the API's."""

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar, get_type_hints

T = TypeVar("T")


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = getattr(tp, "__origin__", None)
    args = getattr(tp, "__args__", ())
    if origin is list and args:
        return [_convert(args[0], v) for v in value]
    if origin is not None and type(None) in args:  # Optional[X]
        inner = [a for a in args if a is not type(None)][0]
        return _convert(inner, value)
    if dataclasses.is_dataclass(tp):
        return from_json(tp, value)
    return value


def from_json(cls: Type[T], data: Dict[str, Any]) -> T:
    """Builds cls from a JSON object; fields the class does not know are ignored
    (the API may add fields)."""
    hints = get_type_hints(cls, vars(sys.modules[cls.__module__]))
    kw = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kw[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**kw)


@dataclass
class Node:
    name: str = ""
    status: str = ""  # alive, suspect, disconnected, dead, left
    labels: Dict[str, str] = field(default_factory=dict)
    addr: str = ""
    version: str = ""
    sessions: int = 0
    proto: int = 0
    since: str = ""


@dataclass
class Session:
    node: str = ""
    id: str = ""
    title: str = ""
    description: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    shell: str = ""
    argv: List[str] = field(default_factory=list)
    state: str = ""  # starting, idle, running, waiting_input, exited
    current_command: str = ""
    cwd: str = ""
    last_exit_code: Optional[int] = None
    exit_code: Optional[int] = None
    cols: int = 0
    rows: int = 0
    pid: int = 0
    output_offset: int = 0
    created_at: str = ""
    waiting_input: bool = False
    echo: bool = False
    blocks: int = 0
    integration: str = ""
    agent: str = ""  # the driver, when the session runs a coding agent

    @property
    def address(self) -> str:
        """NODE/ID."""
        return "%s/%s" % (self.node, self.id)


@dataclass
class SessionList:
    sessions: List[Session] = field(default_factory=list)
    unavailable: List[str] = field(default_factory=list)


@dataclass
class Writer:
    """Who writes into a session: the verified principal ("token:NAME",
    "ssh:SHA256:..."), the actor label it gave itself, its role; attach is set for
    a person typing in an attach."""

    principal: str = ""
    actor: str = ""
    role: str = ""
    attach: bool = False


@dataclass
class TakeOver:
    """The reply of take_over: the session, and the writer that held its lease
    before (None: nobody did)."""

    session: Session = field(default_factory=Session)
    previous: Optional[Writer] = None


@dataclass
class Block:
    n: int = 0
    command: str = ""
    cwd: str = ""
    state: str = ""  # running, done
    exit_code: Optional[int] = None  # None while running, or when not known (exit_code_note)
    started_at: str = ""
    finished_at: Optional[str] = None
    start: int = 0
    end: int = 0
    fallback: bool = False
    exit_code_note: str = ""


@dataclass
class BlockResult:
    """The reply of run and of block: a block, its rendered text, the session now."""

    block: Block = field(default_factory=Block)
    text: str = ""
    omitted_bytes: int = 0
    lost_bytes: int = 0
    session: Session = field(default_factory=Session)


@dataclass
class WaitResult(BlockResult):
    """The reply of wait: ok is False when the timeout passed first."""

    ok: bool = False


@dataclass
class Cursor:
    row: int = 0
    col: int = 0


@dataclass
class Screen:
    text: str = ""
    cursor: Cursor = field(default_factory=Cursor)
    alt_screen: bool = False
    cols: int = 0
    rows: int = 0
    waiting_input: bool = False
    echo: bool = False


@dataclass
class ErrorInfo:
    code: str = ""
    message: str = ""
    rule: str = ""  # denied, held: the guardrail rule
    approval: str = ""  # held: the approval's address, NODE/aN


@dataclass
class FanoutResult:
    node: str = ""
    session: str = ""
    block: Optional[Block] = None
    exit_code: Optional[int] = None
    text: str = ""
    omitted_bytes: int = 0
    duration_ms: int = 0
    error: Optional[ErrorInfo] = None


@dataclass
class Fanout:
    results: List[FanoutResult] = field(default_factory=list)
    ok: int = 0
    failed: int = 0


@dataclass
class Chunk:
    """A piece of raw output: data starts at offset; end and oldest are the
    session's output end and the oldest readable offset when it was read."""

    offset: int = 0
    data: bytes = b""
    end: int = 0
    oldest: int = 0


@dataclass
class Token:
    name: str = ""
    role: str = ""
    created_at: str = ""
    expires_at: Optional[str] = None
    created_by: str = ""


@dataclass
class NewToken(Token):
    secret: str = ""


@dataclass
class Health:
    status: str = ""
    nats: bool = False
    nodes: int = 0


@dataclass
class PolicyInfo:
    """The guardrail policy in force: the document as stored and its version (0:
    none is set), which every decision and audit record names."""

    version: int = 0
    document: str = ""
    rules: int = 0
    redacts: int = 0


@dataclass
class Approval:
    """A command held by a guardrail rule until a person decides (GET /v1/approvals).
    kind: "run" (the node types it once approved, then .block and .exit_code) or
    "line" (a line typed at a shell's prompt, which runs it once approved)."""

    id: str = ""  # a<N>
    node: str = ""
    session: str = ""
    kind: str = ""
    command: str = ""
    principal: str = ""
    actor: str = ""
    role: str = ""
    rule: str = ""
    policy_version: int = 0
    approvers: List[str] = field(default_factory=list)
    state: str = ""  # pending, approved, denied, expired
    requested_at: str = ""
    expires_at: str = ""
    decided_at: Optional[str] = None
    decided_by: str = ""
    reason: str = ""
    block: int = 0
    exit_code: Optional[int] = None
    error: str = ""
    done: bool = False

    @property
    def address(self) -> str:
        """NODE/ID."""
        return "%s/%s" % (self.node, self.id)


@dataclass
class ApprovalList:
    approvals: List[Approval] = field(default_factory=list)
    unavailable: List[str] = field(default_factory=list)


@dataclass
class SecretInfo:
    """What anyone learns of a secret stored on a node: never its value."""

    node: str = ""
    name: str = ""
    updated_at: str = ""


@dataclass
class AgentUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    turns: int = 0


@dataclass
class Agent:
    """A coding agent (docs/agents.md): a session running a CLI its driver knows.
    state: spawning, booting, ready, working, waiting_permission, waiting_input,
    done, error, exited; state_source: hook, stream, screen, process."""

    node: str = ""
    id: str = ""
    driver: str = ""
    state: str = ""
    state_source: str = ""
    state_since: str = ""
    evidence: str = ""
    parent: str = ""
    depth: int = 0
    children: List[str] = field(default_factory=list)
    usage: Optional[AgentUsage] = None
    prompt: str = ""
    workdir: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    program: str = ""
    rules: str = ""
    owner: str = ""
    created_at: str = ""
    exit_code: Optional[int] = None

    @property
    def address(self) -> str:
        """NODE/ID."""
        return "%s/%s" % (self.node, self.id)


@dataclass
class AgentList:
    agents: List[Agent] = field(default_factory=list)
    unavailable: List[str] = field(default_factory=list)


@dataclass
class AgentWait:
    agent: Agent = field(default_factory=Agent)
    ok: bool = False


@dataclass
class AgentOutput:
    """What an agent printed since a cursor, as text; its screen; the next cursor."""

    agent: Agent = field(default_factory=Agent)
    text: str = ""
    screen: str = ""
    cursor: int = 0
    omitted_bytes: int = 0


@dataclass
class ExecResult:
    """A one-shot process (exec): stdout and stderr apart, each cut to head and
    tail (*_omitted counts what was left out); exit_code is None while it runs
    (128+N when signal N ended it, named in signal)."""

    node: str = ""
    exec_id: str = ""
    argv: List[str] = field(default_factory=list)
    state: str = ""  # running, done
    exit_code: Optional[int] = None
    signal: str = ""
    stdout: str = ""
    stderr: str = ""
    stdout_omitted: int = 0
    stderr_omitted: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    timed_out: bool = False
    background: bool = False
    duration_ms: int = 0
    started_at: str = ""
    error: Optional[ErrorInfo] = None


@dataclass
class ExecFanout:
    results: List[ExecResult] = field(default_factory=list)
    ok: int = 0
    failed: int = 0


@dataclass
class ExecOutput:
    """One stream of an exec from offset; next is where to read on."""

    stream: str = ""
    offset: int = 0
    next: int = 0
    data: str = ""
    end: int = 0
    oldest: int = 0
    done: bool = False


@dataclass
class Digest:
    """What happened since a cursor, within a token budget; pass next as since
    next time."""

    scope: str = ""
    since: str = ""
    next: str = ""
    budget_tokens: int = 0
    tokens: int = 0
    text: str = ""
    failed: int = 0
    succeeded: int = 0
    running: int = 0
    waiting: int = 0
    pending: int = 0
    decided: int = 0
    omitted: int = 0
    read_block: List[str] = field(default_factory=list)
    unavailable: List[str] = field(default_factory=list)
