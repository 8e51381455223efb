"""Threshold crossing with hysteresis and cooldown, session statistics, steady cadence."""
from __future__ import annotations

import datetime as dt

import pytest

from vramkit.core.gpu import vram
from vramkit.core.gpu.snapshot import GpuSample, NotAvailable, Snapshot

TOTAL = 16 * (1 << 30)


def gpu_at(pct: float, index: int = 0, temp: int = 50) -> GpuSample:
    used = int(TOTAL * pct / 100)
    return GpuSample(index=index, total_bytes=TOTAL, free_bytes=TOTAL - used, temperature_c=temp)


def feed(tracker, series, start=0.0, step=1.0):
    """series of percentages, one per second -> [(time, threshold)] of alerts."""
    out = []
    for i, pct in enumerate(series):
        out += [(a.time_s, a.threshold_pct) for a in tracker.update(gpu_at(pct), start + i * step)]
    return out


def test_parse_thresholds():
    assert vram.parse_thresholds("95, 85,90%") == (85.0, 90.0, 95.0)
    for bad in ("", "abc", "0", "101"):
        with pytest.raises(ValueError):
            vram.parse_thresholds(bad)


def test_each_line_alerts_once_per_excursion():
    t = vram.AlertTracker((85, 90, 95), cooldown_s=30)
    assert feed(t, [50, 86, 91, 96, 97, 96]) == [(1, 85), (2, 90), (3, 95)]


def test_hovering_at_the_line_does_not_flood():
    t = vram.AlertTracker((90,), cooldown_s=0, hysteresis_pct=2)
    # 89.9/90.1 flips never fall 2 points under the line: one excursion, one alert
    assert feed(t, [89.9, 90.1, 89.9, 90.1, 89.5, 90.2]) == [(1, 90)]


def test_new_excursion_after_falling_under_hysteresis():
    t = vram.AlertTracker((90,), cooldown_s=0, hysteresis_pct=2)
    assert feed(t, [91, 87.9, 91]) == [(0, 90), (2, 90)]


def test_cooldown_holds_back_then_alerts_if_still_above():
    t = vram.AlertTracker((90,), cooldown_s=10, hysteresis_pct=2)
    # alert at 0; dips out at 1; back above at 2 (inside cooldown: quiet); still above at 10 -> alert
    alerts = feed(t, [91, 80, 91, 91, 91, 91, 91, 91, 91, 91, 91])
    assert alerts == [(0, 90), (10, 90)]
    assert t.suppressed == 1


def test_cooldown_quiet_excursion_that_ends_inside_cooldown_stays_quiet():
    t = vram.AlertTracker((90,), cooldown_s=10, hysteresis_pct=2)
    assert feed(t, [91, 80, 91, 80, 80]) == [(0, 90)]


def test_unknown_sample_keeps_state():
    t = vram.AlertTracker((90,), cooldown_s=0)
    assert t.update(gpu_at(91), 0)
    assert t.update(GpuSample(index=0, error=NotAvailable("GPU is lost", 15)), 1) == []
    assert t.update(gpu_at(91), 2) == []          # same excursion continues


def test_gpus_tracked_apart():
    t = vram.AlertTracker((90,), cooldown_s=100)
    assert len(t.update(gpu_at(95, index=0), 0)) == 1
    assert len(t.update(gpu_at(95, index=1), 0)) == 1


def test_alert_line():
    a = vram.Alert(1_800_000_000.0, 0, 90.0, 91.25, int(TOTAL * 0.9125), TOTAL)
    assert a.line(dt.UTC) == ("2027-01-15 08:00:00  ALERT GPU 0 above 90 %: "
                                       "14.60 GiB of 16.00 GiB (91.2 %)")


def test_session_statistics():
    stats = vram.SessionStats((85, 90))
    series = [(0, 80, 40), (1, 88, 45), (2, 92, 61), (3, 86, 58), (4, 70, 52)]
    for t, pct, temp in series:
        stats.add(Snapshot(time_s=t, gpus=(gpu_at(pct, temp=temp),)))
    stats.add(Snapshot(time_s=5, gpus=(GpuSample(index=0, error=NotAvailable("lost", 15)),)))
    s = stats.gpus[0]
    assert s.samples == 5 and s.missing == 1
    assert s.peak_percent == pytest.approx(92, abs=0.01)
    assert s.mean_percent == pytest.approx((80 + 88 + 92 + 86 + 70) / 5, abs=0.01)
    # the 1 s after each sample counts toward the lines that sample was at or above
    assert s.seconds_above[85] == pytest.approx(3.0)       # samples at t=1,2,3
    assert s.seconds_above[90] == pytest.approx(1.0)       # sample at t=2
    assert (s.temp_min_c, s.temp_max_c) == (40, 61)
    d = stats.to_dict()
    assert d["duration_s"] == 5 and d["gpus"][0]["seconds_above"] == {"85": 3.0, "90": 1.0}


def test_alerts_counted_in_stats():
    stats, tracker = vram.SessionStats((90,)), vram.AlertTracker((90,), cooldown_s=0)
    for t, pct in enumerate([95, 80, 95]):
        snap = Snapshot(time_s=t, gpus=(gpu_at(pct),))
        stats.add(snap, [a for g in snap.gpus for a in tracker.update(g, t)])
    assert stats.gpus[0].alerts == 2


@pytest.mark.parametrize("deadline, now, interval, expected", [
    (10.0, 10.2, 1.0, 11.0),      # query took 0.2 s: sleep 0.8 s
    (10.0, 11.5, 1.0, 12.0),      # query overran one slot: skip to the next free one
    (10.0, 13.0, 1.0, 14.0),      # exactly on a slot boundary counts as missed
    (0.0, 0.01, 0.25, 0.25),
])
def test_steady_cadence(deadline, now, interval, expected):
    assert vram.next_deadline(deadline, now, interval) == pytest.approx(expected)


def test_cadence_has_no_drift():
    d, now = 0.0, 0.0
    for _ in range(1000):
        now = d + 0.03            # each query takes 30 ms
        d = vram.next_deadline(d, now, 0.25)
    assert d == pytest.approx(250.0)
