"""A synchronous client of the fleetmux controller's HTTP API (api/openapi.yaml)."""

import http.client
import json
import os
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .errors import FleetmuxError, Gone, NotFound, error_for
from .types import (Agent, AgentList, AgentOutput, AgentWait, Approval, ApprovalList, Block, BlockResult, Chunk, Digest, ExecFanout, ExecOutput, ExecResult,
                    Fanout, Health, NewToken, Node,
                    PolicyInfo, Screen, SecretInfo, Session, SessionList, TakeOver, Token, WaitResult,
                    from_json)

DEFAULT_ADDR = "http://127.0.0.1:7070"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
_APPROVAL_ID = re.compile(r"^a[1-9][0-9]*$")
_RETRYABLE = (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError)


def dev_config_path() -> str:
    """$XDG_CONFIG_HOME/fleetmux/dev.json (default ~/.config/...), which
    `fleetmux dev` writes."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "fleetmux", "dev.json")


def read_dev_config() -> Optional[Dict[str, str]]:
    """dev.json when it is the user's alone (a regular file, mode 0600 or stricter,
    not a link); else None."""
    p = dev_config_path()
    try:
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            return None
        with open(p) as f:
            dc = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(dc, dict) or not isinstance(dc.get("addr"), str) or not dc["addr"]:
        return None
    return {"addr": dc["addr"], "token": str(dc.get("token") or ""), "data": str(dc.get("data") or "")}


def _normalize(addr: str) -> str:
    if "://" not in addr:
        addr = "http://" + addr
    return addr.rstrip("/")


def _addr_key(addr: str) -> Optional[str]:
    try:
        u = urllib.parse.urlsplit(_normalize(addr))
        port = u.port
    except ValueError:
        return None
    host = (u.hostname or "").lower().rstrip(".")
    if host in ("localhost", "::1", "127.0.0.1"):
        host = "127.0.0.1"
    if port is None:
        port = 443 if u.scheme == "https" else 80
    return "%s://%s:%d%s" % (u.scheme, host, port, u.path.rstrip("/"))


def same_addr(a: str, b: str) -> bool:
    """Whether a and b are the same controller address (localhost, 127.0.0.1 and
    ::1 are one host; a trailing slash is nothing)."""
    ka = _addr_key(a)
    return ka is not None and ka == _addr_key(b)


def resolve(addr: Optional[str] = None, token: Optional[str] = None) -> Tuple[str, str]:
    """The address and token as the CLI finds them (docs/api.md): the arguments,
    else FLEETMUX_ADDR / FLEETMUX_TOKEN. Neither: dev.json's, else the default
    address without a token. An address alone: dev.json's token when the address
    is dev's. A token alone: dev.json's address; without a dev.json BadRequest, since
    a token is never sent to the default address unless it is named."""
    addr = addr or os.environ.get("FLEETMUX_ADDR") or ""
    token = token or os.environ.get("FLEETMUX_TOKEN") or ""
    dev = read_dev_config()
    if not addr and not token:
        if dev:
            addr, token = dev["addr"], dev["token"]
    elif addr and not token:
        if dev and same_addr(addr, dev["addr"]):
            addr, token = dev["addr"], dev["token"]
    elif not addr and token:
        if not dev:
            raise error_for(0, "bad_request",
                            "FLEETMUX_TOKEN (or a token) is given but no address: set FLEETMUX_ADDR (or pass addr) "
                            "to the controller the token belongs to; it is not sent to the default %s, "
                            "where anyone on this machine may listen" % DEFAULT_ADDR)
        addr = dev["addr"]
    return _normalize(addr or DEFAULT_ADDR), token


def _unreachable(addr: str, reason: Any) -> str:
    """The message for a controller that did not answer at addr."""
    why = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    return ("no controller at %s (%s): is `fleetmux dev` running? Set FLEETMUX_ADDR (or pass addr) "
            "to the controller's address" % (addr, why))


def _check_name(what: str, s: str) -> None:
    if not isinstance(s, str) or not _NAME.match(s):
        raise error_for(0, "bad_request", "%s %r: want [A-Za-z0-9_-]{1,63}" % (what, s))


def _approval_path(node: str, id: Optional[str]) -> str:
    """/v1/approvals/NODE/ID, from node and id or from an address NODE/ID alone."""
    if id is None and isinstance(node, str) and "/" in node:
        node, id = node.split("/", 1)
    _check_name("node", node)
    if not isinstance(id, str) or not _APPROVAL_ID.match(id):
        raise error_for(0, "bad_request", "approval id %r: want a1, a2, ..." % (id,))
    return "/v1/approvals/%s/%s" % (node, id)


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class Client:
    """Calls one controller. Errors are FleetmuxError subclasses by code
    (NotFound, Busy, Unauthorized, ...)."""

    def __init__(self, addr: Optional[str] = None, token: Optional[str] = None,
                 actor: Optional[str] = None, timeout: float = 660.0) -> None:
        self.addr, self.token = resolve(addr, token)
        self.actor = actor
        self.timeout = timeout  # seconds, per request (a run may take up to 10 min)

    # -- plumbing

    def _request(self, method: str, path: str, query: Optional[Sequence[Tuple[str, Any]]] = None,
                 body: Any = None, accept: str = "application/json",
                 timeout: Optional[float] = None, raw: Optional[Tuple[bytes, str]] = None) -> http.client.HTTPResponse:
        """Sends a request: body as JSON, or raw as (bytes, content type)."""
        url = self.addr + path
        q = [(k, str(v)) for k, v in (query or []) if v is not None]
        if q:
            url += "?" + urllib.parse.urlencode(q)
        data = None
        headers = {"Accept": accept, "User-Agent": "fleetmux-python"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif raw is not None:
            data, headers["Content-Type"] = raw
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if self.actor:
            headers["Fleetmux-Actor"] = self.actor
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read(64 << 10)
            e.close()
            code, msg, rule, approval = None, "", "", ""
            try:
                err = json.loads(raw)["error"]
                code, msg = err["code"], err["message"]
                rule, approval = err.get("rule", ""), err.get("approval", "")
            except (ValueError, KeyError, TypeError, AttributeError):
                msg = "HTTP %d: %s" % (e.code, raw[:200].decode("utf-8", "replace").strip())
            raise error_for(e.code, code, msg, rule, approval) from None
        except urllib.error.URLError as e:
            raise error_for(0, "unavailable", _unreachable(self.addr, e.reason)) from None

    def _json(self, method: str, path: str, query: Optional[Sequence[Tuple[str, Any]]] = None,
              body: Any = None, raw: Optional[Tuple[bytes, str]] = None) -> Any:
        with self._request(method, path, query, body, raw=raw) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip() else {}

    @staticmethod
    def _spath(node: str, id: str, suffix: str = "") -> str:
        _check_name("node", node)
        _check_name("session", id)
        return "/v1/sessions/%s/%s%s" % (node, id, suffix)

    # -- nodes and sessions

    def nodes(self) -> List[Node]:
        return [from_json(Node, n) for n in self._json("GET", "/v1/nodes")["nodes"]]

    def sessions(self, node: Optional[str] = None, labels: Optional[Dict[str, str]] = None) -> SessionList:
        q: List[Tuple[str, Any]] = [("node", node)]
        q += [("label", "%s=%s" % kv) for kv in sorted((labels or {}).items())]
        return from_json(SessionList, self._json("GET", "/v1/sessions", q))

    def create_session(self, node: Optional[str] = None, title: Optional[str] = None,
                       description: Optional[str] = None, labels: Optional[Dict[str, str]] = None,
                       shell: Optional[str] = None, argv: Optional[List[str]] = None,
                       cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                       cols: Optional[int] = None, rows: Optional[int] = None,
                       sandbox: Optional[str] = None) -> Session:
        """Creates a session; without node the controller picks one. sandbox asks
        for a profile of the policy at least as strict as the one it chooses."""
        body = _drop_none(dict(node=node, title=title, description=description, labels=labels, shell=shell,
                               argv=argv, cwd=cwd, env=env, cols=cols, rows=rows, sandbox=sandbox))
        return from_json(Session, self._json("POST", "/v1/sessions", body=body))

    def session(self, node: str, id: str) -> Session:
        return from_json(Session, self._json("GET", self._spath(node, id)))

    def update_session(self, node: str, id: str, title: Optional[str] = None,
                       description: Optional[str] = None, labels: Optional[Dict[str, str]] = None) -> Session:
        body = _drop_none(dict(title=title, description=description, labels=labels))
        return from_json(Session, self._json("PATCH", self._spath(node, id), body=body))

    def close_session(self, node: str, id: str) -> Session:
        return from_json(Session, self._json("DELETE", self._spath(node, id)))

    # -- commands and input

    def run(self, node: str, id: str, command: str, timeout_ms: Optional[int] = None,
            max_output_bytes: Optional[int] = None, idempotency_key: Optional[str] = None) -> BlockResult:
        """Runs a command; returns its block with the rendered text (block.state is
        still "running" when timeout_ms passed first)."""
        body = _drop_none(dict(command=command, timeout_ms=timeout_ms, max_output_bytes=max_output_bytes,
                               idempotency_key=idempotency_key))
        return from_json(BlockResult, self._json("POST", self._spath(node, id, "/run"), body=body))

    def input(self, node: str, id: str, data: str) -> None:
        self._json("POST", self._spath(node, id, "/input"), body={"data": data})

    def keys(self, node: str, id: str, *keys: str) -> None:
        """Sends named keys: C-c, Enter, Up, Tab, Esc, F1, ..."""
        self._json("POST", self._spath(node, id, "/keys"), body={"keys": list(keys)})

    def take_over(self, node: str, id: str) -> TakeOver:
        """Takes the session's writer lease (operator or admin): one writer per session
        at a time, others get Busy naming the holder. The writer that held it is told;
        .previous names it (None: nobody held it)."""
        return from_json(TakeOver, self._json("POST", self._spath(node, id, "/take_over")))

    def resize(self, node: str, id: str, cols: int, rows: int) -> Session:
        return from_json(Session, self._json("POST", self._spath(node, id, "/resize"), body={"cols": cols, "rows": rows}))

    # -- reading

    def screen(self, node: str, id: str) -> Screen:
        return from_json(Screen, self._json("GET", self._spath(node, id, "/screen")))

    def blocks(self, node: str, id: str) -> List[Block]:
        return [from_json(Block, b) for b in self._json("GET", self._spath(node, id, "/blocks"))["blocks"]]

    def block(self, node: str, id: str, n: int, offset: Optional[int] = None, limit: Optional[int] = None,
              grep: Optional[str] = None, max_bytes: Optional[int] = None) -> BlockResult:
        """Block n (from 1) with its text: lines paged by offset/limit, filtered by
        grep (each kept line prefixed with its number); max_bytes -1: no budget."""
        q = [("offset", offset), ("limit", limit), ("grep", grep), ("max_bytes", max_bytes)]
        return from_json(BlockResult, self._json("GET", self._spath(node, id, "/blocks/%d" % n), q))

    def wait(self, node: str, id: str, until: str = "idle", timeout_ms: Optional[int] = None,
             after: Optional[int] = None) -> WaitResult:
        """Waits until the session is idle, waiting_input, exited, or has output past
        after (until="output"). ok is False when the timeout passed first."""
        q = [("until", until), ("timeout_ms", timeout_ms), ("after", after)]
        return from_json(WaitResult, self._json("GET", self._spath(node, id, "/wait"), q))

    def output(self, node: str, id: str, from_: int = 0, max_bytes: Optional[int] = None) -> Chunk:
        """Raw output from offset from_ to its end when the controller got the
        request (or max_bytes of it). More exists when offset+len(data) < end."""
        with self._request("GET", self._spath(node, id, "/output"), [("from", from_), ("max_bytes", max_bytes)],
                           accept="application/octet-stream") as resp:
            data = resp.read()
            h = resp.headers
        return Chunk(offset=int(h.get("Fleetmux-Offset", from_)), data=data,
                     end=int(h.get("Fleetmux-End", 0)), oldest=int(h.get("Fleetmux-Oldest", 0)))

    def recording(self, node: str, id: str, format: str = "v3") -> bytes:
        """The session's whole recording as one asciicast file: v3, or v2 with
        format="v2" (what asciinema 2.2 reads)."""
        with self._request("GET", self._spath(node, id, "/recording"), [("format", format)],
                           accept="application/x-asciicast") as resp:
            return resp.read()

    def follow(self, node: str, id: str, from_: int = 0, min_backoff: float = 0.1,
               max_backoff: float = 2.0) -> Iterator[Chunk]:
        """Yields the session's raw output from offset from_, in order, until the
        session has exited and all of its output was yielded.

        It survives a controller restart: when the stream breaks (or the controller
        answers 5xx, unavailable, timeout) it reconnects from the offset reached,
        backing off, so no byte is yielded twice and none is skipped. When the
        controller no longer holds that offset it raises Gone (only a follow from 0
        may start at the oldest output held)."""
        nxt = from_
        connected = False
        backoff = min_backoff
        while True:
            try:
                resp = self._request("GET", self._spath(node, id, "/output"), [("from", nxt), ("follow", 1)],
                                     accept="application/octet-stream")
            except FleetmuxError as e:
                if connected and isinstance(e, NotFound):
                    return
                if not (e.status >= 500 or e.code in ("unavailable", "timeout")):
                    raise
                time.sleep(backoff)
                backoff = min(2 * backoff, max_backoff)
                continue
            except _RETRYABLE:
                time.sleep(backoff)
                backoff = min(2 * backoff, max_backoff)
                continue
            got = 0
            clean = False
            with resp:
                off = int(resp.headers.get("Fleetmux-Offset", nxt))
                skip = 0
                if off > nxt and not connected and from_ == 0:
                    nxt = off
                elif off > nxt:
                    raise Gone("output of %s/%s from offset %d is no longer held (the controller resumed at %d)"
                               % (node, id, nxt, off), status=200)
                elif off < nxt:
                    skip = nxt - off
                connected = True
                try:
                    while True:
                        data = resp.read1(64 << 10) if hasattr(resp, "read1") else resp.read(64 << 10)
                        if not data:
                            clean = True
                            break
                        if skip:
                            d = min(skip, len(data))
                            data, skip = data[d:], skip - d
                        if data:
                            yield Chunk(offset=nxt, data=data)
                            nxt += len(data)
                            got += len(data)
                except _RETRYABLE:
                    pass  # cut: reconnect from nxt
            if got:
                backoff = min_backoff
            if clean:
                try:
                    s = self.session(node, id)
                    if s.state == "exited" and (nxt >= s.output_offset or got == 0):
                        return
                except NotFound:
                    return
                except FleetmuxError as e:
                    if not (e.status >= 500 or e.code in ("unavailable", "timeout")):
                        raise
                except _RETRYABLE:
                    pass
            if not got:
                time.sleep(backoff)
                backoff = min(2 * backoff, max_backoff)

    # -- fan-out

    # -- coding agents (docs/agents.md)

    @staticmethod
    def _apath(node: str, id: str, suffix: str = "") -> str:
        _check_name("node", node)
        _check_name("agent", id)
        return "/v1/agents/%s/%s%s" % (node, id, suffix)

    def agents(self, node: Optional[str] = None) -> AgentList:
        return from_json(AgentList, self._json("GET", "/v1/agents", [("node", node)]))

    def spawn_agent(self, driver: str, node: Optional[str] = None, cwd: Optional[str] = None,
                    prompt: Optional[str] = None, parent: Optional[str] = None,
                    labels: Optional[Dict[str, str]] = None, env: Optional[Dict[str, str]] = None,
                    secrets: Optional[Dict[str, str]] = None, program: Optional[str] = None,
                    args: Optional[List[str]] = None, rules: Optional[str] = None) -> Agent:
        """Starts a coding agent (driver claude, codex, opencode, gemini, aider, or
        generic with a rule file) on node (default: the controller's choice)."""
        body = _drop_none({"driver": driver, "node": node, "cwd": cwd, "prompt": prompt, "parent": parent,
                           "labels": labels, "env": env, "secrets": secrets, "program": program,
                           "args": args, "rules": rules})
        return from_json(Agent, self._json("POST", "/v1/agents", body=body))

    def agent(self, node: str, id: str) -> Agent:
        return from_json(Agent, self._json("GET", self._apath(node, id)))

    def kill_agent(self, node: str, id: str) -> Agent:
        """Ends the agent, and its children first."""
        return from_json(Agent, self._json("DELETE", self._apath(node, id)))

    def send_agent(self, node: str, id: str, text: str) -> Agent:
        """Types a prompt into the agent and submits it."""
        return from_json(Agent, self._json("POST", self._apath(node, id, "/send"), body={"text": text}))

    def interrupt_agent(self, node: str, id: str) -> Agent:
        return from_json(Agent, self._json("POST", self._apath(node, id, "/interrupt")))

    def wait_agent(self, node: str, id: str, states: Optional[Sequence[str]] = None,
                   timeout_ms: Optional[int] = None) -> AgentWait:
        """Waits until the agent is in one of states (default: ready or ended);
        .ok is False when the timeout passed first."""
        q = [("state", ",".join(states) if states else None), ("timeout_ms", timeout_ms)]
        return from_json(AgentWait, self._json("GET", self._apath(node, id, "/wait"), q))

    def agent_output(self, node: str, id: str, cursor: int = 0, max_bytes: Optional[int] = None) -> AgentOutput:
        """What the agent printed since cursor, as text (pass .cursor next time)."""
        q = [("cursor", cursor or None), ("max_bytes", max_bytes)]
        return from_json(AgentOutput, self._json("GET", self._apath(node, id, "/output"), q))

    def fanout(self, command: str, nodes: Optional[List[str]] = None, labels: Optional[Dict[str, str]] = None,
               all: bool = False, sessions: Optional[List[str]] = None, session: Optional[str] = None,
               shell: Optional[str] = None, timeout_ms: Optional[int] = None,
               max_output_bytes: Optional[int] = None, batch: Optional[int] = None,
               stop_on_failure: bool = False, idempotency_key: Optional[str] = None) -> Fanout:
        """Runs one command on many targets: nodes and/or labels (or all) select
        nodes; sessions names NODE/ID sessions directly."""
        selector = _drop_none(dict(nodes=nodes, labels=labels, sessions=sessions, all=all or None))
        body = _drop_none(dict(selector=selector, command=command, session=session, shell=shell,
                               timeout_ms=timeout_ms, max_output_bytes=max_output_bytes, batch=batch,
                               stop_on_failure=stop_on_failure or None, idempotency_key=idempotency_key))
        return from_json(Fanout, self._json("POST", "/v1/run", body=body))

    # -- exec and digest

    def exec(self, node: Optional[str] = None, argv: Optional[List[str]] = None, command: Optional[str] = None,
             cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None,
             timeout_ms: Optional[int] = None, max_output_bytes: Optional[int] = None, background: bool = False,
             nodes: Optional[List[str]] = None, labels: Optional[Dict[str, str]] = None, all: bool = False) -> Any:
        """Runs a one-shot process without a terminal: argv as it is, or command under
        sh -c. On node: an ExecResult; on the nodes nodes/labels/all select: an
        ExecFanout, one result per node."""
        body = _drop_none(dict(argv=argv, command=command, cwd=cwd, env=env, stdin=stdin, timeout_ms=timeout_ms,
                               max_output_bytes=max_output_bytes, background=background or None))
        if node is not None:
            _check_name("node", node)
            body["node"] = node
            return from_json(ExecResult, self._json("POST", "/v1/exec", body=body))
        body["selector"] = _drop_none(dict(nodes=nodes, labels=labels, all=all or None))
        return from_json(ExecFanout, self._json("POST", "/v1/exec", body=body))

    def _exec_path(self, node: str, id: str) -> str:
        _check_name("node", node)
        _check_name("exec id", id)
        return "/v1/exec/%s/%s" % (node, id)

    def get_exec(self, node: str, id: str, max_output_bytes: Optional[int] = None) -> ExecResult:
        """One exec, running or ended, with its output so far."""
        return from_json(ExecResult, self._json("GET", self._exec_path(node, id), [("max_output_bytes", max_output_bytes)]))

    def wait_exec(self, node: str, id: str, timeout_ms: Optional[int] = None,
                  max_output_bytes: Optional[int] = None) -> ExecResult:
        """Waits up to timeout_ms for an exec to end; the exec as it is then."""
        return from_json(ExecResult, self._json("GET", self._exec_path(node, id) + "/wait",
                                                [("timeout_ms", timeout_ms), ("max_output_bytes", max_output_bytes)]))

    def exec_output(self, node: str, id: str, stream: str = "stdout", from_: int = 0, max: Optional[int] = None) -> ExecOutput:
        """One stream of an exec from offset from_."""
        return from_json(ExecOutput, self._json("GET", self._exec_path(node, id) + "/output",
                                                [("stream", stream), ("from", from_), ("max", max)]))

    def kill_exec(self, node: str, id: str) -> ExecResult:
        """Ends a running exec with its process group (its owner or an admin)."""
        return from_json(ExecResult, self._json("DELETE", self._exec_path(node, id)))

    def digest(self, since: Optional[str] = None, scope: Optional[str] = None, node: Optional[str] = None,
               session: Optional[str] = None, budget_tokens: Optional[int] = None) -> Digest:
        """What happened since the cursor since (the next of the last digest), within
        budget_tokens (a token counted as 4 bytes)."""
        return from_json(Digest, self._json("GET", "/v1/digest", [("since", since), ("scope", scope), ("node", node),
                                                                   ("session", session), ("budget_tokens", budget_tokens)]))

    # -- guardrails

    def policy(self) -> PolicyInfo:
        """The guardrail policy in force (version 0: none is set, everything is
        allowed)."""
        return from_json(PolicyInfo, self._json("GET", "/v1/policy"))

    def set_policy(self, document: str) -> PolicyInfo:
        """Stores a policy document (YAML, or JSON) as the one in force (admin); every
        node applies it within a second. A document that does not parse is a
        BadRequest naming its line and field, and changes nothing."""
        return from_json(PolicyInfo, self._json("PUT", "/v1/policy", raw=(document.encode(), "application/yaml")))

    def delete_policy(self) -> PolicyInfo:
        """Removes the policy (admin): every node then allows every command. Returns
        the policy that was in force."""
        return from_json(PolicyInfo, self._json("DELETE", "/v1/policy"))

    def approvals(self, node: Optional[str] = None, state: Optional[str] = None) -> ApprovalList:
        """Approvals fleet-wide (or of node), oldest first: pending ones by default;
        state: pending, approved, denied, expired, or "all". Nodes that did not
        answer are listed in .unavailable."""
        if node is not None:
            _check_name("node", node)
        return from_json(ApprovalList, self._json("GET", "/v1/approvals", [("node", node), ("state", state)]))

    def approval(self, node: str, id: Optional[str] = None, wait_ms: Optional[int] = None) -> Approval:
        """One approval, by node and id or by its address ("NODE/aN", as Held.approval
        gives it). With wait_ms it waits (up to that, at most 10 min) until the
        approval is done: decided, and when an approved run was typed by the node,
        until its block finished (.block, .exit_code)."""
        return from_json(Approval, self._json("GET", _approval_path(node, id), [("wait_ms", wait_ms)]))

    def decide(self, node: str, id: Optional[str], decision: str, reason: Optional[str] = None) -> Approval:
        """Approves ("approve") or denies ("deny") a pending approval: admin, or a role
        its rule names as approvers; never the one who asked."""
        body = _drop_none(dict(decision=decision, reason=reason))
        return from_json(Approval, self._json("POST", _approval_path(node, id), body=body))

    def approve(self, node: str, id: Optional[str] = None, reason: Optional[str] = None) -> Approval:
        """Approves a pending approval (see decide): a held run is then typed by the node."""
        return self.decide(node, id, "approve", reason)

    def deny(self, node: str, id: Optional[str] = None, reason: Optional[str] = None) -> Approval:
        """Denies a pending approval (see decide): the command never runs."""
        return self.decide(node, id, "deny", reason)

    def set_secret(self, node: str, name: str, value: str) -> SecretInfo:
        """Stores a secret on a node (admin), replacing one of the same name; the node
        types it at a password prompt (sudo) that a policy `secrets` entry names. No
        call returns a value back."""
        _check_name("node", node)
        _check_name("secret", name)
        return from_json(SecretInfo, self._json("PUT", "/v1/nodes/%s/secrets/%s" % (node, name), body={"value": value}))

    def secrets(self, node: str) -> List[SecretInfo]:
        """The names of a node's secrets (admin); never a value."""
        _check_name("node", node)
        return [from_json(SecretInfo, x) for x in self._json("GET", "/v1/nodes/%s/secrets" % node)["secrets"]]

    def delete_secret(self, node: str, name: str) -> SecretInfo:
        """Removes a secret from a node (admin)."""
        _check_name("node", node)
        _check_name("secret", name)
        return from_json(SecretInfo, self._json("DELETE", "/v1/nodes/%s/secrets/%s" % (node, name)))

    # -- tokens and the rest

    def tokens(self) -> List[Token]:
        return [from_json(Token, t) for t in self._json("GET", "/v1/tokens")["tokens"]]

    def create_token(self, name: str, role: str, ttl: Optional[str] = None) -> NewToken:
        """Creates an API token (admin); its secret is in this reply only."""
        return from_json(NewToken, self._json("POST", "/v1/tokens", body=_drop_none(dict(name=name, role=role, ttl=ttl))))

    def revoke_token(self, name: str) -> Token:
        _check_name("token", name)
        return from_json(Token, self._json("DELETE", "/v1/tokens/" + name))

    def health(self) -> Health:
        try:
            return from_json(Health, self._json("GET", "/healthz"))
        except FleetmuxError as e:
            if e.status == 503:
                return Health(status="degraded")
            raise

    def openapi(self) -> str:
        """The API's OpenAPI 3.1 document (YAML)."""
        with self._request("GET", "/v1/openapi.yaml", accept="application/yaml") as resp:
            return resp.read().decode()
