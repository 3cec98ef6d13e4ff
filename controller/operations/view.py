"""The operational view: what the fabric's links and devices are doing, as their agents report it.

The intent says what the fabric should be; this view says what it is. It takes
plain reports (``device`` says its ``port`` is ``UP`` or ``DOWN``; a BGP
neighbor's session state; an IS-IS or OSPF adjacency's state, or that it is gone; an
agent reachable or not, each with ``now``) and
answers DESIGN.md's documents:

* a **link** is ``down`` when either end reports its port down, ``unknown``
  while an end's agent is unreachable (or has not reported yet) and the other
  does not report it down (an unreachable agent is not a failed link), else
  ``up``; ``since`` is when it last changed, ``flaps_1h`` how often it went down
  in the last hour;
* a **device** has its agent ``reachable`` or ``unreachable``, its sessions up
  and in total (BGP sessions, IS-IS or OSPF adjacencies: a fabric runs one of
  them), its IS-IS and OSPF adjacencies by port, when it was last heard from; a device whose agent is
  unreachable and all of whose links are reported down by their other ends has
  **failed** (a rack that lost power), which is what a failure reaction removes;
* every change of a link's state or an agent's reachability is an event
  (``link.down``, ``link.up``, ``device.unreachable``, ``device.reachable``),
  returned to the caller, which stores and streams it.

Pure: no I/O, no clock of its own (``now`` is always a parameter, in seconds).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from controller.model import Intent, Routing
from controller.model.documents import (
    AdjacencyStateDocument,
    DeviceStatesDocument,
    DeviceStateSummary,
    LinkStateDocument,
    LinkStatesDocument,
    OperationalStateDocument,
    OspfAdjacencyStateDocument,
)

__all__ = ["ADJACENCY_UP", "LINK_DOWN", "LINK_UP", "OperationalView", "ViewEvent"]

UP, DOWN, UNKNOWN = "up", "down", "unknown"
LINK_DOWN, LINK_UP = "link.down", "link.up"
HOUR_S = 3600.0
#: the OpenConfig adjacency states of an adjacency that carries routes: IS-IS ``UP``, OSPF ``FULL``
ADJACENCY_UP = frozenset({"UP", "FULL"})


@dataclass(frozen=True, slots=True)
class ViewEvent:
    kind: str
    data: dict[str, Any]


@dataclass
class _Link:
    id: str
    a: str
    a_port: str
    b: str
    b_port: str
    oper: str = UNKNOWN
    since: float = 0.0
    downs: deque[float] = field(default_factory=deque)  # when it went down, within the last hour
    why: str = ""


@dataclass
class _Device:
    name: str
    reachable: bool = False
    since: float = 0.0
    last_seen: float | None = None
    sessions: dict[str, str] = field(default_factory=dict)  # neighbor -> OpenConfig session-state
    #: (port, level, system id) -> (OpenConfig adjacency-state, since)
    adjacencies: dict[tuple[str, str, str], tuple[str, float]] = field(default_factory=dict)
    #: (port, area, neighbor router id) -> (OpenConfig adjacency-state, since)
    ospf: dict[tuple[str, str, str], tuple[str, float]] = field(default_factory=dict)
    known: bool = False  # its agent was ever heard from (or declared unreachable)


def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, UTC).isoformat() if t else None


class OperationalView:
    """Links and devices of one intent, as reported (see the module docstring)."""

    def __init__(self) -> None:
        self.links: dict[str, _Link] = {}
        self.devices: dict[str, _Device] = {}
        self.names: frozenset[str] = frozenset()  # the devices of the intent followed
        self.protocol = "IS-IS"  # the link-state routing of that intent, as its drift messages name it
        self.ports: dict[tuple[str, str], str] = {}  # (device, port) -> OpenConfig oper-status
        self._by_port: dict[tuple[str, str], str] = {}  # (device, port) -> link id
        self._by_device: dict[str, list[str]] = {}  # device -> its link ids
        self.down: set[str] = set()  # the links down now
        self.unreachable: set[str] = set()  # the devices whose agent does not answer now (once known)
        self.version = 0  # bumped on every change of what the documents show

    # -- topology ------------------------------------------------------------------------
    def set_topology(self, intent: Intent, now: float) -> list[ViewEvent]:
        """The links and devices of ``intent``; those kept keep their state, new ones start unknown."""
        links: dict[str, _Link] = {}
        for ln in intent.links:
            old = self.links.get(ln.key)
            links[ln.key] = old if old is not None and (old.a, old.a_port, old.b, old.b_port) == (
                ln.a, ln.a_port, ln.b, ln.b_port) else _Link(ln.key, ln.a, ln.a_port, ln.b, ln.b_port, since=now)
        self.links = links
        self.down = {lid for lid in self.down if lid in links}
        self.names = frozenset(d.name for d in intent.devices)
        self.protocol = "OSPF" if intent.routing == Routing.OSPF else "IS-IS"
        for name in self.names:  # a device heard before its intent was known keeps what it said
            self.devices.setdefault(name, _Device(name, since=now))
        self._by_port = {}
        self._by_device = {}
        for link in links.values():
            self._by_port[link.a, link.a_port] = link.id
            self._by_port[link.b, link.b_port] = link.id
            self._by_device.setdefault(link.a, []).append(link.id)
            self._by_device.setdefault(link.b, []).append(link.id)
        self.version += 1
        return self._recompute(list(self.links), now)

    # -- reports ---------------------------------------------------------------------------
    def report_port(self, device: str, port: str, oper_status: str, now: float) -> list[ViewEvent]:
        """``device`` reports ``port``'s OpenConfig oper-status (``UP``, ``DOWN``, ``LOWER_LAYER_DOWN``...)."""
        events = self._heard(device, now)
        if self.ports.get((device, port)) != oper_status:
            self.ports[device, port] = oper_status
            link = self._by_port.get((device, port))
            if link is not None:
                events += self._recompute([link], now)
        return events

    def report_session(self, device: str, neighbor: str, state: str, now: float) -> list[ViewEvent]:
        events = self._heard(device, now)
        dev = self.devices[device]
        if dev.sessions.get(neighbor) != state:
            dev.sessions[neighbor] = state
            self.version += 1
        return events

    def report_adjacency(self, device: str, key: tuple[str, str, str], state: str | None,
                         now: float, *, protocol: str = "isis") -> list[ViewEvent]:
        """``device``'s IS-IS adjacency ``key`` (port, level, neighbor system id) is in OpenConfig
        ``adjacency-state`` ``state`` (``UP``, ``DOWN``, ``INIT``, ``FAILED``), or gone (None); with
        ``protocol="ospf"``, its OSPF adjacency (port, area, neighbor router id: ``FULL``, ``INIT``, ...)."""
        events = self._heard(device, now)
        dev = self.devices[device]
        table = dev.ospf if protocol == "ospf" else dev.adjacencies
        old = table.get(key)
        if state is None:
            if old is not None:
                del table[key]
                self.version += 1
        elif old is None or old[0] != state:
            table[key] = (state, now)
            self.version += 1
        return events

    def port_link(self, device: str, port: str) -> str | None:
        """The id of the link on ``device``'s ``port``, if the intent has one."""
        return self._by_port.get((device, port))

    def adjacency_at(self, device: str, port: str) -> tuple[str, float] | None:
        """The best state of ``device``'s adjacencies (IS-IS or OSPF) on ``port`` (one up if any is: ``UP``,
        ``FULL``) and since when; None when its agent reports none there (or is unreachable)."""
        dev = self.devices.get(device)
        if dev is None or not dev.reachable:
            return None
        found = [v for table in (dev.adjacencies, dev.ospf) for k, v in table.items() if k[0] == port]
        if not found:
            return None
        up = [v for v in found if v[0] in ADJACENCY_UP]
        return min(up, key=lambda v: v[1]) if up else max(found, key=lambda v: v[1])

    def set_reachable(self, device: str, reachable: bool, now: float, why: str = "") -> list[ViewEvent]:
        """``device``'s agent answers (its stream is up) or not (the stream broke, or cannot connect)."""
        dev = self.devices.setdefault(device, _Device(device, since=now))
        if dev.known and dev.reachable == reachable:
            return []
        was_known = dev.known
        dev.reachable, dev.since, dev.known = reachable, now, True
        if reachable:
            self.unreachable.discard(device)
        else:
            self.unreachable.add(device)
        if reachable:
            dev.last_seen = now
        else:
            dev.sessions.clear()
            dev.adjacencies.clear()
            dev.ospf.clear()
        self.version += 1
        events = [] if (reachable and not was_known) or device not in self.names else [
            ViewEvent("device.reachable" if reachable else "device.unreachable",
                      {"device": device, "since": _iso(now), **({"reason": why} if why else {})})]
        return events + self._recompute(self._by_device.get(device, []), now)

    def _heard(self, device: str, now: float) -> list[ViewEvent]:
        dev = self.devices.setdefault(device, _Device(device, since=now))
        dev.last_seen = now
        return [] if dev.known and dev.reachable else self.set_reachable(device, True, now)

    # -- links -------------------------------------------------------------------------------
    def _end(self, device: str, port: str) -> str | None:
        """What one end says: its oper-status, or None (its agent unreachable, or no report yet)."""
        dev = self.devices.get(device)
        if dev is None or not dev.reachable:
            return None
        return self.ports.get((device, port))

    def _recompute(self, ids: Iterable[str], now: float) -> list[ViewEvent]:
        events: list[ViewEvent] = []
        for lid in dict.fromkeys(ids):
            link = self.links.get(lid)
            if link is None:
                continue
            ends = [(link.a, link.a_port, self._end(link.a, link.a_port)),
                    (link.b, link.b_port, self._end(link.b, link.b_port))]
            down = [f"{d}:{p} reports {s}" for d, p, s in ends if s is not None and s != "UP"]
            oper = DOWN if down else (UP if all(s == "UP" for _, _, s in ends) else UNKNOWN)
            if oper == link.oper:
                continue
            before, link.oper, link.since = link.oper, oper, now
            if oper == DOWN:
                self.down.add(lid)
            else:
                self.down.discard(lid)
            link.why = "; ".join(down) if down else ", ".join(
                f"{d} unreachable" for d, _, s in ends if s is None and not self.reachable(d))
            self.version += 1
            if oper == DOWN:
                link.downs.append(now)
                events.append(ViewEvent(LINK_DOWN, self._link_event(link)))
            elif oper == UP and before == DOWN:
                events.append(ViewEvent(LINK_UP, self._link_event(link)))
        return events

    def reachable(self, device: str) -> bool:
        """``device``'s agent answers now."""
        dev = self.devices.get(device)
        return dev is not None and dev.reachable

    def _link_event(self, link: _Link) -> dict[str, Any]:
        return {"link": link.id, "a": link.a, "a_port": link.a_port, "b": link.b, "b_port": link.b_port,
                "since": _iso(link.since), "reason": link.why}

    # -- what has failed -------------------------------------------------------------------------
    def down_links(self, now: float, for_s: float = 0.0) -> dict[str, float]:
        """Links down for at least ``for_s`` seconds: id -> since."""
        return {lid: self.links[lid].since for lid in self.down if now - self.links[lid].since >= for_s}

    def failed_devices(self, now: float, for_s: float = 0.0) -> dict[str, float]:
        """Devices whose agent has been unreachable for ``for_s`` seconds and whose links are all down: name ->
        since (the later of the two)."""
        out: dict[str, float] = {}
        for name in self.unreachable:
            dev = self.devices[name]
            if name not in self.names or not dev.known or dev.reachable or now - dev.since < for_s:
                continue
            mine = [self.links[lid] for lid in self._by_device.get(name, [])]
            if all(ln.oper == DOWN for ln in mine):
                out[name] = max([dev.since, *(ln.since for ln in mine)])
        return out

    def healthy(self, part: str) -> bool:
        """A link id whose link is up, or ``device:NAME`` whose agent answers (the end of a hold-down counts
        from when this became true; an unknown link is not healthy)."""
        if part.startswith("device:"):
            dev = self.devices.get(part.removeprefix("device:"))
            return dev is not None and dev.reachable
        link = self.links.get(part)
        return link is not None and link.oper == UP

    def flaps_1h(self, link_id: str, now: float) -> int:
        link = self.links.get(link_id)
        if link is None:
            return 0
        while link.downs and now - link.downs[0] > HOUR_S:
            link.downs.popleft()
        return len(link.downs)

    # -- documents -----------------------------------------------------------------------------
    def links_document(self, now: float) -> LinkStatesDocument:
        return LinkStatesDocument(links=[
            LinkStateDocument(id=ln.id, a=ln.a, a_port=ln.a_port, b=ln.b, b_port=ln.b_port, oper=_oper(ln.oper),
                              since=_iso(ln.since), flaps_1h=self.flaps_1h(ln.id, now))
            for ln in sorted(self.links.values(), key=lambda x: x.id)])

    def devices_document(self) -> DeviceStatesDocument:
        """Each device; its sessions are its BGP sessions and its IS-IS and OSPF adjacencies (up: established,
        up, full)."""
        return DeviceStatesDocument(devices=[
            DeviceStateSummary(name=d.name, agent="reachable" if d.reachable else "unreachable",
                               sessions_up=sum(1 for s in d.sessions.values() if s == "ESTABLISHED")
                               + sum(1 for t in (d.adjacencies, d.ospf) for s, _ in t.values() if s in ADJACENCY_UP),
                               sessions=len(d.sessions) + len(d.adjacencies) + len(d.ospf),
                               last_seen=_iso(d.last_seen), adjacencies=self._adjacencies(d),
                               ospf_adjacencies=self._ospf_adjacencies(d))
            for d in sorted(self.devices.values(), key=lambda x: x.name) if d.name in self.names])

    def _adjacencies(self, dev: _Device) -> list[AdjacencyStateDocument]:
        return [AdjacencyStateDocument(port=port, level=int(level) if level.isdigit() else 0, neighbor=system_id,
                                       state=state, link=self._by_port.get((dev.name, port)), since=_iso(since))
                for (port, level, system_id), (state, since) in sorted(dev.adjacencies.items())]

    def _ospf_adjacencies(self, dev: _Device) -> list[OspfAdjacencyStateDocument]:
        return [OspfAdjacencyStateDocument(port=port, area=area, neighbor=router_id, state=state,
                                           link=self._by_port.get((dev.name, port)), since=_iso(since))
                for (port, area, router_id), (state, since) in sorted(dev.ospf.items())]

    def to_document(self, now: float) -> OperationalStateDocument:
        """Both documents, as the leader stores them for the followers."""
        return OperationalStateDocument(links=self.links_document(now).links, devices=self.devices_document().devices,
                                        at=_iso(now))


def _oper(oper: str) -> Literal["up", "down", "unknown"]:
    return "up" if oper == UP else "down" if oper == DOWN else "unknown"
