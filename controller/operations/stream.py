"""The operational view's feed: a gNMI ``ON_CHANGE`` subscription to every attached device.

:class:`StateStream` keeps one ``STREAM`` subscription per device (through
:class:`southbound.gnmi.GnmiClient`, written against OpenConfig paths only, so
any switch that serves them works) to its interfaces' ``oper-status``, its
BGP neighbors' ``session-state``, its IS-IS adjacencies' ``adjacency-state``
(whatever the IS-IS instance's name) and its OSPF adjacencies' (OSPFv2 neighbors,
whatever the instance's name and area), and hands each change to ``report`` as
soon as it arrives (an adjacency the target deletes, with the value None). A
device is reachable once its stream has sent its first full set
(``sync_response``); a stream that breaks, or cannot connect, makes it
unreachable at once (``reachable(device, False)``), and reconnects with
exponential back-off. It runs only while ``leading()`` says so: the leader
keeps the view, the followers read what it stores.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from controller.aio import cancel_and_wait
from southbound.gnmi import GnmiClient, Sample, SyncMarker

__all__ = ["PATHS", "StateStream", "parse_state"]

log = logging.getLogger("loom.operations")

#: What the view subscribes to (DESIGN.md, "Operational state and failure reaction").
PATHS = (
    "/interfaces/interface[name=*]/state/oper-status",
    "/network-instances/network-instance[name=default]/protocols/protocol[identifier=BGP][name=BGP]/bgp/"
    "neighbors/neighbor[neighbor-address=*]/state/session-state",
    "/network-instances/network-instance[name=default]/protocols/protocol[identifier=ISIS][name=*]/isis/"
    "interfaces/interface[interface-id=*]/levels/level[level-number=*]/adjacencies/adjacency[system-id=*]/state/"
    "adjacency-state",
    "/network-instances/network-instance[name=default]/protocols/protocol[identifier=OSPF][name=*]/ospfv2/"
    "areas/area[identifier=*]/interfaces/interface[id=*]/neighbors/neighbor[router-id=*]/state/adjacency-state",
)
_PORT = re.compile(r"^/interfaces/interface\[name=([^\]]+)\]/state/oper-status$")
_BGP = re.compile(r"/bgp/neighbors/neighbor\[neighbor-address=([^\]]+)\]/state/session-state$")
_ISIS = re.compile(r"/isis/interfaces/interface\[interface-id=([^\]]+)\]/levels/level\[level-number=([^\]]+)\]/"
                   r"adjacencies/adjacency\[system-id=([^\]]+)\]/state/adjacency-state$")
_OSPF = re.compile(r"/ospfv2/areas/area\[identifier=([^\]]+)\]/interfaces/interface\[id=([^\]]+)\]/"
                   r"neighbors/neighbor\[router-id=([^\]]+)\]/state/adjacency-state$")


def parse_state(path: str) -> tuple[str, tuple[str, ...]] | None:
    """``("port", (PORT,))``, ``("bgp", (NEIGHBOR,))``, ``("isis", (PORT, LEVEL, SYSTEM_ID))`` or ``("ospf",
    (PORT, AREA, ROUTER_ID))`` (the port first, as IS-IS's) for a state path, None for anything else."""
    m = _PORT.match(path)
    if m:
        return "port", (m.group(1),)
    m = _BGP.search(path)
    if m:
        return "bgp", (m.group(1),)
    m = _ISIS.search(path)
    if m:
        return "isis", (m.group(1), m.group(2), m.group(3))
    m = _OSPF.search(path)
    if m:
        return "ospf", (m.group(2), m.group(1), m.group(3))
    return None


#: device, "port" | "bgp" | "isis" | "ospf", the entity's keys, its state (None: the target deleted it)
Report = Callable[[str, str, tuple[str, ...], str | None], Awaitable[None]]


class StateStream:
    """Subscriptions to ``endpoints`` (device -> gNMI endpoint) while ``leading()``."""

    def __init__(self, endpoints: dict[str, str], report: Report,
                 reachable: Callable[[str, bool, str], Awaitable[None]], leading: Callable[[], bool], *,
                 tls: Any = None, backoff_s: tuple[float, float] = (0.2, 5.0), check_s: float = 0.5):
        self.endpoints = {d: e for d, e in endpoints.items() if not e.startswith("dry:")}
        self.report = report
        self.reachable = reachable
        self.leading = leading
        self.tls = tls
        self.backoff_s = backoff_s
        self.check_s = check_s
        self.devices: set[str] = set(self.endpoints)  # the devices to follow (the active intent's)
        self._streams: dict[str, asyncio.Task[None]] = {}
        self._main: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.endpoints and self._main is None:
            self._main = asyncio.get_running_loop().create_task(self._supervise())

    async def stop(self) -> None:
        await cancel_and_wait([self._main, *self._streams.values()])
        self._main, self._streams = None, {}

    async def _supervise(self) -> None:
        while True:
            wanted = set(self.endpoints) & self.devices if self.leading() else set()
            for device in sorted(set(self._streams) - wanted):
                self._streams.pop(device).cancel()
            for device in sorted(wanted - set(self._streams)):
                self._streams[device] = asyncio.get_running_loop().create_task(self._stream(device))
            await asyncio.sleep(self.check_s)

    async def _stream(self, device: str) -> None:
        first, longest = self.backoff_s
        delay = first
        while True:
            try:
                async with GnmiClient(device, self.endpoints[device], tls=self.tls, timeout=5.0) as client:
                    async for item in client.subscribe(PATHS, mode="on_change"):
                        if isinstance(item, SyncMarker):
                            await self.reachable(device, True, "")
                            delay = first
                        else:
                            await self._one(item)
                raise ConnectionError("the stream ended")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any broken stream: unreachable, then reconnect
                await self.reachable(device, False, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
                await asyncio.sleep(delay)
                delay = min(longest, delay * 2)

    async def _one(self, sample: Sample) -> None:
        what = parse_state(sample.path)
        if what is not None and (sample.value is None or isinstance(sample.value, str)):
            await self.report(sample.device, what[0], what[1], sample.value)
