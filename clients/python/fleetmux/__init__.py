"""fleetmux: a client of the fleetmux controller's HTTP API, standard library only.

    from fleetmux import Client
    c = Client()                    # FLEETMUX_ADDR/FLEETMUX_TOKEN, else `fleetmux dev`'s dev.json
    s = c.create_session(title="build")
    r = c.run(s.node, s.id, "make test", timeout_ms=600000)
    if r.block.exit_code != 0:
        print(c.block(s.node, s.id, r.block.n, grep="error").text)
"""

from .client import DEFAULT_ADDR, Client, dev_config_path, read_dev_config, resolve, same_addr
from .errors import (ERRORS, BadRequest, Busy, Denied, Exists, Exited, FleetmuxError, Forbidden, Gone,
                     Held, Internal, Limit, NotFound, Sandbox, Timeout, TooLarge, Unauthorized, Unavailable)
from .types import (Agent, AgentList, AgentOutput, AgentUsage, AgentWait, Approval, ApprovalList, Block, BlockResult, Chunk, Cursor, Digest, ErrorInfo, ExecFanout, ExecOutput, ExecResult, Fanout, FanoutResult,
                    Health, NewToken, Node, PolicyInfo, Screen, SecretInfo, Session, SessionList, TakeOver, Token, WaitResult,
                    Writer)

__all__ = [
    "DEFAULT_ADDR", "Client", "dev_config_path", "read_dev_config", "resolve", "same_addr",
    "ERRORS", "FleetmuxError", "BadRequest", "Busy", "Denied", "Sandbox", "Exists", "Exited", "Forbidden", "Gone",
    "Held", "Internal", "Limit", "NotFound", "Timeout", "TooLarge", "Unauthorized", "Unavailable",
    "Agent", "AgentList", "AgentOutput", "AgentUsage", "AgentWait", "Approval", "ApprovalList", "Block", "BlockResult", "Chunk", "Cursor", "Digest", "ErrorInfo", "ExecFanout", "ExecOutput", "ExecResult", "Fanout", "FanoutResult",
    "Health", "NewToken", "Node", "PolicyInfo", "Screen", "SecretInfo", "Session", "SessionList", "TakeOver", "Token",
    "WaitResult", "Writer",
]
