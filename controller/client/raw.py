"""The REST API's resources as the JSON documents the server sends: ``Client.raw``.

One method per call, which knows its path, its query, its headers (``If-Match`` as
``"N"``) and whether it is safe to repeat: every write that Loom runs once per
``Idempotency-Key`` gets a fresh key unless the caller passes one (the same key on
each try, so a retry after a lost answer gets the first answer, not a second
change); a review and a what-if are dry runs, repeated as they are. The answers are
the server's documents unchanged, keys in the server's order: what the CLI prints
with ``--json``, and what a script passes on. :class:`~controller.client.Client`
answers the same calls as typed models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal
from urllib.parse import quote

from controller.client.answers import Document
from controller.client.transport import Transport, new_idempotency_key

__all__ = ["Document", "RawApi", "Stat"]

Stat = Literal["mean", "p95", "max"]


def _etag(revision: int | None) -> dict[str, str]:
    return {"If-Match": f'"{revision}"'} if revision is not None else {}


def _query(**values: str | int | float | None) -> dict[str, str | int | float]:
    return {k: v for k, v in values.items() if v is not None}


class RawApi:
    """The API's calls, answering JSON documents (see the module docstring)."""

    def __init__(self, transport: Transport):
        self.transport = transport

    def _get(self, path: str, **query: str | int | float | None) -> Document:
        doc: Document = self.transport.call("GET", path, params=_query(**query) or None)
        return doc

    def _write(self, method: str, path: str, body: object = None, *, if_match: int | None = None,
               key: str | None = None, keyed: bool = True, repeatable: bool | None = None) -> Document:
        doc: Document = self.transport.call(
            method, path, json_body=body, headers=_etag(if_match),
            idempotency_key=(key or new_idempotency_key()) if keyed else None, repeatable=repeatable)
        return doc

    # -- who, health, status ------------------------------------------------------------------
    def whoami(self) -> Document:
        return self._get("/v1/whoami")

    def health(self, *, ready: bool = True) -> Document:
        """``/readyz`` (the store answers, migrations at head) or, ``ready=False``, ``/healthz``."""
        return self._get("/readyz" if ready else "/healthz")

    def status(self) -> Document:
        return self._get("/v1/status")

    def cluster(self) -> Document:
        return self._get("/v1/cluster")

    # -- the intent and its revisions -----------------------------------------------------------
    def intent(self, revision: int | None = None) -> Document:
        """The head's intent document, or ``revision``'s."""
        return self._get("/v1/intent" if revision is None else f"/v1/revisions/{int(revision)}/intent")

    def put_intent(self, document: Mapping[str, object], *, if_match: int | None = None,
                   idempotency_key: str | None = None) -> Document:
        """Replace the head's intent with ``document`` (a new revision when it differs)."""
        return self._write("PUT", "/v1/intent", document, if_match=if_match, key=idempotency_key)

    def revisions(self, *, limit: int = 50, offset: int | None = None) -> Document:
        return self._get("/v1/revisions", limit=limit, offset=offset)

    def revision(self, revision: int) -> Document:
        return self._get(f"/v1/revisions/{int(revision)}")

    def revision_diff(self, a: int, b: int) -> Document:
        return self._get(f"/v1/revisions/{int(a)}/diff/{int(b)}")

    def plan(self, revision: int | Literal["active"] = "active") -> Document:
        """A revision's plan (compiled on first request), or the active one's with its overlay."""
        return self._get(f"/v1/plans/{revision if revision == 'active' else int(revision)}")

    # -- changes ----------------------------------------------------------------------------------
    def create_change(self, base_revision: int, *, intent: Mapping[str, object] | None = None,
                      patch: Sequence[Mapping[str, object]] | None = None, message: str = "",
                      if_match: int | None = None, idempotency_key: str | None = None) -> Document:
        """A draft change against ``base_revision``: a whole ``intent`` document or a JSON ``patch``."""
        body: dict[str, object] = {"base_revision": base_revision}
        if intent is not None:
            body["intent"] = intent
        if patch is not None:
            body["patch"] = list(patch)
        body["message"] = message
        return self._write("POST", "/v1/changes", body, if_match=if_match, key=idempotency_key)

    def changes(self, *, state: str | None = None, limit: int = 20, offset: int | None = None) -> Document:
        """A page of changes, newest first (``items``, ``total``, ``limit``, ``offset``, ``next``)."""
        return self._get("/v1/changes", limit=limit, state=state, offset=offset)

    def change(self, change_id: int) -> Document:
        return self._get(f"/v1/changes/{int(change_id)}")

    def review(self, change_id: int) -> Document:
        """The dry run: plan diff, config diff, safety report (sent again on a lost answer: it stores no
        more than the review itself)."""
        return self._write("POST", f"/v1/changes/{int(change_id)}/review", keyed=False, repeatable=True)

    def commit(self, change_id: int, *, force: bool = False, reason: str | None = None,
               idempotency_key: str | None = None) -> Document:
        """Start the commit of a reviewed change (it runs in the background: follow ``change``)."""
        return self._write("POST", f"/v1/changes/{int(change_id)}/commit", {"force": force, "reason": reason},
                           key=idempotency_key)

    def rollback(self, revision: int, *, idempotency_key: str | None = None) -> Document:
        """A draft change back to ``revision``'s intent."""
        return self._write("POST", f"/v1/revisions/{int(revision)}/rollback", {}, key=idempotency_key)

    # -- what the fabric runs ---------------------------------------------------------------------
    def device_state(self, name: str) -> Document:
        """What the switch really installed (503 when its agent does not answer)."""
        return self._get(f"/v1/devices/{quote(name, safe='')}/state")

    def device_states(self) -> Document:
        return self._get("/v1/state/devices")

    def link_states(self) -> Document:
        return self._get("/v1/state/links")

    def reactions(self) -> Document:
        return self._get("/v1/state/reactions")

    def drift(self, *, refresh: bool = True) -> Document:
        """Every device against the active revision: checked now, or (``refresh=False``) the last check."""
        return self._get("/v1/drift", refresh=str(refresh).lower())

    def repair_drift(self) -> Document:
        """Push the active revision again: ``{"change": ID, "revision": N}`` (not repeated: no key)."""
        return self._write("POST", "/v1/drift/repair", keyed=False)

    # -- telemetry ----------------------------------------------------------------------------------
    def telemetry_links(self, *, window_s: float | None = None) -> Document:
        return self._get("/v1/telemetry/links", window_s=window_s)

    def measured_demand(self, *, window_s: float | None = None, stat: Stat | None = None) -> Document:
        return self._get("/v1/telemetry/demand", window_s=window_s, stat=stat)

    def fidelity(self, *, window_s: float | None = None, stat: Stat | None = None) -> Document:
        return self._get("/v1/telemetry/fidelity", window_s=window_s, stat=stat)

    def patterns(self, *, window_s: float | None = None) -> Document:
        return self._get("/v1/telemetry/patterns", window_s=window_s)

    def capture_demand(self, *, window_s: float = 300.0, stat: Stat = "p95", headroom: float = 1.0,
                       if_match: int | None = None, idempotency_key: str | None = None) -> Document:
        """The measured matrix (times ``headroom``) becomes the intent's demands, in one revision."""
        return self._write("POST", "/v1/demands/from-telemetry",
                           {"window_s": window_s, "stat": stat, "headroom": headroom}, if_match=if_match,
                           key=idempotency_key)

    # -- jobs and automatic re-tuning ---------------------------------------------------------------
    def job_performance(self, name: str, *, window_s: float | None = None) -> Document:
        """A job's measured rate, period and network slowdown (``GET /v1/jobs/{name}/performance``)."""
        return self._get(f"/v1/jobs/{quote(name, safe='')}/performance", window_s=window_s)

    def discovered_jobs(self, *, window_s: float | None = None, min_confidence: float | None = None) -> Document:
        """The groups of measured traffic no declared job explains, offered as jobs."""
        return self._get("/v1/jobs/discovered", window_s=window_s, min_confidence=min_confidence)

    def what_if(self, job: Mapping[str, object]) -> Document:
        """The active intent planned and checked with ``job`` added; nothing is stored."""
        return self._write("POST", "/v1/jobs/what-if", job, keyed=False, repeatable=True)

    def placement(self, job: Mapping[str, object], candidates: Sequence[str], *, top: int | None = None,
                  objective: str | None = None) -> Document:
        """The best placements of ``job`` (with ``members: N``) over ``candidates``, each planned and checked;
        nothing is stored (``POST /v1/jobs/placement``)."""
        body: dict[str, object] = {"job": dict(job), "candidates": list(candidates)}
        if top is not None:
            body["top"] = top
        if objective is not None:
            body["objective"] = objective
        return self._write("POST", "/v1/jobs/placement", body, keyed=False, repeatable=True)

    def auto_te(self) -> Document:
        return self._get("/v1/auto-te")

    def pause_auto_te(self, reason: str = "") -> Document:
        return self._write("POST", "/v1/auto-te/pause", {"reason": reason}, keyed=False)

    def resume_auto_te(self, reason: str = "") -> Document:
        return self._write("POST", "/v1/auto-te/resume", {"reason": reason}, keyed=False)
