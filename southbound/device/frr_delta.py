"""FRR configuration as a tree of contexts, and the vtysh commands that turn one tree into another.

``frr-reload.py`` makes any running configuration into a candidate, but a run
costs a Python start, two passes of ``show running-config`` and one ``vtysh``
process per deleted line: seconds per device for a change of a few weights.
The agent knows what FRR runs (the configuration it applied last), so for the
common case it can do better: read ``show running-config`` once, and when that
is exactly the configuration it applied (:func:`parse_config` of both agree),
send the difference (:func:`delta_commands`) through one ``vtysh``, then read
the configuration again and accept the result only when it is exactly the
candidate. Anything else (FRR restarted with another configuration, a command
FRR refuses, a context this module orders wrongly) falls back to
``frr-reload.py`` (:class:`southbound.device.frr_apply.FrrReload`), so the fast path
can make a change faster, never different.

A tree maps a context path (``()`` for the top, ``("router bgp 65010",)``,
``("router bgp 65010", "address-family ipv4 unicast")``) to its lines in order;
a line that opens a context has a key of its own. ``!``, ``end``, ``frr
version``, ``exit`` and ``exit-address-family`` are structure, not content.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["ConfigTree", "delta_commands", "dropped_addresses", "expected_running", "keeping", "parse_config",
           "tree_document", "tree_of_document"]

#: context path -> its lines, in order (a dict used as an ordered set)
ConfigTree = dict[tuple[str, ...], dict[str, None]]

_NOISE = ("Building configuration", "Current configuration", "frr version")
_EXITS = {"exit": "exit", "address-family": "exit-address-family", "vni": "exit-vni", "vrf": "exit-vrf"}
#: top-level lines that open a context in vtysh even with nothing inside (``route-map X deny 10``)
_OPENERS = ("route-map ", "interface ", "router ", "vrf ", "line ", "key chain ", "segment-routing", "bfd",
            "nexthop-group ", "mpls ")


def parse_config(text: str) -> ConfigTree:
    """The tree of an FRR configuration (``show running-config`` or a rendered one)."""
    tree: ConfigTree = {(): {}}
    path: list[tuple[int, str]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        s = line.strip()
        if not s or s.startswith("!") or s == "end" or s.startswith(_NOISE):  # ``! ...`` is a comment
            continue
        indent = len(line) - len(line.lstrip(" "))
        if s == "exit" or s.startswith("exit-"):
            while path and path[-1][0] >= indent:
                path.pop()
            continue
        while path and path[-1][0] >= indent:
            path.pop()
        ctx = tuple(k for _, k in path)
        tree.setdefault(ctx, {})[s] = None
        path.append((indent, s))
        tree.setdefault(ctx + (s,), {})
    return {k: v for k, v in tree.items() if v or k == ()}


#: a line that defines a BGP neighbor (its ``remote-as``, or its peer-group as a member), naming it
_PEER = re.compile(r"neighbor (\S+) (?:interface (?:v6only )?)?(?:remote-as|peer-group) \S")
#: a peer-group's own definition
_GROUP = re.compile(r"neighbor \S+ peer-group")


def _exit_of(line: str) -> str:
    return _EXITS.get(line.split(" ", 1)[0], "exit")


def _opens(ctx: tuple[str, ...], line: str, tree: ConfigTree) -> bool:
    return (ctx + (line,)) in tree or (not ctx and line.startswith(_OPENERS))


def _add(tree: ConfigTree, ctx: tuple[str, ...], line: str) -> list[str]:
    """The commands that make ``line`` (and all it holds) in context ``ctx``."""
    if not _opens(ctx, line, tree):
        return [line]
    inner = ctx + (line,)
    out: list[str] = []
    for child in tree.get(inner, {}):
        out += _add(tree, inner, child)
    return [line, *_held(tree, inner, out, list(tree.get(inner, {}))), _exit_of(line)]


def _held(new: ConfigTree, ctx: tuple[str, ...], commands: list[str], created: list[str]) -> list[str]:
    """``commands`` (run inside ``ctx``) with each BGP neighbor they define held shut down until its address
    families are configured: ``neighbor X shutdown`` right after its ``remote-as``, ``no neighbor X shutdown``
    last. bgpd starts a session once one family is activated, and vtysh sends the commands one by one: a
    session that came up between two families' ``activate`` would be reset by the second (FRR renegotiates
    the families only by a new session; a bridge adding interface sessions with IPv4 and IPv6 lost one
    session in six so under load). A neighbor ``new`` itself holds shut down is left as it is."""
    if not (len(ctx) == 1 and ctx[0].startswith("router bgp ")):
        return commands
    lines = new.get(ctx, {})
    groups = {ln.split()[1] for ln in lines if _GROUP.fullmatch(ln)}  # shutting a group down shuts its members
    peers = [m.group(1) for ln in created if (m := _PEER.match(ln)) and m.group(1) not in groups
             and f"neighbor {m.group(1)} shutdown" not in lines]
    if not peers:
        return commands
    out: list[str] = []
    held: set[str] = set()
    for c in commands:
        out.append(c)
        m = _PEER.match(c)
        if m and m.group(1) in peers and m.group(1) not in held:  # a member's remote-as follows its group line
            held.add(m.group(1))
            out.append(f"neighbor {m.group(1)} shutdown")
    return out + [f"no neighbor {p} shutdown" for p in dict.fromkeys(peers)]


def _differs(old: ConfigTree, new: ConfigTree, ctx: tuple[str, ...]) -> bool:
    """Whether context ``ctx`` holds other lines in ``old`` than in ``new``, at any depth."""
    n = len(ctx)
    return {k: v for k, v in old.items() if k[:n] == ctx} != {k: v for k, v in new.items() if k[:n] == ctx}


def _undo(line: str) -> str:
    """The command that removes ``line``: ``no LINE``, or ``X`` for a line ``no X``."""
    return line[3:] if line.startswith("no ") else f"no {line}"


def _removals_last(lines: Iterable[str]) -> list[str]:
    """Removals in an order FRR takes: a neighbor's ``remote-as`` or peer-group membership (either removes the
    neighbor) after its other lines."""
    return sorted(lines, key=lambda ln: " remote-as " in ln or " peer-group" in ln)


def _change(old: ConfigTree, new: ConfigTree, ctx: tuple[str, ...]) -> list[str]:
    """The commands, inside context ``ctx`` (entered), that make its lines and sub-contexts those of ``new``:
    every removal (:func:`_removals`), then every addition (:func:`_additions`)."""
    return _removals(old, new, ctx) + _additions(old, new, ctx)


def _removals(old: ConfigTree, new: ConfigTree, ctx: tuple[str, ...]) -> list[str]:
    """The lines of ``ctx`` that go, at any depth: a sub-context's first (they refer to what ``ctx`` names:
    ``neighbor X activate`` in an address family before ``no neighbor X remote-as``)."""
    before, after = old.get(ctx, {}), new.get(ctx, {})
    out: list[str] = []
    for line in before:
        if line in after and _differs(old, new, ctx + (line,)):
            out += _entered(line, _removals(old, new, ctx + (line,)))
    return out + [_undo(line) for line in _removals_last(ln for ln in before if ln not in after)]


def _additions(old: ConfigTree, new: ConfigTree, ctx: tuple[str, ...]) -> list[str]:
    """The lines of ``ctx`` that come, at any depth: ``ctx``'s own first (a sub-context refers to what they
    name: ``neighbor X remote-as`` before ``neighbor X activate`` in an address family)."""
    before, after = old.get(ctx, {}), new.get(ctx, {})
    out: list[str] = []
    for line in after:  # in the new order, where what a line refers to comes before it
        if line not in before:
            out += _add(new, ctx, line)
        elif _differs(old, new, ctx + (line,)):
            out += _entered(line, _additions(old, new, ctx + (line,)))
    return _held(new, ctx, out, [ln for ln in after if ln not in before])


def _entered(line: str, inner: list[str]) -> list[str]:
    """``inner`` run inside the context ``line`` opens (nothing when there is nothing to run)."""
    return [line, *inner, _exit_of(line)] if inner else []


def _slot(line: str) -> str | None:
    """The entry a sequenced line occupies (``ip prefix-list L seq 5``): FRR refuses a new line for an
    occupied slot, or with the rule of another entry of its list, so old entries go first."""
    words = line.split()
    if "seq" in words and words.index("seq") + 1 < len(words):
        return " ".join(words[:words.index("seq") + 2])
    return None


def _definitions(lines: Iterable[str]) -> dict[str, set[str]]:
    """Per BGP neighbor (or peer-group) of a ``router bgp`` context, the lines that define it."""
    out: dict[str, set[str]] = {}
    for ln in lines:
        m = _PEER.match(ln)
        name = m.group(1) if m else (ln.split()[1] if _GROUP.fullmatch(ln) else None)
        if name is not None:
            out.setdefault(name, set()).add(ln)
    return out


def _redefined(old: ConfigTree, new: ConfigTree) -> dict[tuple[str, ...], set[str]]:
    """Per ``router bgp`` context both trees have, the neighbors both define in another form (another
    ``remote-as``, peer-group membership, ``v6only``), with the members of a peer-group so redefined: FRR
    deletes such a neighbor (and all its lines) before it defines it again."""
    out: dict[tuple[str, ...], set[str]] = {}
    for ctx, lines in old.items():
        if len(ctx) == 1 and ctx[0].startswith("router bgp ") and ctx in new:
            was, now = _definitions(lines), _definitions(new[ctx])
            peers = {p for p in was.keys() & now.keys() if was[p] != now[p]}
            peers |= {ln.split()[1] for ln in lines for g in peers if ln.endswith(f" peer-group {g}")}
            if peers:
                out[ctx] = peers
    return out


def _without(tree: ConfigTree, redefined: dict[tuple[str, ...], set[str]]) -> ConfigTree:
    """``tree`` without any line of the ``redefined`` neighbors, in their router's context and below."""
    out: ConfigTree = {}
    for ctx, lines in tree.items():
        peers = redefined.get(ctx[:1], set())
        out[ctx] = {ln: None for ln in lines if not (peers and ln.startswith("neighbor ") and ln.split()[1] in peers)}
    return {k: v for k, v in out.items() if v or k == ()}  # as parse_config leaves a context nothing is in


