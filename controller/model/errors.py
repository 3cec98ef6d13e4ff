"""Loom's exception roots, one per concern, with leaves that mean something.

Every layer raises these (or subclasses); only ``api/`` maps them to HTTP
(``api/problems.py``) and only the CLI maps them to exit codes. Each carries
the context an operator needs: the failing locations of an intent, the device,
the revision. Each class has a ``kind``, a stable transport-neutral name (the
problem type's suffix in the API), so a caller can map errors without
importing every leaf.

The tree::

    LoomError
    ├── InvalidIntent            an intent (or an edit of one) with located errors
    │   └── MalformedDocument    text that cannot be read as a document within the bounds
    │       ├── InvalidEncoding        not UTF-8, or a lone surrogate
    │       ├── DocumentTooDeep        arrays and objects nested deeper than the bound
    │       └── DocumentTooLarge       more values than the bound
    ├── NotFound                 no such object, revision, change or device
    ├── Conflict                 a write that conflicts with the stored state
    │   ├── StaleRevision        If-Match is not the head
    │   └── LastAdmin            the write would leave no active admin token
    ├── Infeasible               the solver cannot route or fit the demand
    ├── SafetyViolation          a commit refused: invariants fail in some scenarios
    ├── InvalidRequest           a request's own fields (not an intent's) with located errors
    ├── StoreUnavailable         the store does not answer now (refused, pool exhausted, shut down): retry later
    │   └── StoreContention      a write kept losing to concurrent ones (serialization failure, deadlock)
    └── DeviceError              something on or about one device failed
        ├── AgentError           the device agent refused or failed a call (gRPC status code)
        ├── FrrError             FRR refused a config, or a reload failed
        └── DriverError          the controller's call to an agent failed
            ├── RetryableDriverError   UNAVAILABLE or a deadline: the agent may not have seen it
            ├── FatalDriverError       anything retrying will not fix
            └── Unreachable            a device's state could not be read (either of the above)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "AgentError",
    "Conflict",
    "Deposed",
    "DeviceError",
    "DocumentTooDeep",
    "DocumentTooLarge",
    "DriverError",
    "FatalDriverError",
    "FrrError",
    "Infeasible",
    "InvalidEncoding",
    "IntentError",
    "InvalidIntent",
    "IdempotencyMismatch",
    "InvalidRequest",
    "LastAdmin",
    "LoomError",
    "MergeConflict",
    "MalformedDocument",
    "NotFound",
    "RetryableDriverError",
    "SafetyViolation",
    "SingleReplicaStore",
    "StaleRevision",
    "StoreContention",
    "StoreOutcomeUnknown",
    "StoreUnavailable",
    "Unreachable",
]


class LoomError(Exception):
    """Root of every error Loom raises on purpose."""

    kind = "bad-request"


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

    kind = "invalid-intent"

    def __init__(self, errors: list[IntentError]):
        self.errors = errors
        head = "; ".join(str(e) for e in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        super().__init__(f"invalid intent: {len(errors)} error(s): {head}{more}")


class IdempotencyMismatch(LoomError):
    """An ``Idempotency-Key`` reused for a different request (another method, path or body): 422."""

    kind = "idempotency-key-reused"


class InvalidRequest(LoomError):
    """A request whose own fields are wrong (a token's name, ...), each error located
    (``name``); an intent's errors are :class:`InvalidIntent`."""

    kind = "invalid-request"

    def __init__(self, errors: list[IntentError]):
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors) or "invalid request")
class MalformedDocument(InvalidIntent):
    """Text that cannot be read as a document at all, or only past a bound that protects the
    reader (:mod:`controller.model.text`). It holds one error: where (``""`` for the whole text,
    else the place in the document) and what."""

    kind = "malformed-document"

    def __init__(self, msg: str, loc: str = ""):
        super().__init__([IntentError(loc, msg)])

    @property
    def reason(self) -> str:
        return self.errors[0].msg


class InvalidEncoding(MalformedDocument):
    """The text is not UTF-8 (RFC 3629: no invalid bytes, overlong forms or surrogates), or
    escapes a lone surrogate, which is no Unicode character."""

    kind = "invalid-encoding"


class DocumentTooDeep(MalformedDocument):
    """Arrays and objects (sequences and mappings) nested deeper than the reader's bound."""

    kind = "document-too-deep"


class DocumentTooLarge(MalformedDocument):
    """More values (nodes) than the reader's bound."""

    kind = "document-too-large"


class NotFound(LoomError):
    """A named object, revision or token that does not exist."""

    kind = "not-found"


class Conflict(LoomError):
    """A write that conflicts with the stored state (duplicate name, ...)."""

    kind = "conflict"


class Deposed(Conflict):
    """A leader's write about a change it no longer runs: the lease passed to a newer epoch, whose
    leader took the change over (it recovers it); the deposed leader's outcome is not recorded."""

    kind = "deposed"


