"""A job's iteration period recovered from its counters' per-interval rates (pure, numpy).

What the telemetry interval allows. A counter read every ``dt`` seconds gives the
mean rate over each interval: the samples of ``g = s * box(dt)``, the job's
instantaneous rate ``s`` smoothed over one interval. ``g`` keeps the period
``P`` of ``s``, but it is seen only at multiples of ``dt``:

* ``P < 2 dt`` cannot be told from its aliases (Nyquist), and a ``P`` that
  divides ``dt`` is averaged out entirely (every interval holds whole
  iterations): a training step of a second under a 10 s interval is invisible,
  and :func:`recover_period` answers ``None`` with the reason rather than an
  alias;
* the series must hold at least two periods (``P <= n dt / 2`` over ``n``
  intervals) and ``Options.min_intervals`` samples;
* the precision is that of a spectral peak's centre: its width is ``1 / (n dt)``
  in frequency, and noise moves its centre by a fraction of that; within those
  bounds a period need not be a multiple of ``dt``.

Method: the least-squares periodogram (Lomb-Scargle: a sinusoid and a constant
fitted at each frequency of a fine grid over ``[2 / (n dt), 1 / (2 dt)]``,
scored by the share of the variance it explains). The iteration's rate is a
pulse train (busy while communicating, quiet while computing), and its
fundamental carries the largest share of the variance unless the busy part is
short, when the second harmonic can match it: so a peak at ``f`` gives way to
``f / 2`` while the fit there explains at least ``Options.subharmonic`` of the
peak's (a periodic rate explains nothing at half its frequency). The
**strength** is the share of the variance that the fundamental and its first
``Options.harmonics - 1`` harmonics explain together at the chosen frequency:
near 1 for a noise-free periodic rate, near 0 for noise; under
``Options.min_strength`` there is no period. (The autocorrelation of
:func:`controller.telemetry.patterns.periodicity`, which the classifier uses,
sees only periods that are whole numbers of intervals.)

>>> import numpy as np
>>> t = np.arange(36) * 10.0
>>> rate = ((t % 37.0) < 18.5).astype(float)  # on half of every 37 s, read every 10 s
>>> round(recover_period(rate, 10.0).period_s)
37
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Options", "PeriodFit", "recover_period"]


@dataclass(frozen=True, slots=True)
class Options:
    """``min_intervals``: fewer samples give no period. ``grid``: frequencies tried. ``subharmonic``: the share
    of a peak's fit at half its frequency that makes the half the answer. ``harmonics``: the sinusoids of the
    strength's fit. ``min_strength``: below it, no period. ``quiet``: a rate at most this share of the highest is
    quiet, and the quiet intervals before the first busy one and after the last are left out (the job had not
    started or had stopped)."""

    min_intervals: int = 8
    grid: int = 4000
    subharmonic: float = 0.5
    harmonics: int = 3
    min_strength: float = 0.5
    quiet: float = 0.02


@dataclass(frozen=True, slots=True)
class PeriodFit:
    """The period found (``None``: none), the strength of the evidence (0..1) and why there is none."""

    period_s: float | None
    strength: float
    reason: str | None = None


def _periodogram(x: np.ndarray, t: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    """The share of the variance of ``x`` (centred) a sinusoid explains at each of ``freqs``."""
    arg = 2 * np.pi * freqs[:, None] * t[None, :]
    c, s = np.cos(arg), np.sin(arg)
    c -= c.mean(axis=1, keepdims=True)
    s -= s.mean(axis=1, keepdims=True)
    cc, ss, cs = (c * c).sum(axis=1), (s * s).sum(axis=1), (c * s).sum(axis=1)
    cx, sx = c @ x, s @ x
    det = cc * ss - cs * cs
    ok = det > 1e-9 * np.maximum(cc * ss, 1e-30)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.where(ok, (ss * cx - cs * sx) / np.where(ok, det, 1.0), 0.0)
        b = np.where(ok, (cc * sx - cs * cx) / np.where(ok, det, 1.0), 0.0)
    out: np.ndarray = np.clip((a * cx + b * sx) / float(x @ x), 0.0, 1.0)
    return out


def _strength(x: np.ndarray, t: np.ndarray, f: float, harmonics: int) -> float:
    """The share of the variance of ``x`` (centred) the first ``harmonics`` harmonics of ``f`` explain."""
    cols = [np.ones_like(t)]
    for h in range(1, harmonics + 1):
        cols += [np.cos(2 * np.pi * h * f * t), np.sin(2 * np.pi * h * f * t)]
    design = np.stack(cols, axis=1)
    coef, *_ = np.linalg.lstsq(design, x, rcond=None)
    resid = x - design @ coef
    return float(np.clip(1.0 - float(resid @ resid) / float(x @ x), 0.0, 1.0))


def _active(x: np.ndarray, t: np.ndarray, quiet: float) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``t`` without the quiet intervals before the first busy one and after the last: a job not yet
    started, or stopped, has no iteration, and the step of its start or stop is variance no period explains."""
    if len(x) == 0:
        return x, t
    busy = np.flatnonzero(np.abs(x) > quiet * float(np.abs(x).max()))
    if len(busy) == 0:
        return x, t
    first, last = int(busy[0]), int(busy[-1])
    return x[first:last + 1], t[first:last + 1]


def recover_period(rate: np.ndarray, interval_s: float, options: Options | None = None) -> PeriodFit:
    """The iteration period of ``rate`` (one mean rate per interval of ``interval_s`` seconds, oldest
    first; NaN where unknown) and the strength of the evidence (see the module docstring)."""
    o = options or Options()
    x = np.asarray(rate, dtype=np.float64)
    t = np.arange(len(x)) * interval_s
    known = ~np.isnan(x)
    x, t = _active(x[known], t[known], o.quiet)
    n = len(x)
    if n < o.min_intervals:
        return PeriodFit(None, 0.0, f"{n} intervals of {interval_s:g} s with a rate: a period needs "
                                    f"at least {o.min_intervals}")
    scale = max(1.0, float(np.abs(x).max()))
    x = x - x.mean()
    if float(np.abs(x).max()) <= 1e-9 * scale:
        return PeriodFit(None, 0.0, f"a steady rate: no period of {2 * interval_s:g} s or more; a shorter one "
                                    f"is averaged out by the {interval_s:g} s telemetry interval")
    span = float(t[-1] - t[0]) + interval_s
    freqs = np.linspace(2.0 / span, 0.5 / interval_s, o.grid)
    power = _periodogram(x, t, freqs)
    k = int(np.argmax(power))
    while freqs[k] / 2 >= freqs[0]:
        half = int(np.searchsorted(freqs, freqs[k] / 2))
        near = slice(max(0, half - 2), min(len(freqs), half + 3))
        h = near.start + int(np.argmax(power[near]))
        if power[h] < o.subharmonic * power[k]:
            break
        lo_k, hi_k = max(0, h - o.grid // 50), min(len(freqs), h + o.grid // 50 + 1)
        k = lo_k + int(np.argmax(power[lo_k:hi_k]))  # the top of the half's own peak
    strength = _strength(x, t, float(freqs[k]), o.harmonics)
    if strength < o.min_strength:
        return PeriodFit(None, strength, f"no period between {2 * interval_s:g} s and {span / 2:g} s explains the "
                                         f"rate (strength {strength:.2f}); a shorter one is averaged out by the "
                                         f"{interval_s:g} s telemetry interval")
    return PeriodFit(float(1.0 / freqs[k]), strength)