def delta_commands(old: ConfigTree, new: ConfigTree) -> list[str]:
    """The vtysh commands (to run after ``configure terminal``) that make FRR, running ``old``, run ``new``.

    In an order FRR takes: the sequenced entries that go (FRR refuses a new prefix-list entry whose ``seq``
    or rule an old one holds); what goes inside the contexts both have, the routers' first (a session
    leaves, with a notification to its peer, before the interface address it runs over); what is added at
    the top (prefix-lists, route-maps, interfaces: before anything refers to them); what comes inside the
    contexts both have, the routers' last (an interface has its address before a session over it starts);
    then a router that goes (before one that comes: FRR runs one ``router bgp``), a router that comes, and
    last the other top-level removals (what the routers referred to). A neighbor defined in another form is
    removed with all its lines, then made again (:func:`_redefined`)."""
    redefined = _redefined(old, new)
    if redefined:
        mid = _without(old, redefined)
        return _delta(old, mid) + _delta(mid, new)
    return _delta(old, new)


def _delta(old: ConfigTree, new: ConfigTree) -> list[str]:
    before, after = old.get((), {}), new.get((), {})
    added = [ln for ln in after if ln not in before]
    # sequenced entries that go, first: FRR refuses a new entry whose seq, or whose rule, an old one holds
    out = [_undo(ln) for ln in before if ln not in after and _slot(ln) is not None]
    removed = [ln for ln in before if ln not in after and _slot(ln) is None]
    kept = [ln for ln in before if ln in after and _differs(old, new, (ln,))]
    for line in sorted(kept, key=lambda ln: not ln.startswith("router ")):
        out += _entered(line, _removals(old, new, (line,)))
    for line in added:
        if not line.startswith("router "):
            out += _add(new, (), line)
    for line in sorted(kept, key=lambda ln: ln.startswith("router ")):
        out += _entered(line, _additions(old, new, (line,)))
    out += [_undo(line) for line in removed if line.startswith("router ")]
    for line in added:
        if line.startswith("router "):
            out += _add(new, (), line)
    out += [_undo(line) for line in removed if not line.startswith("router ")]
    return out


