"""Loom's exception roots, one per concern, with leaves that mean something.

Every layer raises these (or subclasses); only ``api/`` maps them to HTTP and
only the CLI maps them to exit codes. Each carries the context an operator
needs: the failing locations of an intent, the device, the revision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "Conflict",
    "FatalDriverError",
    "Infeasible",
    "IntentError",
    "InvalidIntent",
    "LoomError",
    "NotFound",
    "RetryableDriverError",
    "SafetyViolation",
    "StaleRevision",
]


class LoomError(Exception):
    """Root of every error Loom raises on purpose."""


@dataclass(frozen=True)
class IntentError:
    """One problem in an intent document: ``loc`` like ``devices[3].asn``."""

    loc: str
    msg: str

    def __str__(self) -> str:
        return f"{self.loc}: {self.msg}" if self.loc else self.msg

    def as_dict(self) -> dict[str, str]:
        return {"loc": self.loc, "msg": self.msg}


class InvalidIntent(LoomError):
    """An intent document (or an edit of one) with one or more errors; all are listed."""

    def __init__(self, errors: list[IntentError]):
        self.errors = errors
        head = "; ".join(str(e) for e in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        super().__init__(f"invalid intent: {len(errors)} error(s): {head}{more}")


class NotFound(LoomError):
    """A named object, revision or token that does not exist."""


class Conflict(LoomError):
    """A write that conflicts with the stored state (duplicate name, ...)."""


class StaleRevision(Conflict):
    """``If-Match`` named a revision that is no longer the head."""

    def __init__(self, expected: str, actual: str | None):
        self.expected = expected
        self.actual = actual
        super().__init__(f"stale revision: If-Match {expected!r} but the head is {actual!r}")


class Infeasible(LoomError):
    """The solver cannot route or fit the demand; ``details`` says which and why."""

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None):
        self.details = details or []
        super().__init__(message)


class SafetyViolation(LoomError):
    """A plan that fails invariants in some scenarios."""

    def __init__(self, message: str, failing: list[dict[str, Any]] | None = None):
        self.failing = failing or []
        super().__init__(message)


class RetryableDriverError(LoomError):
    """A device call that may succeed when tried again (UNAVAILABLE, timeouts)."""

    def __init__(self, device: str, message: str):
        self.device = device
        super().__init__(f"{device}: {message}")


class FatalDriverError(LoomError):
    """A device call that will not succeed by retrying (rejected config, ...)."""

    def __init__(self, device: str, message: str):
        self.device = device
        super().__init__(f"{device}: {message}")
