"""Job-aware planning (DESIGN.md, ML workloads: ``auto_te`` with ``objective: jobs``; issue #34 item 4).

The WCMP linear program minimizes the maximum link utilization. Under ``objective: jobs`` the plan is
chosen instead for the running jobs: the smallest worst slowdown, each job's weighted by its ``priority``,
with every link still under the utilization limit.

**The model** (:mod:`controller.telemetry.jobperf`'s, under a plan's prediction rather than counters): a
job's iteration is its template's phases one after another, each as long as its slowest directed link,
``gigabits / (capacity x (1 - rho))``, ``rho`` the utilization of the other traffic on the link (declared
demands and the other jobs, routed by the plan). Its slowdown is that time over the same on an idle fabric
(:func:`job_times`).

**The search** (:func:`plan_for_jobs`): the slowdown is not linear in the split ratios, so the plan is
found by the LP itself, steered. Starting from the maximum-utilization plan, each round takes the links the
jobs cross, weighed by how much of the worst weighted slowdown each explains, and compiles the intent again
with those links' capacities scaled down for the solver (the LP then moves other traffic off them, where
the fabric has room); the candidate is judged on the real capacities. Rounds try the steering strengths
of :data:`STEERING`; the best candidate whose every link stays under the limit is kept (better by more
than :data:`TIE`, relative: a difference in the last digits is a tie), the maximum-utilization plan when
none beats it (so the objective never does worse than ``mlu`` under its own measure). The returned plan's
loads and summary are recomputed on the real capacities. Deterministic: the same intent gives the same plan.
But the path is sensitive to the last bits of the blame: a steered capacity one part in 1e13 off can make
the LP pick another of its optimal vertices and the search another path (on the Clos M bench, summing the
same loads in another order moved the worst weighted slowdown between 3.5 and 4.2), so a change that keeps
the plans must keep the arithmetic, not only the value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from controller.model import Intent, Job
from controller.model.documents import JobTimeDocument
from controller.model.jobs import job_demands, originated_prefixes
from controller.model.plan import LinkLoad, Plan
from controller.telemetry.jobperf import comm_time, phase_bits
from safety.estimate import Loaded, RoutingMatrix, link_loader, routing_matrix

__all__ = ["STEERING", "TIE", "JobTime", "job_time_rows", "job_times", "plan_for_jobs", "worst_slowdown"]

#: the fractions of a job link's capacity the solver is told is taken, per round (scaled by how much of the
#: worst weighted slowdown the link explains)
STEERING = (0.2, 0.4, 0.6, 0.8)
#: relative difference under which two candidates' worst slowdowns (then maximum utilizations) are a tie
TIE = 1e-9


@dataclass(frozen=True, slots=True)
class JobTime:
    """One job's predicted communication time per iteration under a plan: ``comm_s`` beside the other
    traffic, ``comm_s_idle`` on an idle fabric, their ratio ``slowdown``, and its ``priority``."""

    job: str
    priority: float
    comm_s: float
    comm_s_idle: float

    @property
    def slowdown(self) -> float:
        return self.comm_s / self.comm_s_idle if self.comm_s_idle > 0 else 1.0

    @property
    def weighted(self) -> float:
        """The slowdown beyond 1 weighted by priority, plus 1 (what the objective minimizes the worst of)."""
        return 1.0 + self.priority * (self.slowdown - 1.0)


def _capacity(intent: Intent) -> np.ndarray:
    return np.repeat(np.array([lk.capacity_gbps for lk in intent.links], dtype=np.float64), 2)


def _own_load(job: Job, intent: Intent, rm: RoutingMatrix) -> np.ndarray:
    index = {p: j for j, p in enumerate(rm.pairs)}
    x = np.zeros(len(rm.pairs))
    for key, g in job_demands(job, originated_prefixes(intent), intent.registry).items():
        if key in index:
            x[index[key]] += g
    return np.asarray(rm.matrix @ x, dtype=np.float64)


def _edge_times(intent: Intent, plan: Plan, loaded: Loaded | None = None
                ) -> tuple[dict[str, JobTime], dict[str, np.ndarray]]:
    """Each job's time, and the time per iteration it spends on each directed edge (summed over phases);
    ``loaded``: the plan's table and directed-edge loads (:func:`~safety.estimate.link_loader`) when the
    caller has them already."""
    if not intent.jobs:
        return {}, {}
    members = sorted({t for job in intent.jobs for t in job.tors})
    origins = originated_prefixes(intent)
    loaded = link_loader(intent)(plan) if loaded is None else loaded
    # the jobs' pairs only (from a member to a member's prefix): a fabric's all would cost seconds
    rm = routing_matrix(intent, plan, ingresses=members, prefixes={p for t in members for p in origins.get(t, ())},
                        loaded=loaded)
    loads, cap = loaded.load, _capacity(intent)
    times, edges = {}, {}
    for job in intent.jobs:
        bits = phase_bits(job, intent, rm)
        other = np.maximum(loads - _own_load(job, intent, rm), 0.0)
        busy, idle = comm_time(bits, cap, other), comm_time(bits, cap)
        times[job.name] = JobTime(job.name, float(job.priority or 1.0), busy.seconds, idle.seconds)
        edges[job.name] = busy.per_edge
    return times, edges


def job_times(intent: Intent, plan: Plan) -> dict[str, JobTime]:
    """Every job of ``intent``'s predicted communication time under ``plan`` (see the module docstring)."""
    return _edge_times(intent, plan)[0]


