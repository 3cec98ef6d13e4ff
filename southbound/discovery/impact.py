"""What adopting a router changes of its forwarding, read from the configuration diff Loom would apply.

When a router runs a configuration Loom did not write (a fabric being adopted), its agent's
``Prepare`` answers ``frr-reload.py``'s diff: ``Lines To Delete`` (the commands that remove
lines, ``no X`` for a line ``X``) and ``Lines To Add``, each line under its contexts.
:func:`forwarding_impact` pairs what is removed with what is added in the same context and sorts
the rest: descriptions, logging, BGP timers, SPF and LSA throttling, OSPF retransmit and IS-IS hello
intervals, session housekeeping and Loom's own WCMP route maps are cosmetic (the forwarding they touch
is checked by the plan's replay); static routes, announced prefixes (``network``, ``redistribute``),
interface addresses (of both families), IPv6 router advertisements (an unnumbered session runs
on them), sessions (and their extended next hop), router ids, IGP costs and areas, an interface's network type
(broadcast and point-to-point: FRR resets the adjacency), OSPF hello and dead intervals (neighbours
that disagree drop their adjacency while the push reaches one and not the other), and route maps
or prefix lists of the operator's are not, and each becomes a warning that
says what forwarding would lose or gain. A unified diff (a router that runs what Loom wrote) is
not an adoption: :func:`forwarding_impact` answers ``None`` for it. The agent's diff of its WCMP ``fib``
routes, appended to FRR's, is left to the review, which holds their next hops to the kernel's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Impact", "forwarding_impact"]

_DELETE, _ADD = "Lines To Delete", "Lines To Add"
#: where the agent's diff of its ``fib`` routes (a unified diff after FRR's) starts: the next hops they set are
#: compared with what the kernel forwards on by the review (:func:`controller.workflow.review.route_changes`)
_FIB_DIFF = re.compile(r"^--- running$", re.MULTILINE)
_COSMETIC = re.compile(
    r"^(description |log |hostname |frr |service |ip forwarding$|ipv6 forwarding$|password |line vty|"
    r"timers bgp |bgp log-neighbor-changes|no bgp ebgp-requires-policy|no bgp default ipv4-unicast|"
    r"bgp bestpath as-path multipath-relax|maximum-paths |address-family ipv4 unicast|address-family ipv6 unicast|"
    r"ipv6 nd ra-interval |ipv6 prefix-list LOOM-|"
    r"(no )?zebra nexthop kernel enable$|zebra nexthop-group keep |"  # how zebra writes routes, not where
    r"neighbor \S+ (description|timers|advertisement-interval|activate)\b|"
    r"neighbor \S+ route-map LOOM-|route-map LOOM-|ip prefix-list LOOM-|bgp as-path access-list LOOM-|"
    r"match |set extcommunity bandwidth|exit|!|"
    r"isis hello|ip ospf retransmit-interval|log-adjacency-changes|lsp-gen-interval|spf-interval|"
    r"timers throttle (spf|lsa)|timers lsa min-arrival|is-type level-2-only|metric-style wide)")
_EFFECTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^ip(?:v6)? route "), "a static route"),
    (re.compile(r"^network \S+$"), "an announced prefix"),
    (re.compile(r"^redistribute "), "redistributed routes"),
    (re.compile(r"^ip(?:v6)? address "), "an interface address (its connected route)"),
    (re.compile(r"^(no )?ipv6 nd suppress-ra$"), "IPv6 router advertisements (an unnumbered BGP session needs them)"),
    (re.compile(r"^neighbor \S+ capability extended-nexthop$"), "a session's IPv4 routes over IPv6 next hops"),
    (re.compile(r"^neighbor \S+ (interface )?remote-as "), "a BGP session"),
    (re.compile(r"^neighbor \S+ ((interface (v6only )?)?peer-group \S+|peer-group)$"),
     "a BGP session (FRR deletes a peer-group's members with the group, and a member leaving it)"),
    (re.compile(r"^(bgp router-id|ospf router-id|router-id|net) "), "the router id (sessions or adjacencies reset)"),
    (re.compile(r"^router (bgp|ospf|isis)"), "a routing protocol instance"),
    (re.compile(r"^(ip ospf (cost|area)|isis metric|network \S+ area|ip(?:v6)? router isis|isis passive|"
                r"passive-interface)"), "an IGP cost, area or adjacency"),
    (re.compile(r"^(ip ospf network|isis network)"), "an interface's network type (its adjacency resets)"),
    (re.compile(r"^ip ospf (hello|dead)-interval"),
     "OSPF hello or dead intervals (the adjacency drops while its neighbour's differ)"),
    (re.compile(r"^(route-map|ip(?:v6)? prefix-list|bgp as-path|bgp community-list|ip community-list|access-list)"),
     "routing policy"),
    (re.compile(r"^neighbor \S+ (route-map|prefix-list|filter-list|distribute-list|allowas-in|as-override)"),
     "a session's routing policy"),
)


@dataclass(frozen=True, slots=True)
class Impact:
    """One change that is not cosmetic: ``action`` is ``removes`` or ``adds``, ``line`` the configuration
    line under ``context`` (``router bgp 65101 / address-family ipv4 unicast``), ``effect`` what it is."""

    action: str
    context: str
    line: str
    effect: str

    def text(self) -> str:
        where = f" (in {self.context})" if self.context else ""
        return f"{self.action} {self.effect}: '{self.line}'{where}"


def _entries(diff: str) -> list[tuple[str, tuple[str, ...], str]]:
    """(section, contexts, line) of every leaf line of a ``frr-reload.py`` diff."""
    rows: list[tuple[str, int, str]] = []
    section = ""
    for raw in diff.splitlines():
        text = raw.strip()
        if text in (_DELETE, _ADD):
            section = text
            continue
        if not text or set(text) <= {"="} or not section:
            continue
        rows.append((section, len(raw) - len(raw.lstrip(" ")), text))
    out = []
    stack: list[str] = []
    for k, (section, depth, text) in enumerate(rows):
        stack = stack[:depth]
        nxt = rows[k + 1] if k + 1 < len(rows) else None
        if nxt is not None and nxt[0] == section and nxt[1] > depth:
            stack.append(text)
            continue
        out.append((section, tuple(stack), text))
    return out


def _original(command: str) -> str:
    """The configuration line a ``Lines To Delete`` command removes (``no X`` removes ``X``, ``X`` removes
    ``no X``)."""
    return command[3:] if command.startswith("no ") else f"no {command}"


def _effect(line: str) -> str | None:
    bare = line[3:] if line.startswith("no ") else line
    if _COSMETIC.match(line) or _COSMETIC.match(bare):
        return None
    for pattern, effect in _EFFECTS:
        if pattern.match(bare):
            return effect
    return "configuration Loom does not model"


#: settings whose value here is FRR's default (FRR 8.4: an IS-IS circuit's metric, a level-1-2 instance): one
#: written out where the router had none of that setting changes nothing
_FRR_DEFAULTS = {"isis metric": "isis metric 10", "is-type": "is-type level-1-2"}


def _default_written_out(ctx: tuple[str, ...], line: str, removed: dict[tuple[tuple[str, ...], str], None]) -> bool:
    """Whether ``line`` (added in ``ctx``) writes out FRR's default for a setting the router did not have (no line
    of that setting is removed in ``ctx``)."""
    setting = next((k for k, v in _FRR_DEFAULTS.items() if v == line), None)
    return setting is not None and not any(c == ctx and ln.startswith(setting + " ") for c, ln in removed)


def forwarding_impact(diff: str) -> list[Impact] | None:
    """The non-cosmetic changes of ``diff`` (an agent's ``Prepare`` diff of a router that runs a
    configuration Loom did not write), or ``None`` when ``diff`` is not such a diff.

    >>> d = "Lines To Delete\\n===============\\nno ip route 10.9.0.0/16 blackhole\\nrouter bgp 1\\n"
    >>> d += " no neighbor 10.0.0.2 description x\\n\\nLines To Add\\n============\\nrouter bgp 1\\n"
    >>> d += " neighbor 10.0.0.2 description y\\n"
    >>> [i.text() for i in forwarding_impact(d)]
    ["removes a static route: 'ip route 10.9.0.0/16 blackhole'"]
    """
    if _DELETE not in diff and _ADD not in diff:
        return None
    diff = _FIB_DIFF.split(diff, maxsplit=1)[0]
    removed: dict[tuple[tuple[str, ...], str], None] = {}
    added: dict[tuple[tuple[str, ...], str], None] = {}
    for section, ctx, line in _entries(diff):
        if section == _DELETE:
            removed[ctx, _original(line)] = None
        else:
            added[ctx, line] = None
    out = []
    for action, lines, other in (("removes", removed, added), ("adds", added, removed)):
        for ctx, line in lines:
            if (ctx, line) in other or (action == "adds" and _default_written_out(ctx, line, removed)):
                continue
            effect = _effect(line)
            if effect is not None:
                out.append(Impact(action, " / ".join(ctx), line, effect))
    return out
