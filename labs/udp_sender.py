"""One host's UDP sender for ``loom lab traffic``: paced streams, run inside the host's namespace.

This module owns the packets of lab traffic. It is a script with nothing but
the standard library (it starts in tens of milliseconds under ``ip netns
exec``): ``python udp_sender.py SPEC`` reads the JSON spec :mod:`labs.traffic`
wrote, waits for the common wall-clock start, and sends each stream's flows
(destination address and port, round robin) so that, at every tick, the bytes
sent equal the stream's rate times the time elapsed (a token bucket refilled
continuously, so scheduling jitter is caught up at the next tick and the
long-run rate is exact). With ``period_s`` > 0 the bucket fills only during the first ``duty`` of
every period from the start, at the rate over ``duty``: on/off traffic whose mean over whole periods
is the stream's rate. Packet sizes count the IP packet (IP and UDP headers
and payload). It prints one JSON line of counts per stream when the duration
is over. Its command line names the spec's path, inside the lab's run
directory, so ``loom lab down`` finds and stops a sender that was left behind.
A flow to an IPv6 address is sent over IPv6 (its own socket; the packet's
40-byte header leaves a smaller payload for the same packet size).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

IP_UDP_HEADERS = 28
IP6_UDP_HEADERS = 48


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Send the streams of ``spec`` and return their counts (see the module docstring)."""
    size = int(spec["packet_bytes"])
    payloads = {socket.AF_INET: b"\x00" * (size - IP_UDP_HEADERS), socket.AF_INET6: b"\x00" * (size - IP6_UDP_HEADERS)}
    duration = float(spec["duration"])
    tick = float(spec.get("tick_s", 0.001))
    period, duty = float(spec.get("period_s", 0.0)), float(spec.get("duty", 1.0))
    streams = [{"demand": s["demand"], "per_s": float(s["bps"]) / (8 * size) / (duty if period > 0 else 1.0),
                "flows": [(_family(str(a)), (str(a), int(p))) for a, p in s["flows"]], "packets": 0, "errors": 0}
               for s in spec["streams"]]
    socks = {}
    for family in {f for s in streams for f, _to in s["flows"]}:
        socks[family] = socket.socket(family, socket.SOCK_DGRAM)
        socks[family].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    delay = float(spec["start_at"]) - time.time()
    if delay > 0:
        time.sleep(delay)
    started = time.time()
    t0 = time.monotonic()
    while True:
        elapsed = min(time.monotonic() - t0, duration)
        busy = elapsed
        if period > 0:
            whole, part = divmod(elapsed, period)
            busy = whole * duty * period + min(part, duty * period)
        for s in streams:
            due = int(s["per_s"] * busy) - s["packets"] - s["errors"]
            flows = s["flows"]
            for _ in range(max(0, due)):
                n = s["packets"] + s["errors"]
                family, to = flows[n % len(flows)]
                try:
                    socks[family].sendto(payloads[family], to)
                    s["packets"] += 1
                except OSError:  # ENOBUFS, no route for a moment: counted, never retried
                    s["errors"] += 1
        if elapsed >= duration:
            break
        time.sleep(tick)
    for sock in socks.values():
        sock.close()
    return {"started": started, "stopped": time.time(),
            "streams": [{"demand": s["demand"], "packets": s["packets"], "bytes": s["packets"] * size,
                         "errors": s["errors"]} for s in streams]}


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        spec = json.load(f)
    sys.stdout.write(json.dumps(run(spec)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
