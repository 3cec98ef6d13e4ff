"""The network-wide transaction: a change lands on every device or on none.

This module owns :func:`commit`, the controller side of DESIGN.md's
southbound transaction, over any :class:`~southbound.driver.DeviceDriver`:
Prepare on every device (each shows its diff); if any fails, Abort everywhere
and report which device said what; otherwise Commit stage by stage (DESIGN.md,
Transitions: the review's schedule; one stage of every device without one),
each with a confirm timer, and read every stage's state back before the next
stage starts: the stage's config hashes and kernel routes (the plan's routes
where a device's own config sets its kernel, ``fib``; under ``link-bandwidth``
a device's weights come from its neighbours' advertisements, so a stage only
needs a route for every planned prefix, and the last stage holds the whole
fabric against the plan: routes, next hops, weights within the realization's
rounding, :func:`southbound.wcmp.compare`); then Confirm everywhere. If
anything fails after the first Commit, every device is rolled back (a device
that never applied it answers that nothing changed and drops what it had
prepared). Devices that hear nothing roll back by themselves when their
confirm timer expires. Every step returns a per-device
:class:`~southbound.state.StepResult`.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.model import Intent, prefix_version
from controller.model.documents.base import JsonObject
from controller.model.plan import DevicePlan, Plan
from southbound.config import DeviceConfig
from southbound.driver import DeviceDriver, error_text, is_retryable
from southbound.render import device_configs
from southbound.state import DeviceState, StepResult
from southbound.wcmp import compare

__all__ = ["Progress", "StageProgress", "TransactionResult", "commit", "commit_plan", "commit_order", "new_change_id"]

#: ``progress(step, device, result)``: called with ``None`` before a call is sent, then with its result.
Progress = Callable[[str, str, StepResult | None], None]
#: ``on_stage(index, status)``: stage ``index`` of :attr:`TransactionResult.stages` is ``commit``,
#: ``verify``, ``done`` or ``failed``.
StageProgress = Callable[[int, str], None]


def commit_order(devices: Iterable[str], stages: Iterable[Iterable[str]] | None = None) -> list[list[str]]:
    """The stages a change's ``devices`` commit in: ``stages`` (the schedule, in commit order) kept to
    those devices, each device in the first stage that names it, empty stages dropped, and the devices
    no stage names in a last stage; no ``stages``: one stage of every device (sorted).

    >>> commit_order(["a", "b", "c", "d"], [["b"], ["x", "a", "b"], []])
    [['b'], ['a'], ['c', 'd']]
    >>> commit_order(["b", "a"])
    [['a', 'b']]
    """
    todo = sorted(set(devices))
    if stages is None:
        return [todo] if todo else []
    seen: set[str] = set()
    out: list[list[str]] = []
    for stage in stages:
        row = sorted({d for d in stage if d in set(todo) and d not in seen})
        if row:
            out.append(row)
            seen.update(row)
    rest = [d for d in todo if d not in seen]
    if rest:
        out.append(rest)
    return out


def new_change_id() -> str:
    return f"chg-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"


@dataclass
class TransactionResult:
    """How a transaction ended: ``stage`` is the last step run (``prepare``, ``commit``, ``verify``,
    ``confirm``), ``ok`` whether the change is in place and confirmed everywhere; ``steps`` holds
    every device's result of every step, ``seconds`` the time each step took."""

    change: str
    ok: bool = False
    stage: str = "prepare"
    dry_run: bool = False
    steps: dict[str, dict[str, StepResult]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    error: str = ""
    stages: list[list[str]] = field(default_factory=list)  # the commit order followed
    stages_done: int = 0  # stages committed and read back
    legs_done: int = 0  # a commit through intermediate plans: the legs (transactions) confirmed before this one
    note: str = ""  # what the caller did after it (a multi-leg commit: which legs were undone)

    def failures(self, step: str | None = None) -> list[StepResult]:
        return [r for s, per in self.steps.items() if step in (None, s) for r in per.values() if r.failed]

    def changed_devices(self) -> list[str]:
        return sorted(d for d, r in self.steps.get("prepare", {}).items() if r.changed)

    def to_document(self) -> JsonObject:
        return {"change": self.change, "ok": self.ok, "stage": self.stage, "dry_run": self.dry_run,
                "error": self.error, "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
                "stages": [[d for d in st] for st in self.stages], "stages_done": self.stages_done,
                "steps": {s: {d: r.to_document() for d, r in sorted(per.items())} for s, per in self.steps.items()}}


async def _each(step: str, devices: list[str], call: Callable[[str], Awaitable[StepResult]],
                progress: Progress | None, result: TransactionResult) -> dict[str, StepResult]:
    async def one(device: str) -> StepResult:
        if progress:
            progress(step, device, None)
        try:
            r = await call(device)
        except Exception as exc:  # a driver that raises instead of returning a failed result
            r = StepResult(device, step, failed=True, error=f"{type(exc).__name__}: {exc}")
        if progress:
            progress(step, device, r)
        return r

    t0 = time.perf_counter()
    got = await asyncio.gather(*(one(d) for d in devices))
    result.seconds[step] = result.seconds.get(step, 0.0) + time.perf_counter() - t0
    per = dict(zip(devices, got, strict=True))
    result.steps.setdefault(step, {}).update(per)  # a step run stage by stage adds up
    return per


def _summary(step: str, failed: list[StepResult]) -> str:
    head = "; ".join(f"{r.device}: {r.error}" for r in failed[:5])
    more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
    return f"{step} failed on {len(failed)} device(s): {head}{more}"


async def _verify(driver: DeviceDriver, devices: list[str], hashes: Mapping[str, str], plan: Plan | None,
                  check: Callable[[str, DeviceState], list[str]], timeout: float, interval: float,
                  progress: Progress | None, result: TransactionResult,
                  abandon: Callable[[], str | None] | None = None) -> dict[str, StepResult]:
    """Poll every device's state until it matches (config hash, and the plan where routes are observed):
    again after 50 ms, then twice as long each time up to ``interval`` (a kernel that converges in a
    tenth of a second is seen then, not after a whole interval). ``abandon``: asked while devices are still
    off; a reason (the fabric changed under the commit: a link went down, so the plan's routes cannot come)
    fails them at once instead of at the timeout."""
    deadline = time.monotonic() + timeout
    wait = min(0.05, interval)
    pending = list(devices)
    done: dict[str, StepResult] = {}
    t0 = time.perf_counter()
    for d in devices:
        if progress:
            progress("verify", d, None)
    while True:
        got = await asyncio.gather(*(driver.state(d) for d in pending), return_exceptions=True)
        still: list[str] = []
        for d, st in zip(pending, got, strict=True):
            if isinstance(st, BaseException):
                problems = [f"GetState failed: {error_text(st)}"]
                if not is_retryable(st):  # refused (fenced, say): asking again until the deadline changes nothing
                    done[d] = StepResult(d, "verify", failed=True, error=problems[0])
                    continue
            elif st.running_hash != hashes.get(d, st.running_hash):
                problems = [f"running config {st.running_hash[:12]} is not the committed {hashes[d][:12]}"]
            elif plan is not None and st.observed:
                problems = check(d, st)
            else:
                problems = []
            if problems:
                still.append(d)
                done[d] = StepResult(d, "verify", failed=True, error="; ".join(problems[:8]))
            else:
                done[d] = StepResult(d, "verify", config_hash=hashes.get(d, ""))
        pending = still
        why = abandon() if pending and abandon is not None else None
        if why:
            for d in pending:
                done[d] = StepResult(d, "verify", failed=True, error=f"{done[d].error}; verify abandoned: {why}")
            break
        if not pending or time.monotonic() >= deadline:
            break
        await asyncio.sleep(wait)
        wait = min(interval, wait * 2)
    result.seconds["verify"] = result.seconds.get("verify", 0.0) + time.perf_counter() - t0
    for d in devices:
        if progress:
            progress("verify", d, done[d])
    result.steps.setdefault("verify", {}).update(done)
    return done


async def commit(driver: DeviceDriver, configs: Mapping[str, DeviceConfig], plan: Plan | None = None, *,
                 realization: str = "link-bandwidth", wcmp: bool = True, change: str | None = None,
                 confirm_within: float = 60.0, verify_timeout: float = 30.0, verify_interval: float = 0.5,
                 dry_run: bool = False, progress: Progress | None = None,
                 stages: Sequence[Sequence[str]] | None = None,
                 on_stage: StageProgress | None = None,
                 sessions: Mapping[str, Iterable[str]] | None = None,
                 abandon: Callable[[], str | None] | None = None) -> TransactionResult:
    """Push ``configs`` (device -> config) to their agents as one all-or-nothing change.

    Parameters: ``plan`` (optional) is what the kernels must show afterwards, compared with
    ``realization`` (``link-bandwidth`` or ``fib``) rounding; ``wcmp=False`` means plain ECMP;
    ``confirm_within`` is each agent's confirm timer in seconds (it rolls back by itself after; a
    stage's devices get ``verify_timeout`` more per stage after theirs);
    ``verify_timeout`` bounds the wait for each stage's kernels to converge; ``dry_run`` stops
    after Prepare (every device's diff) and aborts; ``stages`` is the commit order
    (:func:`commit_order`; None: every device at once), ``on_stage`` hears each stage start,
    be read back and end; ``sessions``: per device, the ports whose BGP session the change resets: a
    stage before the last is read back only once those of its devices whose peer has moved too are
    Established again (the schedule's states assume it); ``abandon``: asked during each read-back, a
    reason fails it at once (:func:`_verify`). Returns a :class:`TransactionResult`; never raises for a
    device's failure.
    """
    change = change or new_change_id()
    result = TransactionResult(change, dry_run=dry_run)
    devices = sorted(configs)
    result.stages = commit_order(devices, stages)

    prepared = await _each("prepare", devices, lambda d: driver.prepare(d, change, configs[d]), progress, result)
    failed = [r for r in prepared.values() if r.failed]
    if failed or dry_run:
        await _each("abort", devices, lambda d: driver.abort(d, change), progress, result)
        result.error = _summary("prepare", failed) if failed else ""
        result.ok = not failed
        return result

    hashes = {d: r.config_hash for d, r in prepared.items()}
    moved: set[str] = set()  # the devices of the stages committed so far, the running one included
    check, stage_check = _read_back_checks(configs, plan, realization=realization, wcmp=wcmp, sessions=sessions,
                                           moved=moved)
    failed = await _staged(driver, result, hashes, plan, check, stage_check, confirm_within=confirm_within,
                           verify_timeout=verify_timeout, verify_interval=verify_interval, progress=progress,
                           on_stage=on_stage, moved=moved, abandon=abandon)
    if not failed:
        result.stage = "confirm"
        confirmed = await _each("confirm", devices, lambda d: driver.confirm(d, change), progress, result)
        failed = [r for r in confirmed.values() if r.failed]
        if not failed:
            result.ok = True
            return result
    result.error = _summary(result.stage, failed)
    await _each("rollback", devices, lambda d: driver.rollback(d, change), progress, result)
    return result


def _read_back_checks(configs: Mapping[str, DeviceConfig], plan: Plan | None, *, realization: str, wcmp: bool,
                      sessions: Mapping[str, Iterable[str]] | None, moved: set[str]
                      ) -> tuple[Callable[[str, DeviceState], list[str]], Callable[[str, DeviceState], list[str]]]:
    """What a device's state read back must show: after the last stage, ``check`` (the plan, as
    :func:`~southbound.wcmp.compare` rounds it); after a stage before the last, ``stage_check``. ``moved``
    is filled in as the stages start (:func:`_staged`)."""
    fabric = sorted({p for dp in (plan.devices.values() if plan else ()) for p in dp.routes})

    resets = {d: [(n.key, n.peer) for n in configs[d].neighbors if n.port in set(ports)]
              for d, ports in (sessions or {}).items() if d in configs}  # as the new configs name them

    def rejoined(d: str, st: DeviceState) -> list[str]:
        """The sessions of ``d`` the change reset, to a peer that has moved too, not yet Established (a
        ``--dry-frr`` agent observes none)."""
        if not st.observed:
            return []
        up = {b.neighbor for b in st.sessions if b.state == "Established"}
        return [f"BGP session to {peer} ({key}) not re-established yet" for key, peer in resets.get(d, ())
                if peer in moved and key not in up]

    def bridging(d: str, st: DeviceState, dp: DevicePlan | None) -> list[str]:
        """The sessions of ``d`` over a link that has two in its config (a bridge: the sessions a change
        moves, beside the ones they replace), not yet Established, and (routes BGP installs) the planned
        routes not yet over both: a bridge leg ends only with both up and carrying the routes, so that the
        next leg, which takes the old ones away, leaves no route without a next hop."""
        if not st.observed:
            return []
        ports = Counter(n.port for n in configs[d].neighbors)
        up = {b.neighbor for b in st.sessions if b.state == "Established"}
        doubled = {n.port: ports[n.port] for n in configs[d].neighbors if ports[n.port] > 1 and n.peer in moved}
        waiting = [f"BGP session to {n.peer} ({n.key}) not established yet" for n in configs[d].neighbors
                   if n.port in doubled and n.key not in up]
        fib = wcmp and realization == "fib"  # the agent installs those routes, whatever the sessions carry
        return waiting + ([] if fib or dp is None else _unbridged(dp, st, doubled))

    def check(d: str, st: DeviceState) -> list[str]:
        assert plan is not None
        dp = plan.devices.get(d)
        if dp is None:
            return bridging(d, st, dp)
        return compare(dp, st, realization=realization, wcmp=wcmp, fabric_prefixes=fabric,
                       originated=configs[d].originated) + bridging(d, st, dp)

    def stage_check(d: str, st: DeviceState) -> list[str]:
        """A stage before the last: the device's own kernel state (see the module's docstring), and the
        sessions the change reset between moved devices up again."""
        if realization == "fib" or not wcmp:
            return check(d, st) + rejoined(d, st)
        assert plan is not None
        dp = plan.devices.get(d)
        own = [f"{p}: no route installed yet" for p in sorted(dp.routes) if p not in st.routes] if dp else []
        return own + rejoined(d, st)

    return check, stage_check


def _unbridged(dp: DevicePlan, st: DeviceState, doubled: Mapping[str, int]) -> list[str]:
    """The planned IPv4 routes (both sessions of a bridged link carry IPv4) whose kernel route does not yet
    have a next hop from every session over each bridged port of the plan's: Established is not enough, a
    route learnt over the old session only would go with it."""
    out = []
    for prefix, gid in sorted(dp.routes.items()):
        route = st.routes.get(prefix)
        if prefix_version(prefix) != 4 or route is None:
            continue
        for port in sorted({h.port for h in dp.groups[gid]} & set(doubled)):
            have = sum(1 for nh in route.nexthops if nh.port == port)
            if have < doubled[port]:
                out.append(f"{prefix}: {have} of its {doubled[port]} sessions over {port} carry it yet")
    return out


async def _staged(driver: DeviceDriver, result: TransactionResult, hashes: Mapping[str, str], plan: Plan | None,
                  check: Callable[[str, DeviceState], list[str]], stage_check: Callable[[str, DeviceState], list[str]],
                  *, confirm_within: float, verify_timeout: float, verify_interval: float,
                  progress: Progress | None, on_stage: StageProgress | None, moved: set[str],
                  abandon: Callable[[], str | None] | None = None) -> list[StepResult]:
    """Commit ``result.stages`` one after the other, each read back before the next (the last one with the
    whole fabric held against ``plan``), adding each stage's devices to ``moved`` as it starts; the
    failures that stopped it, if any."""
    change, devices = result.change, sorted(hashes)
    for i, stage in enumerate(result.stages):
        moved.update(stage)
        last = i == len(result.stages) - 1
        result.stage = "commit"
        if on_stage:
            on_stage(i, "commit")
        # the confirm timer of a stage's devices also covers the read-back of every stage after it, so
        # that none rolls back by itself while the transaction is still on its way to Confirm
        window = confirm_within + (len(result.stages) - 1 - i) * verify_timeout if confirm_within > 0 else 0.0
        committed = await _each("commit", stage, functools.partial(_commit_one, driver, change, window), progress,
                                result)
        failed = [r for r in committed.values() if r.failed]
        if not failed:
            result.stage = "verify"
            if on_stage:
                on_stage(i, "verify")
            verified = await _verify(driver, devices if last else stage, hashes, plan, check if last else stage_check,
                                     verify_timeout, verify_interval, progress, result, abandon)
            failed = [r for r in verified.values() if r.failed]
        if on_stage:
            on_stage(i, "failed" if failed else "done")
        if failed:
            return failed
        result.stages_done = i + 1
    return []


def _commit_one(driver: DeviceDriver, change: str, confirm_within: float, device: str) -> Awaitable[StepResult]:
    return driver.commit(device, change, confirm_within)


async def commit_plan(driver: DeviceDriver, intent: Intent, plan: Plan, *, only: Collection[str] | None = None,
                      **kwargs: Any) -> TransactionResult:
    """:func:`commit` of the device configs that realize ``plan`` for ``intent`` (``southbound.render``), on
    every device the driver has, or on ``only`` those (a failed device, whose agent is gone, is left out)."""
    keep = set(driver.devices) if only is None else set(driver.devices) & set(only)
    configs = {d: c for d, c in device_configs(intent, plan).items() if d in keep}
    kwargs.setdefault("realization", intent.wcmp_realization.value)
    kwargs.setdefault("wcmp", intent.wcmp_enabled)
    return await commit(driver, configs, plan, **kwargs)