def dropped_addresses(old: ConfigTree, new: ConfigTree) -> dict[tuple[str, ...], list[str]]:
    """Per interface that ``new`` still has, the address lines (``ip address``, ``ipv6 address``) of ``old``
    that it drops (an underlay change's last leg: the links' /31s)."""
    out: dict[tuple[str, ...], list[str]] = {}
    for ctx, lines in old.items():
        if len(ctx) == 1 and ctx[0].startswith("interface ") and ctx in new:
            gone = [ln for ln in lines if ln.startswith(("ip address ", "ipv6 address ")) and ln not in new[ctx]]
            if gone:
                out[ctx] = gone
    return out


def keeping(new: ConfigTree, addresses: dict[tuple[str, ...], list[str]]) -> ConfigTree:
    """``new`` with ``addresses`` (:func:`dropped_addresses`) still on their interfaces: what the agent applies
    first, taking the addresses away once no route goes through them any more (the last IPv4 address of a port
    going flushes its ARP entries: a route not yet withdrawn over a gateway there drops what it carries)."""
    out = {k: dict(v) for k, v in new.items()}
    for ctx, lines in addresses.items():
        out[ctx].update(dict.fromkeys(lines))
    return out


#: top-level lines FRR does not show while they hold (zebra shows forwarding only when it is off): a target
#: that adds one (``ipv6 forwarding``, where an underlay change brings IPv6) shows without it
_UNSHOWN = ("ip forwarding", "ipv6 forwarding")


