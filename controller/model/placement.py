"""The request of ``POST /v1/jobs/placement`` (DESIGN.md, ML workloads): a job whose members Loom chooses.

The body is ``{"job": JOB, "candidates": [TOR, ...], "top": K, "objective": O}``:

* ``job``: one job as the intent document spells it (``name``, ``collective``,
  ``bytes_per_iter``, ``iter_s``, ``priority``, ``params``) with ``members: N``, how
  many ToRs it takes, in place of ``tors``. A job file with ``tors`` is taken as it
  is and its count read from them (its ToRs themselves are not kept: Loom chooses
  again); with both, they must agree.
* ``candidates``: the ToRs with a free slot, each named once. A job has one member
  per ToR (a ToR's GPUs are one member of the collective: the intent's ``tors``
  names each device once), so a ToR offers one slot whatever its free capacity.
  Each must be a device of the intent with role ``tor`` that originates a prefix
  (a member receives at its prefixes).
* ``top``: how many placements to answer (3 by default, at most :data:`MAX_TOP`).
* ``objective``: what ranks them (:data:`OBJECTIVES`; ``balanced`` by default).

:func:`validate_placement` checks it against an intent and raises
:class:`~controller.model.errors.InvalidIntent` listing every error, located
(``candidates[2]: 'leaf-0-0' is a leaf, not a ToR``, ``job.members: ...``,
``job.collective: ...``). Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from controller.model.domain import Intent, Job, Role
from controller.model.errors import IntentError, InvalidIntent
from controller.model.intent import validate_job

__all__ = ["MAX_CANDIDATES", "MAX_TOP", "OBJECTIVES", "Objective", "PlacementRequest", "validate_placement"]

Objective = Literal["balanced", "job", "others"]
#: ``balanced``: the new job's communication time stretched by the worst (priority-weighted) slowdown it causes
#: the others; ``job``: its communication time first; ``others``: the others' worst slowdown first
OBJECTIVES: tuple[Objective, ...] = ("balanced", "job", "others")
MAX_TOP = 20
#: the search scores every ordered pair of candidates (C^2 unit routes)
MAX_CANDIDATES = 512
_FIELDS = ("job", "candidates", "top", "objective")


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """A checked request: ``job`` (its ``tors`` are placeholders: any ``members`` of the fabric's ToRs), its
    member count, the candidate ToRs in the order given, how many placements to answer and the objective."""

    job: Job
    members: int
    candidates: tuple[str, ...]
    top: int
    objective: Objective


def _candidates(value: Any, intent: Intent, originators: set[str], errors: list[IntentError]) -> list[str]:
    if not isinstance(value, list) or not value:
        errors.append(IntentError("candidates", "required: a non-empty list of ToR names"))
        return []
    if len(value) > MAX_CANDIDATES:
        errors.append(IntentError("candidates", f"{len(value)} candidates, more than {MAX_CANDIDATES}"))
        return []
    good: list[str] = []
    seen: dict[str, int] = {}
    for k, tor in enumerate(value):
        here = f"candidates[{k}]"
        device = intent.device_map.get(tor) if isinstance(tor, str) else None
        if not isinstance(tor, str):
            errors.append(IntentError(here, "must be a ToR's name"))
        elif tor in seen:
            errors.append(IntentError(here, f"'{tor}' already listed at candidates[{seen[tor]}] (a ToR hosts one "
                                            "member of a job)"))
        elif device is None:
            errors.append(IntentError(here, f"unknown device '{tor}'"))
        elif device.role != Role.TOR:
            errors.append(IntentError(here, f"'{tor}' is a {device.role}, not a ToR"))
        elif tor not in originators:
            errors.append(IntentError(here, f"'{tor}' originates no prefix (a job member needs one to receive at)"))
        else:
            good.append(tor)
        if isinstance(tor, str):
            seen.setdefault(tor, k)
    return good


def _members(job: Mapping[str, Any], errors: list[IntentError]) -> int | None:
    members, tors = job.get("members"), job.get("tors")
    count = len(tors) if isinstance(tors, list) else None
    if members is None and count is None:
        errors.append(IntentError("job.members", "required: how many ToRs the job takes (or tors, whose count "
                                                 "it takes)"))
        return None
    if members is not None and (isinstance(members, bool) or not isinstance(members, int) or not 2 <= members <= 4096):
        errors.append(IntentError("job.members", "must be a whole number of ToRs from 2 to 4096"))
        return None
    if members is not None and count is not None and members != count:
        errors.append(IntentError("job.members", f"{members} members but tors lists {count}"))
        return None
    return members if members is not None else count


def _job(job: Mapping[str, Any], n: int, intent: Intent, originators: set[str],
         errors: list[IntentError]) -> Job | None:
    """The job's own fields checked with ``n`` placeholder members (the fabric's first ToRs): errors of the
    collective's rules on ``n`` are located at ``job.members``."""
    pool = [d.name for d in intent.devices if d.role == Role.TOR and d.name in originators]
    if len(pool) < n:
        errors.append(IntentError("job.members", f"{n} members, but the fabric has {len(pool)} ToRs that "
                                                 "originate a prefix"))
        return None
    doc = {k: v for k, v in job.items() if k not in ("members", "tors")}
    try:
        return validate_job({**doc, "tors": pool[:n]}, intent)
    except InvalidIntent as exc:
        errors.extend(IntentError("job.members" if e.loc.startswith("job.tors") else e.loc, e.msg)
                      for e in exc.errors)
        return None


def validate_placement(value: Any, intent: Intent) -> PlacementRequest:
    """``value`` (a placement request, see the module docstring) checked against ``intent``.

    Raises :class:`InvalidIntent` listing every error, located in the request.
    """
    errors: list[IntentError] = []
    if not isinstance(value, Mapping):
        raise InvalidIntent([IntentError("", "the body must be a mapping with job and candidates")])
    errors.extend(IntentError(str(k), f"unknown field (expected one of {', '.join(_FIELDS)})")
                  for k in value if k not in _FIELDS)
    top = value.get("top", 3)
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP:
        errors.append(IntentError("top", f"must be a whole number from 1 to {MAX_TOP}"))
    objective = value.get("objective", "balanced")
    if objective not in OBJECTIVES:
        errors.append(IntentError("objective", f"unknown objective {objective!r} (expected one of "
                                               f"{', '.join(OBJECTIVES)})"))
    originators = {o for p in intent.prefixes for o in p.origins}
    candidates = _candidates(value.get("candidates"), intent, originators, errors)
    raw = value.get("job")
    job = n = None
    if not isinstance(raw, Mapping):
        errors.append(IntentError("job", "required: one job as the intent spells it, with members: N"))
    else:
        n = _members(raw, errors)
        if n is not None:
            job = _job(raw, n, intent, originators, errors)
    if n is not None and candidates and len(candidates) < n and len(candidates) == len(value["candidates"]):
        errors.append(IntentError("candidates", f"{len(candidates)} candidate ToRs for a job of {n} members "
                                                "(one member per ToR)"))
    if errors or job is None or n is None:
        raise InvalidIntent(errors)
    return PlacementRequest(job, n, tuple(candidates), top, objective)
