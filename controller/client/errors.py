"""What a call of Loom's REST API fails with: one root, :class:`ClientError`, and leaves that mean something.

:class:`ApiError` is an answer of the server that is not a success: it carries the
RFC 9457 problem document (:class:`Problem`: status, type, title, detail and the
located errors, ``links[7].b`` or ``body.asn``). :class:`ServerUnreachable` is no
answer at all (connection refused, reset, timed out) after the retries the request
was allowed. :class:`NoIntent` and :class:`DrainUnchanged` are refusals of the
client's own, before anything is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from controller.client.answers import Document

__all__ = ["PROBLEM_TYPE", "ApiError", "ClientError", "DrainUnchanged", "FieldError", "NoIntent", "Problem",
           "ServerUnreachable"]

#: the prefix of Loom's problem types (``urn:loom:problem:stale-revision``)
PROBLEM_TYPE = "urn:loom:problem:"


class ClientError(Exception):
    """The root of every error of :mod:`controller.client`."""


@dataclass(frozen=True)
class FieldError:
    """One located error of a problem: ``loc`` is the place (``links[7].b`` in the resulting intent,
    ``body.asn`` or ``query.limit`` in the request), ``msg`` what is wrong there."""

    loc: str
    msg: str


@dataclass(frozen=True)
class Problem:
    """An RFC 9457 problem document as the API answers it (``application/problem+json``).

    ``document`` is the whole body as it came, with the fields some problems add
    (``revision`` on a stale ``If-Match``, ``failing`` on a refused unsafe commit); an
    answer that is not JSON (a proxy's error page) is ``{"detail": TEXT}``."""

    status: int
    title: str
    type: str = "about:blank"
    detail: str | None = None
    instance: str | None = None
    request_id: str | None = None
    errors: tuple[FieldError, ...] = ()
    document: Document = field(default_factory=dict)

    @property
    def kind(self) -> str | None:
        """Loom's name of the problem (``stale-revision``, ``invalid-intent``...), None for another type."""
        return self.type[len(PROBLEM_TYPE):] if self.type.startswith(PROBLEM_TYPE) else None

    @staticmethod
    def of(response: httpx.Response) -> Problem:
        """The problem ``response`` answers (whatever its body)."""
        try:
            body = response.json()
        except ValueError:
            body = None
        doc: Document = body if isinstance(body, dict) else {"detail": response.text}
        errors = tuple(FieldError(str(e.get("loc", "")), str(e.get("msg", "")))
                       for e in doc.get("errors") or [] if isinstance(e, dict))
        return Problem(status=response.status_code, title=str(doc.get("title") or response.reason_phrase),
                       type=str(doc.get("type") or "about:blank"), detail=doc.get("detail"),
                       instance=doc.get("instance"), request_id=doc.get("request_id"), errors=errors, document=doc)


class ApiError(ClientError):
    """The server answered with an error status: ``problem`` says what and where."""

    def __init__(self, problem: Problem, headers: httpx.Headers | None = None):
        self.problem = problem
        self.headers = headers if headers is not None else httpx.Headers()
        head = f"{problem.status} {problem.title}"
        super().__init__(f"{head}: {problem.detail}" if problem.detail else head)

    @property
    def status(self) -> int:
        return self.problem.status

    @property
    def kind(self) -> str | None:
        return self.problem.kind

    @property
    def errors(self) -> tuple[FieldError, ...]:
        return self.problem.errors


class ServerUnreachable(ClientError):
    """No answer from ``base_url`` after ``attempts`` tries; ``reason`` is the last transport error's text
    (the exception itself is the ``__cause__``)."""

    def __init__(self, base_url: str, reason: str, attempts: int):
        self.base_url, self.reason, self.attempts = base_url, reason, attempts
        super().__init__(f"cannot reach {base_url}: {reason}")


class NoIntent(ClientError):
    """The controller has no revision yet, so there is nothing to change."""

    def __init__(self) -> None:
        super().__init__("the controller has no intent yet: apply one first")


class DrainUnchanged(ClientError):
    """A drain of what ``revision`` already drains, or an undrain of what it does not: ``state`` is
    ``already drained`` or ``not drained``; no change is made."""

    def __init__(self, target: str, revision: int, state: str):
        self.target, self.revision, self.state = target, revision, state
        super().__init__(f"{target} is {state} in revision {revision}")