def expected_running(target: ConfigTree, current: ConfigTree, running: ConfigTree) -> ConfigTree:
    """What ``show running-config`` should show once ``target`` (rendered) is applied, learnt from how FRR
    shows ``current`` (rendered) as ``running``: per context, the lines FRR does not show (a default such
    as ``no bgp ebgp-requires-policy`` under ``frr defaults datacenter``, ``ip forwarding``) and the lines it
    adds (``hostname`` from a daemon that has its own) are left out of, and added to, the target's
    contexts that are there; a forwarding line the target adds is not shown either (:data:`_UNSHOWN`). A
    target whose new contexts hold lines FRR would show otherwise simply does not match, and the caller
    reloads."""
    out: ConfigTree = {k: dict(v) for k, v in target.items()}
    for ctx in set(current) | set(running):
        if ctx not in out and ctx != ():
            continue
        shown = running.get(ctx, {})
        written = current.get(ctx, {})
        lines = out.setdefault(ctx, {})
        for line in written:
            if line not in shown:
                lines.pop(line, None)
        for line in shown:
            if line not in written:
                lines[line] = None
    for line in _UNSHOWN:
        if line not in running.get((), {}):
            out[()].pop(line, None)
    return {k: v for k, v in out.items() if v or k == ()}


def tree_document(tree: ConfigTree) -> list[list[Any]]:
    """A tree as JSON: ``[[context..., [lines...]], ...]``."""
    return [[list(k), list(v)] for k, v in tree.items()]


def tree_of_document(doc: Any) -> ConfigTree:
    return {tuple(str(x) for x in k): {str(line): None for line in v} for k, v in doc}