class SingleReplicaStore(LoomError):
    """A second controller process on a store that allows one (SQLite): ``holder`` describes the first."""

    kind = "single-replica-store"


class StaleRevision(Conflict):
    """``If-Match`` named a revision that is no longer the head."""

    kind = "stale-revision"

    def __init__(self, expected: str, actual: str | None):
        self.expected = expected
        self.actual = actual
        super().__init__(f"stale revision: If-Match {expected!r} but the head is {actual!r}")


class MergeConflict(Conflict):
    """A change's edits cannot join the head: the head changed the same objects since the change's base.
    ``conflicts`` locate each one (``links[leaf-0-0:eth3]``, ``defaults.max_ecmp_entries``)."""

    kind = "merge-conflict"

    def __init__(self, message: str, conflicts: list[IntentError]):
        self.conflicts = conflicts
        head = "; ".join(f"{e.loc}: {e.msg}" for e in conflicts[:5])
        more = f" (and {len(conflicts) - 5} more)" if len(conflicts) > 5 else ""
        super().__init__(f"{message}: {head}{more}" if conflicts else message)


class LastAdmin(Conflict):
    """Revoking or demoting this token would leave no active admin token: nobody could manage
    tokens over the API any more."""

    kind = "last-admin"


class Infeasible(LoomError):
    """The solver cannot route or fit the demand; ``details`` says which and why."""

    kind = "infeasible"

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None):
        self.details = details or []
        super().__init__(message)


class SafetyViolation(LoomError):
    """A commit refused because its plan fails invariants in some scenarios.

    ``failing`` lists every failed (scenario, stage, invariant, detail) as the
    safety report's ``failing`` documents; :meth:`scenarios` names the scenarios.
    """

    kind = "unsafe-change"

    def __init__(self, message: str, failing: list[dict[str, Any]] | None = None):
        self.failing = failing or []
        super().__init__(message)

    def scenarios(self) -> list[str]:
        """The failing scenarios' names, sorted."""
        return sorted({str(f.get("scenario")) for f in self.failing})


class StoreUnavailable(LoomError):
    """The store did not answer: the database refused the connection, the pool had none free in
    time, the server is shutting down, a failover of the store is under way (a read-only standby
    answered), or another operational failure. Nothing was written (except for
    :class:`StoreOutcomeUnknown`); the same request may succeed ``retry_after`` seconds later."""

    kind = "store-unavailable"

    def __init__(self, message: str, *, retry_after: int = 2):
        self.retry_after = retry_after
        super().__init__(message)


class StoreOutcomeUnknown(StoreUnavailable):
    """The connection was lost while the store committed a write transaction (its primary died, a
    failover began): the write may or may not have been applied, so it is not acknowledged. The
    answer is the same 503 with ``Retry-After``; a retry with the same ``Idempotency-Key`` is answered
    from the store if the first attempt was applied (the key is kept in the write's transaction)."""


class StoreContention(StoreUnavailable):
    """A transaction lost to concurrent ones (a serialization failure or a deadlock) and was rolled
    back. Writers retry it with back-off; it is raised once their attempts are used up."""

    kind = "store-contention"


class DeviceError(LoomError):
    """Something on or about one device failed; ``device`` names it ("" when the
    raiser is the device itself: the agent and FRR know no other)."""

    kind = "device-error"

    def __init__(self, message: str, *, device: str = ""):
        self.device = device
        super().__init__(message)


class AgentError(DeviceError):
    """A call the agent refuses or fails. ``code`` is the gRPC status name in lower case:
    ``failed_precondition`` (wrong transaction state), ``invalid_argument`` (a config that
    does not render), ``not_found`` (unknown rollback target), ``internal`` (FRR failed)."""

    kind = "agent-error"

    def __init__(self, code: str, message: str, *, device: str = ""):
        self.code = code
        super().__init__(message, device=device)


class FrrError(DeviceError):
    """FRR refused a configuration, or ``frr-reload.py``, ``vtysh`` or netlink failed."""

    kind = "frr-error"


class DriverError(DeviceError):
    """The controller's call to a device agent failed. ``text`` is the cause as the
    transport put it (``UNAVAILABLE: ...``); the message is ``device: text``."""

    kind = "driver-error"

    def __init__(self, device: str, text: str):
        self.text = text
        super().__init__(f"{device}: {text}", device=device)


class RetryableDriverError(DriverError):
    """A device call that may succeed when tried again (UNAVAILABLE, a deadline exceeded)."""

    kind = "driver-retryable"


class Unreachable(DriverError):
    """A device's agent could not be read (it did not answer, or refused); raised from the
    :class:`RetryableDriverError` or :class:`FatalDriverError` that said why."""

    kind = "device-unreachable"


class FatalDriverError(DriverError):
    """A device call that will not succeed by retrying (refused, malformed, no TLS, ...)."""

    kind = "driver-fatal"
