"""Which FRR daemons a lab router runs: its ``daemons`` file, its configuration, and this machine.

This module owns the choice. zebra and staticd always run (as FRR's own
``frrcommon.sh`` does). The node's ``daemons`` file (FRR's format, ``bgpd=yes``)
enables the others; without one, the configuration decides: each daemon whose
section it holds (``router bgp`` -> bgpd, ``router ospf`` -> ospfd, ``router
isis`` -> isisd, ``mpls ldp`` -> ldpd, ...). A daemon that cannot run on this
machine (its binary missing, or ldpd without MPLS in the kernel) is skipped
with a note, unless the configuration needs it; then, as for a section whose
daemon the ``daemons`` file leaves off, the node is refused with the file and
the line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ALWAYS", "DAEMONS", "DaemonPlan", "cannot_run", "plan_daemons"]

ALWAYS = ("zebra", "staticd")
#: the routing daemons of FRR 8.4's ``daemons`` file, in its order
DAEMONS = ("bgpd", "ospfd", "ospf6d", "ripd", "ripngd", "isisd", "pimd", "pim6d", "ldpd", "nhrpd", "eigrpd",
           "babeld", "sharpd", "pbrd", "bfdd", "fabricd", "vrrpd", "pathd")
#: a configuration line (at the start of the line) -> the daemon that takes it
_SECTIONS = (
    (re.compile(r"^router bgp\b"), "bgpd"), (re.compile(r"^router ospf(\s|$)"), "ospfd"),
    (re.compile(r"^router ospf6\b"), "ospf6d"), (re.compile(r"^router rip(\s|$)"), "ripd"),
    (re.compile(r"^router ripng\b"), "ripngd"), (re.compile(r"^router isis\b"), "isisd"),
    (re.compile(r"^router pim\b"), "pimd"), (re.compile(r"^mpls ldp\b"), "ldpd"),
    (re.compile(r"^router eigrp\b"), "eigrpd"), (re.compile(r"^router babel\b"), "babeld"),
    (re.compile(r"^pbr-map\b"), "pbrd"), (re.compile(r"^bfd\b"), "bfdd"),
    (re.compile(r"^router openfabric\b"), "fabricd"), (re.compile(r"^segment-routing\b"), "pathd"),
)
_MPLS = Path("/proc/sys/net/mpls/platform_labels")


def cannot_run(daemon: str, frr_bin: Path) -> str | None:
    """Why ``daemon`` cannot run on this machine, or None."""
    if not (frr_bin / daemon).exists():
        return f"{frr_bin / daemon} is not installed"
    if daemon == "ldpd" and not _MPLS.exists():
        return "this kernel has no MPLS (no /proc/sys/net/mpls)"
    return None


@dataclass
class DaemonPlan:
    """``start``: the daemons to start, zebra first; ``skipped``: notes; ``errors``: why the node cannot run."""

    start: list[str] = field(default_factory=lambda: list(ALWAYS))
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def needed_daemons(conf_text: str) -> dict[str, tuple[int, str]]:
    """Daemon -> ``(line number, line)`` of the first configuration section it takes."""
    out: dict[str, tuple[int, str]] = {}
    for number, line in enumerate(conf_text.splitlines(), 1):
        for pattern, daemon in _SECTIONS:
            if pattern.match(line):
                out.setdefault(daemon, (number, line.strip()))
    return out


def enabled_daemons(daemons_text: str) -> list[str]:
    """The routing daemons a ``daemons`` file enables (``bgpd=yes``), in its order."""
    out = []
    for line in daemons_text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in DAEMONS and value.strip().strip('"') == "yes" and key not in out:
            out.append(key)
    return out


def plan_daemons(conf: Path, daemons_file: Path | None, cannot: Callable[[str], str | None]) -> DaemonPlan:
    """The daemons to start for a router with configuration ``conf`` (see the module docstring)."""
    plan = DaemonPlan()
    needed = needed_daemons(conf.read_text())
    wanted = enabled_daemons(daemons_file.read_text()) if daemons_file is not None else \
        [d for d in DAEMONS if d in needed]
    for daemon, (number, line) in needed.items():
        if daemon not in wanted and daemon not in ALWAYS:
            plan.errors.append(f"{conf.name} line {number} '{line}' needs {daemon}, which "
                               f"{daemons_file} does not enable ({daemon}=no)")
    for daemon in wanted:
        why = cannot(daemon)
        if why is None:
            plan.start.append(daemon)
        elif daemon in needed:
            number, line = needed[daemon]
            plan.errors.append(f"{conf.name} line {number} '{line}' needs {daemon}, which cannot run here: {why}")
        else:
            plan.skipped.append(f"{daemon} skipped: {why}")
    return plan
