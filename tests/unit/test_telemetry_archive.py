"""The collector's rates packed into segments and merged back (:mod:`controller.telemetry.archive`)."""

from __future__ import annotations

import numpy as np
import pytest

from controller.telemetry.archive import restore, segment
from controller.telemetry.counters import CounterStore, Options, Sample

T0 = 1_800_000_000.0
OPTS = Options(interval_s=10.0, max_rates=8)
P1 = "/interfaces/interface[name=eth1]/state/counters/out-octets"
P2 = ("/network-instances/network-instance[name=default]/afts/ipv4-unicast/ipv4-entry[prefix=10.0.0.0/24]"
      "/state/counters/octets-forwarded")


def fed(n: int, *, options: Options = OPTS) -> CounterStore:
    """Two counters sampled every 10 s for ``n`` samples: one growing faster each interval, one steady."""
    s = CounterStore(options)
    for i in range(n):
        t = int((T0 + 10 * i) * 1e9)
        s.ingest([Sample("d1", P1, 500 * i * (i + 1), t), Sample("d2", P2, 40 * i, t)], T0 + 10 * i)
    return s


def rows(s: CounterStore) -> list[int]:
    return [s.rows[("d1", P1)], s.rows[("d2", P2)]]


@pytest.mark.parametrize("window", [25.0, 45.0, 1000.0])
def test_segments_merged_into_an_empty_store_answer_every_window_as_the_original(window: float) -> None:
    a = fed(12)
    cut = T0 + 55
    first, second = segment(a, T0 - 1, cut), segment(a, cut, T0 + 1000)
    assert first is not None and second is not None
    assert first.entries + second.entries == 16  # 11 intervals per counter, the newest 8 kept
    b = CounterStore(OPTS)
    assert restore(b, [second.blob, first.blob]) == 16  # in any order
    now = T0 + 115
    x, y = a.stats(rows(a), now, window), b.stats(rows(b), now, window)
    for stat in ("mean", "p95", "max"):
        assert np.array_equal(x.stat(stat), y.stat(stat), equal_nan=True), stat


def test_a_restored_counter_reads_stale_until_it_samples_and_never_rates_across_the_gap() -> None:
    a = fed(6)
    seg = segment(a, T0 - 1, T0 + 1000)
    assert seg is not None
    b = CounterStore(OPTS)
    restore(b, [seg.blob])
    now = T0 + 60
    st = b.stats(rows(b), now, 100)
    assert st.stale.all() and st.mean[1] == pytest.approx(4.0)  # the steady counter's 4 octets/s
    # its device samples again an hour later, from a counter that went on counting: the first sample only
    # starts an interval (no rate over the gap); the second makes one
    later = T0 + 3600
    for k in range(2):
        b.ingest([Sample("d2", P2, 10_000 + 400 * k, int((later + 10 * k) * 1e9))], later + 10 * k)
    st = b.stats([b.rows[("d2", P2)]], later + 10, 20)
    assert not st.stale[0] and st.mean[0] == pytest.approx(40.0)
    assert b.stats([b.rows[("d2", P2)]], later + 10, 4000).max[0] == pytest.approx(40.0)


def test_a_segment_stored_twice_counts_once_and_a_ring_keeps_its_newest() -> None:
    a = fed(12)
    seg = segment(a, T0 - 1, T0 + 1000)
    assert seg is not None
    b = CounterStore(OPTS)
    assert restore(b, [seg.blob, seg.blob]) == 16
    assert restore(b, [seg.blob]) == 0
    small = CounterStore(Options(interval_s=10.0, max_rates=3))
    restore(small, [seg.blob])
    ends = small.ring_t[small.rows[("d1", P1)]]
    assert sorted(ends) == [T0 + 90, T0 + 100, T0 + 110]
    # and the ring goes on from there: the next rate replaces the oldest
    small.ingest([Sample("d1", P1, 1, int((T0 + 200) * 1e9))], T0 + 200)
    small.ingest([Sample("d1", P1, 101, int((T0 + 210) * 1e9))], T0 + 210)
    assert sorted(small.ring_t[small.rows[("d1", P1)]]) == [T0 + 100, T0 + 110, T0 + 210]


def test_nothing_in_the_span_is_no_segment_and_no_view_reads_packets() -> None:
    a = fed(5)
    pkts = CounterStore(OPTS)
    for i in range(3):
        pkts.ingest([Sample("d1", "/interfaces/interface[name=eth1]/state/counters/in-pkts", 10 * i,
                            int((T0 + 10 * i) * 1e9))], T0 + 10 * i)
    assert segment(pkts, 0, T0 + 1000) is None
    assert segment(a, T0 + 500, T0 + 600) is None
    assert segment(CounterStore(OPTS), 0, T0) is None
