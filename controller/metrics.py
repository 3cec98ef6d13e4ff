"""Prometheus metrics of one controller process, on a registry of its own.

:class:`Metrics` owns the collectors; ``api.create_app`` makes one per app
(``app.state.metrics``) and hands it to the controller functions that count
things, so tests can build many apps without colliding in a global registry.
Names follow Prometheus conventions (``loom_`` prefix, base units, ``_total``
for counters).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """The controller's collectors, registered on ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("loom_http_requests_total", "HTTP requests by route template and status",
                                ["method", "route", "status"], registry=r)
        self.request_seconds = Histogram("loom_http_request_duration_seconds", "HTTP request latency",
                                         ["method", "route"], buckets=_FAST, registry=r)
        self.solve_seconds = Histogram("loom_solve_duration_seconds", "Plan compilation (routes + WCMP LP)",
                                       buckets=_SLOW, registry=r)
        self.safety_seconds = Histogram("loom_safety_duration_seconds", "Safety replay of one plan",
                                        buckets=_SLOW, registry=r)
        self.scenarios_checked = Counter("loom_safety_scenarios_total", "Failure scenarios replayed", registry=r)
        self.commits = Counter("loom_commits_total", "Change commits by outcome", ["outcome"], registry=r)
        self.device_push_seconds = Histogram("loom_device_push_duration_seconds",
                                             "Per-device southbound call latency", ["device", "step"],
                                             buckets=_FAST, registry=r)
        self.drift_devices = Gauge("loom_drift_devices", "Devices whose state differs from the active plan",
                                   registry=r)
        self.auto_te_decisions = Counter("loom_auto_te_decisions_total",
                                         "Automatic re-tuning decisions by decision and reason",
                                         ["decision", "reason"], registry=r)
        self.auto_te_paused = Gauge("loom_auto_te_paused", "1 while automatic re-tuning is paused", registry=r)
        self.auto_te_gain = Gauge("loom_auto_te_gain",
                                  "The last evaluation's predicted maximum utilization gain of re-tuning", registry=r)
        self.auto_te_predicted = Gauge("loom_auto_te_predicted_utilization",
                                       "Predicted maximum utilization under the measured demand, by plan",
                                       ["plan"], registry=r)
        self.insight_events = Counter("loom_insight_events_total",
                                      "Insight events (job.slowdown, job.stalled, job.pattern_changed, link.hot) "
                                      "by kind and state (raised or cleared)", ["kind", "state"], registry=r)
        self.leader = Gauge("loom_leader", "1 while this replica holds the leader lease", registry=r)
        self.lease_epoch = Gauge("loom_lease_epoch", "The epoch of this replica's current or last leadership",
                                 registry=r)
        self.lease_renewals = Counter("loom_lease_renewals", "Leader lease renewals by this replica", registry=r)
        self.active_revision = Gauge("loom_active_revision", "The revision last committed successfully",
                                     registry=r)
        self.state_transitions = Counter("loom_state_transitions_total", "Operational state changes seen by the "
                                         "leader (link.down, link.up, device.unreachable...)", ["event"], registry=r)
        self.links_by_state = Gauge("loom_links", "Links by operational state (the leader's view)", ["oper"],
                                    registry=r)
        self.devices_unreachable = Gauge("loom_devices_unreachable", "Devices whose agent does not answer "
                                         "(the leader's view)", registry=r)

    def render(self) -> bytes:
        """The exposition text for ``/metrics``."""
        return generate_latest(self.registry)
