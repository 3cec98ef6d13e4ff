""":class:`Client`: Loom's REST API as typed calls, for the CLI, the tests and users' automation.

Each call answers a model of the ground layer where one exists
(:mod:`controller.model.documents`: the change, review, plan, state, telemetry,
auto-TE documents; :class:`~controller.model.Intent`), else a small frozen
dataclass (:mod:`controller.client.answers`). Both read a newer server's answers: a field it
added is dropped (``read_newer``), so this client keeps working. ``client.raw`` makes the same calls
and answers the JSON documents unchanged (:mod:`controller.client.raw`). Retries,
back-off and idempotency keys are in :mod:`controller.client.transport`; errors in
:mod:`controller.client.errors`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import Literal

import httpx

from controller.client.answers import (
    DriftReport,
    Event,
    Health,
    Page,
    Repair,
    Revision,
    Status,
    WhoAmI,
    parse_events,
)
from controller.client.errors import ApiError, DrainUnchanged, NoIntent, Problem, ServerUnreachable
from controller.client.raw import RawApi, Stat
from controller.client.transport import RETRYABLE_ERRORS, RetryPolicy, Transport
from controller.model import Intent
from controller.model.documents import (
    FINAL_STATES,
    AutoTeStatusDocument,
    ChangeDocument,
    ClusterDocument,
    DemandCaptureDocument,
    DeviceStateDocument,
    DeviceStatesDocument,
    FidelityDocument,
    JobPlacementsDocument,
    JobWhatIfDocument,
    LinkStatesDocument,
    MeasuredDemandsDocument,
    PatternsDocument,
    PlanDocument,
    ReactionTableDocument,
    ReviewDocument,
    TelemetryLinksDocument,
    read_newer,
)
from controller.model.intent import validate_intent

__all__ = ["DEFAULT_SERVER", "Client", "drain_patch"]

#: where a client goes without a URL and without ``$LOOM_SERVER``: a local ``loom serve``
DEFAULT_SERVER = "http://127.0.0.1:8000"
IntentLike = Intent | Mapping[str, object]


def _document(intent: IntentLike) -> Mapping[str, object]:
    return intent.to_document() if isinstance(intent, Intent) else intent


def drain_patch(intent: Mapping[str, object], target: str, *, undrain: bool = False) -> list[dict[str, object]]:
    """The JSON patch that adds ``target``'s drain policy to ``intent`` (or, ``undrain``, removes it).
    Raises ``LookupError`` when there is nothing to do (drained already, or not drained)."""
    policies = intent.get("policies") or []
    assert isinstance(policies, list)
    index = next((i for i, p in enumerate(policies)
                  if isinstance(p, dict) and p.get("kind") == "drain" and p.get("target") == target), None)
    if (index is None) == undrain:
        raise LookupError("not drained" if undrain else "already drained")
    if undrain:
        return [{"op": "remove", "path": f"/policies/{index}"}]
    return [{"op": "add", "path": "/policies/-", "value": {"kind": "drain", "target": target}}]


class Client:
    """A running controller's REST API (``/v1``), typed.

    ``base_url`` defaults to ``$LOOM_SERVER`` (else ``http://127.0.0.1:8000``) and ``token`` to
    ``$LOOM_TOKEN``, as for the CLI (``""``: no token). ``retries`` is a count or a :class:`RetryPolicy`;
    ``timeout`` bounds each try, in seconds (a review of a large fabric takes a while). ``http``: an httpx
    client to use instead of making one (a test's in-process app); it is not closed with this one. ``sleep``
    waits between tries (a test's may count the waits, or make the server appear).

    >>> with Client("http://127.0.0.1:8000", token=TOKEN) as loom:   # doctest: +SKIP
    ...     loom.status().active_revision
    """

    def __init__(self, base_url: str | None = None, token: str | None = None, *, timeout: float = 120.0,
                 retries: int | RetryPolicy = 3, http: httpx.Client | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        url = base_url or os.environ.get("LOOM_SERVER") or DEFAULT_SERVER
        policy = retries if isinstance(retries, RetryPolicy) else RetryPolicy(retries=retries)
        self.transport = Transport(url, os.environ.get("LOOM_TOKEN", "") if token is None else token,
                                   timeout=timeout, retry=policy, http=http, sleep=sleep)
        self.raw = RawApi(self.transport)

    @property
    def base_url(self) -> str:
        return self.transport.base_url

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- who, health, status ------------------------------------------------------------------
    def whoami(self) -> WhoAmI:
        return WhoAmI.of(self.raw.whoami())

    def health(self, *, ready: bool = True) -> Health:
        """Readiness (``ApiError`` 503 when not ready) or, ``ready=False``, liveness."""
        return Health.of(self.raw.health(ready=ready))

    def status(self) -> Status:
        return Status.of(self.raw.status())

    def cluster(self) -> ClusterDocument:
        return read_newer(ClusterDocument, self.raw.cluster())

    # -- the intent and its revisions -----------------------------------------------------------
    def intent(self, revision: int | None = None) -> Intent:
        """The head's intent, or ``revision``'s."""
        return validate_intent(self.raw.intent(revision))

    def put_intent(self, intent: IntentLike, *, if_match: int | None = None,
                   idempotency_key: str | None = None) -> Intent:
        """Replace the head's intent (``if_match``: only if the head is still that revision)."""
        return validate_intent(self.raw.put_intent(_document(intent), if_match=if_match,
                                                   idempotency_key=idempotency_key))

    def revisions(self, *, limit: int = 50, offset: int | None = None) -> Page[Revision]:
        return Page.of(self.raw.revisions(limit=limit, offset=offset), Revision.of)

    def revision(self, revision: int) -> Revision:
        return Revision.of(self.raw.revision(revision))

    def plan(self, revision: int | Literal["active"] = "active") -> PlanDocument:
        return read_newer(PlanDocument, self.raw.plan(revision))

    # -- changes ----------------------------------------------------------------------------------
    def create_change(self, base_revision: int, *, intent: IntentLike | None = None,
                      patch: Sequence[Mapping[str, object]] | None = None, message: str = "",
                      if_match: int | None = None, idempotency_key: str | None = None) -> ChangeDocument:
        """A draft change against ``base_revision``: a whole ``intent`` or a JSON ``patch``. Sent with an
        ``Idempotency-Key`` (a fresh one unless given), so a retry never makes a second change."""
        return read_newer(ChangeDocument, self.raw.create_change(
            base_revision, intent=None if intent is None else _document(intent), patch=patch, message=message,
            if_match=if_match, idempotency_key=idempotency_key))

    def propose(self, intent: IntentLike, *, base_revision: int | None = None, message: str = "") -> ChangeDocument:
        """The change that brings the fabric to ``intent``: against ``base_revision``, else the active
        revision, else the head; on a controller with no revision yet, ``intent`` becomes the first one.
        What the intent changes from its base joins the head at commit, beside the head's other edits."""
        doc = _document(intent)
        base = base_revision
        if base is None:
            st = self.status()
            base = st.active_revision or st.head_revision
        if base is None:
            self.raw.put_intent(doc)
            base = self.status().head_revision
            assert base is not None
        return self.create_change(base, intent=doc, message=message)

    def changes(self, *, state: str | None = None, limit: int = 20, offset: int | None = None) -> Page[ChangeDocument]:
        """Changes, newest first (each review brief)."""
        page = self.raw.changes(state=state, limit=limit, offset=offset)
        return Page.of(page, lambda d: read_newer(ChangeDocument, d))

    def change(self, change_id: int) -> ChangeDocument:
        return read_newer(ChangeDocument, self.raw.change(change_id))

    def review(self, change_id: int) -> ReviewDocument:
        """The dry run: verdict, plan diff, per-link utilization before and after, config diff, safety."""
        return read_newer(ReviewDocument, self.raw.review(change_id))

    def commit(self, change_id: int, *, force: bool = False, reason: str | None = None, wait: bool = False,
               idempotency_key: str | None = None) -> ChangeDocument:
        """Commit a reviewed change (``force`` an unsafe one, with a ``reason``); with ``wait``, answer the
        change once final (:meth:`wait`). A refused commit is :class:`ApiError` 409 (``failing`` in its
        problem document)."""
        ch = read_newer(ChangeDocument, self.raw.commit(change_id, force=force, reason=reason,
                                                           idempotency_key=idempotency_key))
        return self.wait(ch.id) if wait else ch

    def wait(self, change_id: int, *, interval: float = 0.3, timeout: float | None = None) -> ChangeDocument:
        """Poll the change until it is final (committed, failed or rolled back); ``TimeoutError`` after
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ch = self.change(change_id)
            if ch.state in FINAL_STATES:
                return ch
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"change {change_id} is still {ch.state.value} after {timeout} s")
            time.sleep(interval)

    def rollback(self, revision: int, *, idempotency_key: str | None = None) -> ChangeDocument:
        """A draft change back to ``revision``'s intent (review and commit it)."""
        return read_newer(ChangeDocument, self.raw.rollback(revision, idempotency_key=idempotency_key))

    def drain(self, target: str, *, message: str = "") -> ChangeDocument:
        """A draft change that drains ``target`` (a device or ``device:port``) in the active revision (else
        the head). Raises :class:`DrainUnchanged` when it is drained already, :class:`NoIntent` when there
        is no revision."""
        return self._drain(target, undrain=False, message=message or f"drain {target}")

    def undrain(self, target: str, *, message: str = "") -> ChangeDocument:
        """A draft change that removes ``target``'s drain (:class:`DrainUnchanged` when not drained)."""
        return self._drain(target, undrain=True, message=message or f"undrain {target}")

    def _drain(self, target: str, *, undrain: bool, message: str) -> ChangeDocument:
        st = self.status()
        base = st.active_revision or st.head_revision
        if base is None:
            raise NoIntent()
        try:
            patch = drain_patch(self.raw.intent(base), target, undrain=undrain)
        except LookupError as exc:
            raise DrainUnchanged(target, base, str(exc)) from None
        return self.create_change(base, patch=patch, message=message)

    def events(self, *, last_event_id: int | None = None) -> Generator[Event, None, None]:
        """The server-sent events (``change.state``, ``link.down``, ...), from the next one, or after
        ``last_event_id`` (0: every event kept); a broken stream is resumed after the last event seen."""
        last, failures = last_event_id, 0
        while True:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            try:
                with self.transport.stream("GET", "/v1/events", headers=headers) as response:
                    if not response.is_success:
                        response.read()
                        raise ApiError(Problem.of(response), response.headers)
                    for event in parse_events(response.iter_lines()):
                        failures, last = 0, event.id
                        yield event
            except RETRYABLE_ERRORS as exc:
                failures += 1
                if failures > self.transport.retry.retries:
                    raise ServerUnreachable(self.base_url, str(exc), failures) from exc
            self.transport.sleep(self.transport.retry.delay(max(1, failures)))

    # -- what the fabric runs ---------------------------------------------------------------------
    def device_state(self, name: str) -> DeviceStateDocument:
        return read_newer(DeviceStateDocument, self.raw.device_state(name))

    def device_states(self) -> DeviceStatesDocument:
        return read_newer(DeviceStatesDocument, self.raw.device_states())

    def link_states(self) -> LinkStatesDocument:
        return read_newer(LinkStatesDocument, self.raw.link_states())

    def reactions(self) -> ReactionTableDocument:
        return read_newer(ReactionTableDocument, self.raw.reactions())

    def drift(self, *, refresh: bool = True) -> DriftReport:
        return DriftReport.of(self.raw.drift(refresh=refresh))

    def repair_drift(self) -> Repair:
        return Repair.of(self.raw.repair_drift())

    # -- telemetry ----------------------------------------------------------------------------------
    def telemetry_links(self, *, window_s: float | None = None) -> TelemetryLinksDocument:
        return read_newer(TelemetryLinksDocument, self.raw.telemetry_links(window_s=window_s))

    def measured_demand(self, *, window_s: float | None = None, stat: Stat | None = None) -> MeasuredDemandsDocument:
        return read_newer(MeasuredDemandsDocument, self.raw.measured_demand(window_s=window_s, stat=stat))

    def fidelity(self, *, window_s: float | None = None, stat: Stat | None = None) -> FidelityDocument:
        return read_newer(FidelityDocument, self.raw.fidelity(window_s=window_s, stat=stat))

    def patterns(self, *, window_s: float | None = None) -> PatternsDocument:
        return read_newer(PatternsDocument, self.raw.patterns(window_s=window_s))

    def capture_demand(self, *, window_s: float = 300.0, stat: Stat = "p95", headroom: float = 1.0,
                       if_match: int | None = None, idempotency_key: str | None = None) -> DemandCaptureDocument:
        """The measured matrix times ``headroom`` becomes the intent's demands, in one revision."""
        return read_newer(DemandCaptureDocument, self.raw.capture_demand(
            window_s=window_s, stat=stat, headroom=headroom, if_match=if_match, idempotency_key=idempotency_key))

    # -- jobs and automatic re-tuning ---------------------------------------------------------------
    def what_if(self, job: Mapping[str, object]) -> JobWhatIfDocument:
        return read_newer(JobWhatIfDocument, self.raw.what_if(job))

    def placement(self, job: Mapping[str, object], candidates: Sequence[str], *, top: int | None = None,
                  objective: str | None = None) -> JobPlacementsDocument:
        return read_newer(JobPlacementsDocument, self.raw.placement(job, candidates, top=top, objective=objective))

    def auto_te(self) -> AutoTeStatusDocument:
        return read_newer(AutoTeStatusDocument, self.raw.auto_te())

    def pause_auto_te(self, reason: str = "") -> AutoTeStatusDocument:
        return read_newer(AutoTeStatusDocument, self.raw.pause_auto_te(reason))

    def resume_auto_te(self, reason: str = "") -> AutoTeStatusDocument:
        return read_newer(AutoTeStatusDocument, self.raw.resume_auto_te(reason))

