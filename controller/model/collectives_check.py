"""The intent's rules on collectives (DESIGN.md, ML workloads): its own templates, and each job's
collective and params against the registry. Called by :mod:`controller.model.intent`, which locates
the errors in the document (``collectives.NAME.phases[2].to``, ``jobs[0].params.skew``)."""

from __future__ import annotations

import re
from typing import Any

from controller.model.collectives import CollectiveError, Registry, parse_template
from controller.model.collectives_builtin import BUILTINS
from controller.model.errors import IntentError
from controller.model.jobs import job_member_matrix

__all__ = ["check_collectives", "check_job_collective"]

#: a collective's name, and how many templates one intent may declare
_COLLECTIVE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_MAX_COLLECTIVES = 256


def check_collectives(raw: Any, errors: list[IntentError]) -> tuple[dict[str, Any], Registry, set[str]]:
    """The intent's ``collectives:`` (a mapping of name to template): the valid ones as written, the
    registry jobs name collectives in (the built-ins and those), and the names of the malformed ones (a
    job naming one is not reported again)."""
    if raw is None:
        return {}, BUILTINS, set()
    if not isinstance(raw, dict):
        errors.append(IntentError("collectives", "must be a mapping of collective names to templates"))
        return {}, BUILTINS, set()
    if len(raw) > _MAX_COLLECTIVES:
        errors.append(IntentError("collectives", f"at most {_MAX_COLLECTIVES} collectives"))
        return {}, BUILTINS, set(map(str, raw))
    good: dict[str, Any] = {}
    bad: set[str] = set()
    for name, doc in raw.items():
        if not isinstance(name, str) or not _COLLECTIVE_NAME.match(name):
            errors.append(IntentError(f"collectives.{name}", "a collective's name is a letter or '_' followed by "
                                                             "letters, digits or '_' (64 at most)"))
            bad.add(str(name))
        elif name in BUILTINS:
            errors.append(IntentError(f"collectives.{name}", f"'{name}' is a built-in collective; "
                                                             "give the template another name"))
            bad.add(name)
        else:
            try:
                parse_template(name, doc)
                good[name] = doc
            except CollectiveError as exc:
                errors.append(IntentError(f"collectives.{name}.{exc.loc}" if exc.loc else f"collectives.{name}",
                                          exc.message))
                bad.add(name)
    return good, BUILTINS.extended(good), bad


def check_job_collective(job: Any, here: str, registry: Registry, errors: list[IntentError],
                         skip: set[str] | frozenset[str] = frozenset()) -> None:
    """``job``'s collective is in ``registry`` (a name in ``skip``, a malformed template already reported,
    is left alone) and its template, filled with the job's members, bytes and params, gives a matrix:
    errors at ``HERE.collective``, ``HERE.params.NAME`` or ``HERE.tors`` (a template's rule on n)."""
    name, tors = getattr(job, "collective", None), getattr(job, "tors", None)
    size = getattr(job, "bytes_per_iter", None)
    if name is None or name in skip:
        return
    if name not in registry:
        errors.append(IntentError(f"{here}.collective", f"unknown collective '{name}' (expected one of "
                                                        f"{', '.join(registry.names())})"))
        return
    if not tors or size is None:
        return
    try:
        job_member_matrix(job, registry)
    except CollectiveError as exc:
        errors.append(_job_error(here, name, exc))


def _job_error(here: str, name: str, exc: CollectiveError) -> IntentError:
    if exc.loc.startswith("params."):
        return IntentError(f"{here}.{exc.loc}", exc.message)
    if exc.loc.startswith("where["):
        return IntentError(f"{here}.tors", exc.message)
    return IntentError(f"{here}.collective", f"'{name}' at {exc.loc or 'its template'}: {exc.message}")
