"""The live side of the collector: a gNMI subscription to every attached device of the active revision.

:class:`TelemetryStream` keeps one ``STREAM``/``SAMPLE`` subscription per
device (through :class:`southbound.gnmi.GnmiClient`, written against the
OpenConfig paths of DESIGN.md only, so any switch that serves them works) and
feeds what arrives into a :class:`~controller.telemetry.Telemetry`: samples are
buffered per device and ingested in batches a few times a second. A stream
that breaks marks its device disconnected (its counters read stale, never
zero) and reconnects with exponential back-off; a switch that refuses the IPv6
AFT path (``NOT_FOUND``: it serves no ``ipv6-entry``) is subscribed again at
once without it, and serves its IPv4 entries as before; a device that leaves the
active revision is dropped, one that joins is subscribed. The active revision,
its intent and plan come from ``active()``, polled every ``refresh_s``; the
views read them from ``Telemetry.context``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from controller.aio import cancel_and_wait
from controller.model import Intent
from controller.model.plan import Plan
from controller.telemetry.collector import Telemetry
from southbound.gnmi import GnmiClient, Sample, SyncMarker

__all__ = ["AFT6_PATH", "PATHS", "StreamOptions", "TelemetryStream"]

log = logging.getLogger("loom.telemetry")

#: the IPv6 AFT entries: left out for a switch that serves none (it refuses the path)
AFT6_PATH = "/network-instances/network-instance[name=default]/afts/ipv6-unicast/ipv6-entry[prefix=*]/state/counters"
#: What the collector subscribes to: every interface's counters and every AFT entry's of both families (DESIGN.md,
#: Telemetry).
PATHS = (
    "/interfaces/interface[name=*]/state/counters",
    "/network-instances/network-instance[name=default]/afts/ipv4-unicast/ipv4-entry[prefix=*]/state/counters",
    AFT6_PATH,
)

Active = tuple[int, Intent, Plan]


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """``interval_s``: the sample interval asked of each switch; ``flush_s``: how often buffered samples are
    ingested; ``refresh_s``: how often the active revision (and so the set of devices) is read again;
    ``backoff_s``: the first and the longest wait before a broken stream reconnects."""

    interval_s: float = 10.0
    flush_s: float = 0.25
    refresh_s: float = 5.0
    backoff_s: tuple[float, float] = (0.5, 30.0)


class TelemetryStream:
    """Subscriptions to the devices of the active revision that have a gNMI endpoint."""

    def __init__(self, telemetry: Telemetry, endpoints: dict[str, str], active: Callable[[], Awaitable[Active | None]],
                 *, tls: Any = None, options: StreamOptions | None = None, clock: Callable[[], float] = time.time):
        self.telemetry = telemetry
        self.endpoints = {d: e for d, e in endpoints.items() if not e.startswith("dry:")}
        self.active = active
        self.tls = tls
        self.options = options or StreamOptions()
        self.clock = clock
        self._buffer: list[Sample] = []
        self._streams: dict[str, asyncio.Task[None]] = {}
        self._main: asyncio.Task[None] | None = None
        self.connected: set[str] = set()

    # -- life cycle -------------------------------------------------------------------
    async def start(self) -> None:
        if self.endpoints and self._main is None:
            self._main = asyncio.get_running_loop().create_task(self._supervise())

    async def stop(self) -> None:
        await cancel_and_wait([self._main, *self._streams.values()])
        self._main, self._streams = None, {}
        self._flush()

    # -- the supervisor: active revision, device set, flushing ----------------------------
    async def _supervise(self) -> None:
        next_refresh = 0.0
        while True:
            now = time.monotonic()
            if now >= next_refresh:
                next_refresh = now + self.options.refresh_s
                await self._refresh()
            self._flush()
            await asyncio.sleep(self.options.flush_s)

    async def _refresh(self) -> None:
        try:
            current = await self.active()
        except Exception:  # noqa: BLE001 - the store may be down for a moment; the streams go on
            log.warning("telemetry: cannot read the active revision", exc_info=True)
            return
        self.telemetry.context = current
        wanted = set(self.endpoints) & (set(current[1].device_map) if current else set(self.endpoints))
        for device in sorted(set(self._streams) - wanted):
            self._streams.pop(device).cancel()
            self.telemetry.forget(device)
        for device in sorted(wanted - set(self._streams)):
            self._streams[device] = asyncio.get_running_loop().create_task(self._stream(device))
        self.telemetry.expire(self.clock())

    def _flush(self) -> None:
        batch, self._buffer = self._buffer, []
        if batch:
            self.telemetry.ingest(batch, self.clock())

    # -- one device ---------------------------------------------------------------------
    async def _stream(self, device: str) -> None:
        first, longest = self.options.backoff_s
        delay = first
        paths = list(PATHS)
        while True:
            try:
                async with GnmiClient(device, self.endpoints[device], tls=self.tls) as client:
                    async for item in client.subscribe(paths, mode="sample", interval_s=self.options.interval_s):
                        if isinstance(item, SyncMarker):
                            if device not in self.connected:
                                log.info("telemetry: %s streaming", device)
                            self.connected.add(device)
                            delay = first
                        elif isinstance(item.value, int):  # counters (a state string is no rate)
                            self._buffer.append(item)
                raise ConnectionError("the stream ended")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any broken stream: stale, then reconnect
                if AFT6_PATH in paths and "NOT_FOUND" in str(exc):
                    paths.remove(AFT6_PATH)  # a switch without IPv6 AFT entries: its other counters still stream
                    log.info("telemetry: %s serves no IPv6 AFT entries (%s); subscribing without them", device, exc)
                    continue
                if device in self.connected:
                    log.warning("telemetry: %s stream broke (%s); reconnecting", device, exc)
                self.connected.discard(device)
                self._flush()
                self.telemetry.mark_disconnected(device)
                await asyncio.sleep(delay)
                delay = min(longest, delay * 2)