def worst_slowdown(times: Mapping[str, JobTime]) -> float:
    """The worst priority-weighted slowdown of ``times`` (1.0 without jobs)."""
    return max((t.weighted for t in times.values()), default=1.0)


def _limit(intent: Intent) -> float:
    pol = intent.policy("utilization_limit")
    return float(pol.max) if pol is not None else 1.0


def _max_utilization(intent: Intent, loads: np.ndarray) -> float:
    cap = _capacity(intent)
    return float(np.max(np.where(cap > 0, loads / np.where(cap > 0, cap, 1.0), 0.0), initial=0.0))


def on_real_capacities(intent: Intent, plan: Plan, loads: np.ndarray) -> Plan:
    """``plan`` (compiled on steered capacities) with its links' ``loads`` (:func:`link_loads` under
    ``intent``) and its maximum utilization as ``intent``'s real capacities give them."""
    links = []
    for i, lk in enumerate(intent.links):
        ab, ba = float(loads[2 * i]), float(loads[2 * i + 1])
        util = max(ab, ba) / lk.capacity_gbps if lk.capacity_gbps > 0 else 0.0
        links.append(LinkLoad(lk.a, lk.a_port, lk.b, lk.b_port, round(ab, 6), round(ba, 6), round(util, 6)))
    summary = replace(plan.summary, max_utilization=round(_max_utilization(intent, loads), 6))
    return Plan(plan.fabric, summary, plan.devices, tuple(links))


def _steered(intent: Intent, blame: np.ndarray, strength: float) -> Intent:
    """``intent`` with each link's capacity scaled down by ``strength`` x its share of the blame."""
    per_link = np.maximum(blame[0::2], blame[1::2])
    top = float(per_link.max(initial=0.0))
    if top <= 0:
        return intent
    links = tuple(lk.model_copy(update={"capacity_gbps": lk.capacity_gbps * (1.0 - strength * float(b) / top)})
                  if b > 0 else lk for lk, b in zip(intent.links, per_link, strict=True))
    return intent.model_copy(update={"links": links})


def _blame(times: Mapping[str, JobTime], edges: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per directed edge: the time the jobs spend on it, each job weighted by how far it is from the best."""
    worst = worst_slowdown(times)
    out: np.ndarray | None = None
    for name, t in times.items():
        w = t.priority * max(t.weighted - 1.0, 0.0) / max(worst - 1.0, 1e-12)
        part = w * edges[name]
        out = part if out is None else out + part
    return out if out is not None else np.zeros(0)


def _better(key: tuple[float, float], than: tuple[float, float]) -> bool:
    """Whether ``key`` (worst weighted slowdown, maximum utilization) beats ``than``: the first lower by more
    than :data:`TIE` (relative), or a tie there and the second lower by more than that. Noise in the last
    digits of a sum does not make a candidate win."""
    for a, b in zip(key, than, strict=True):
        if a < b - TIE * max(abs(b), 1.0):
            return True
        if a > b + TIE * max(abs(b), 1.0):
            return False
    return False


def plan_for_jobs(intent: Intent, base: Plan, compile_plan: Callable[[Intent], Plan], *, rounds: int = 3) -> Plan:
    """The plan of least worst priority-weighted job slowdown among ``base`` (the maximum-utilization plan)
    and the steered candidates ``compile_plan`` gives (see the module docstring); every candidate keeps
    every link under the utilization limit (or under ``base``'s maximum when that is over the limit). Up to
    ``rounds`` rounds, each steering from the best plan so far, while a round improves on it."""
    if not intent.jobs:
        return base
    loads_of = link_loader(intent)  # every candidate's loads under the real intent: one topology, one demand
    times, edges = _edge_times(intent, base, loads_of(base))
    cap_ok = max(_limit(intent), base.summary.max_utilization) + 1e-9
    best, best_key = base, (worst_slowdown(times), base.summary.max_utilization)
    for _ in range(rounds):
        blame, improved = _blame(times, edges), False
        for strength in STEERING:
            steered = compile_plan(_steered(intent, blame, strength))
            loaded = loads_of(steered)
            candidate = on_real_capacities(intent, steered, loaded.load)
            if candidate.summary.max_utilization > cap_ok:
                continue
            got, got_edges = _edge_times(intent, candidate, loaded)
            key = (worst_slowdown(got), candidate.summary.max_utilization)
            if _better(key, best_key):
                best, best_key, times, edges, improved = candidate, key, got, got_edges, True
        if not improved:
            break
    return best


def job_time_rows(before: Mapping[str, JobTime], after: Mapping[str, JobTime]) -> list[JobTimeDocument]:
    """Each job of ``after`` with its predicted time before (null for a job ``before`` lacks) and after."""
    out = []
    for name, t in sorted(after.items()):
        b = before.get(name)
        out.append(JobTimeDocument(job=name, priority=t.priority, comm_s_idle=round(t.comm_s_idle, 6),
                                   comm_s_before=None if b is None else round(b.comm_s, 6),
                                   comm_s_after=round(t.comm_s, 6),
                                   slowdown_before=None if b is None else round(b.slowdown, 6),
                                   slowdown_after=round(t.slowdown, 6)))
    return out
