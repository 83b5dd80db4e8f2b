"""Errors of the fleetmux API: one class per error code."""

from typing import Dict, Optional, Type


class FleetmuxError(Exception):
    """An error reply of the API ({"error": {"code", "message", "rule", "approval"}}),
    or a check the client made before sending (status 0). rule names the guardrail
    rule behind a denied or held reply; approval is the address ("NODE/aN") of the
    approval a held command waits for ("" when the reply has none)."""

    code = "internal"

    def __init__(self, message: str, code: Optional[str] = None, status: int = 0,
                 rule: str = "", approval: str = "") -> None:
        super().__init__("%s: %s" % (code or self.code, message))
        if code is not None:
            self.code = code
        self.message = message
        self.status = status
        self.rule = rule
        self.approval = approval


class BadRequest(FleetmuxError):
    code = "bad_request"


class Unauthorized(FleetmuxError):
    code = "unauthorized"


class Forbidden(FleetmuxError):
    code = "forbidden"


class NotFound(FleetmuxError):
    code = "not_found"


class Busy(FleetmuxError):
    code = "busy"


class Exited(FleetmuxError):
    code = "exited"


class Exists(FleetmuxError):
    code = "exists"


class Gone(FleetmuxError):
    code = "gone"


class TooLarge(FleetmuxError):
    code = "too_large"


class Limit(FleetmuxError):
    code = "limit"


class Unavailable(FleetmuxError):
    code = "unavailable"


class Timeout(FleetmuxError):
    code = "timeout"


class Internal(FleetmuxError):
    code = "internal"


class Denied(Forbidden):
    """A guardrail denied the command: rule names the rule."""

    code = "denied"


class Sandbox(Forbidden):
    """The node cannot confine the session as the sandbox profile asks (it fails
    closed: nothing ran)."""

    code = "sandbox"


class Held(FleetmuxError):
    """A guardrail holds the command until a person approves it: approval is its
    address ("NODE/aN"), rule the rule that holds it."""

    code = "held"


ERRORS: Dict[str, Type[FleetmuxError]] = {
    c.code: c
    for c in (BadRequest, Unauthorized, Forbidden, NotFound, Busy, Exited, Exists, Gone,
              TooLarge, Limit, Unavailable, Timeout, Internal, Denied, Sandbox, Held)
}

_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "bad_request", 409: "busy", 410: "gone", 413: "too_large", 429: "limit",
                 502: "unavailable", 503: "unavailable", 504: "timeout"}


def error_for(status: int, code: Optional[str], message: str, rule: str = "",
              approval: str = "") -> FleetmuxError:
    """The error for a reply: by its code, else by its HTTP status."""
    if not code:
        code = _STATUS_CODES.get(status) or ("bad_request" if 400 <= status < 500 else "internal")
    cls = ERRORS.get(code, FleetmuxError)
    return cls(message, code=code, status=status, rule=rule or "", approval=approval or "")
