"""What a failure loses until the reaction: the replay's two stages weighed over the reaction's delay.

Issue 30.5, "the replay knows the reaction". A failure scenario of the safety
report (:mod:`safety.replay`) runs ``immediate`` (kernel-local repair) until
routing has moved, then ``reconverged`` (under ``fib``: the static routes'
repair) until the reaction plan is committed, ``window_s`` after the failure.
:func:`exposure` reads, per stage, the gbps black-holed and the gbps that loops
(:attr:`safety.report.StageResult.looped_gbps`: traffic whose path comes back to
a device), and bounds the traffic lost in the window: at most the worse stage's
loss for the whole window (how long each stage lasts within it is the routing
protocol's business, which the replay does not time). The reaction plan's own
verdict is the controller's (:func:`controller.operations.reaction.judge`).
Pure: a scenario result and a delay in, an :class:`Exposure` out.
"""

from __future__ import annotations

from dataclasses import dataclass

from safety.report import ScenarioResult, StageResult

__all__ = ["Exposure", "StageLoss", "exposure"]


@dataclass(frozen=True, slots=True)
class StageLoss:
    """One stage's loss: gbps black-holed, gbps looped (None: not weighed)."""

    black_holed_gbps: float
    looped_gbps: float | None

    @property
    def lost_gbps(self) -> float:
        return self.black_holed_gbps + (self.looped_gbps or 0.0)


@dataclass(frozen=True, slots=True)
class Exposure:
    """A scenario until its reaction: each stage's loss, the worse one, and over ``window_s`` (None: nothing
    reacts) at most ``lost_gbit``."""

    scenario: str
    immediate: StageLoss
    reconverged: StageLoss
    window_s: float | None

    @property
    def lost_gbps(self) -> float:
        return max(self.immediate.lost_gbps, self.reconverged.lost_gbps)

    @property
    def lost_gbit(self) -> float | None:
        return None if self.window_s is None else self.lost_gbps * self.window_s


def _loss(stage: StageResult) -> StageLoss:
    return StageLoss(stage.dropped_gbps, stage.looped_gbps)


def exposure(res: ScenarioResult, window_s: float | None) -> Exposure:
    """What ``res`` loses until a reaction ``window_s`` after the failure (None: no reaction)."""
    return Exposure(res.name, _loss(res.immediate), _loss(res.reconverged), window_s)
