"""Golden text of the monitor screen, rendered without colour or ANSI codes.

To accept a deliberate change: VRAMKIT_UPDATE_GOLDEN=1 pytest tests/unit/test_monitor_render.py,
then read the diff of tests/unit/golden/ before committing it.
"""
from __future__ import annotations

import datetime as dt
import os
from dataclasses import replace
from pathlib import Path

import nvml_scenarios as sc
import pytest

from vramkit.adapters import nvml
from vramkit.core.gpu import vram
from vramkit.core.gpu.vram_text import bar_colour, compact_lines
from vramkit.ui.vram_screen import bar, plain_text, screen

GOLDEN = Path(__file__).parent / "golden"
T0 = 1_800_000_000.0       # a fixed clock for stable text


@pytest.fixture(autouse=True)
def _fresh_nvml():
    nvml.reset()
    yield
    nvml.reset()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("VRAMKIT_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert "\x1b" not in text
    assert text == path.read_text(), f"screen changed; see {path}"


def _session(snaps):
    stats, tracker, lines = vram.SessionStats(), vram.AlertTracker(), []
    for s in snaps:
        alerts = [a for g in s.gpus for a in tracker.update(g, s.time_s)]
        stats.add(s, alerts)
        lines += [a.line(dt.UTC) for a in alerts]
    return stats, lines


def test_screen_16gb_card_with_foreign_process(monkeypatch):
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    snap = replace(nvml.read_snapshot(), time_s=T0)
    check_golden("monitor_16gb_foreign.txt", plain_text(screen(snap, clock_text="08:00:00")))


def test_screen_two_gpus_with_stats_and_alert(monkeypatch):
    sc.two_gpus().install(monkeypatch)
    snaps = [replace(nvml.read_snapshot(), time_s=T0 + i) for i in range(3)]
    stats, lines = _session(snaps)
    text = plain_text(screen(snaps[-1], stats, lines, clock_text="08:00:02"))
    check_golden("monitor_two_gpus.txt", text)
    assert text.count("ALERT") == 1           # one crossing of 85 %, not one per sample


def test_screen_gpu_lost(monkeypatch):
    fake = sc.two_gpus().install(monkeypatch)
    fake.lose(0)
    snap = replace(nvml.read_snapshot(), time_s=T0)
    text = plain_text(screen(snap))
    check_golden("monitor_gpu_lost.txt", text)
    assert "GPU 0  GPU is lost" in text and " 0.00 GiB / " not in text.split("GPU 1")[0]


def test_screen_no_driver(monkeypatch):
    sc.driver_missing().install(monkeypatch)
    text = plain_text(screen(replace(nvml.read_snapshot(), time_s=T0)))
    check_golden("monitor_no_driver.txt", text)


def test_screen_na_values_are_not_zero(monkeypatch):
    sc.laptop_no_power_sensor().install(monkeypatch)
    text = plain_text(screen(nvml.read_snapshot()))
    assert "power N/A" in text and "power 0" not in text


@pytest.mark.parametrize("pct, colour", [(0, "green"), (84.9, "green"), (85, "yellow"),
                                         (89.9, "yellow"), (90, "red"), (100, "red")])
def test_bar_colour_bands(pct, colour):
    assert bar_colour(pct) == colour
    assert any(span.style == colour for span in bar(pct).spans) or pct == 0


def test_bar_fill():
    assert bar(50, width=10).plain == "[█████░░░░░]"
    assert bar(None, width=4).plain == "[????]"


def test_compact_lines_for_pipes(monkeypatch):
    fake = sc.two_gpus().install(monkeypatch)
    fake.lose(1)
    lines = compact_lines(nvml.read_snapshot(), "08:00:00")
    assert lines == ["08:00:00  GPU 0  14.32 GiB / 15.99 GiB  89.6 %  util 97 %  71 °C  280 W",
                     "08:00:00  GPU 1  GPU is lost: nvmlDeviceGetHandleByIndex: GPU is lost"]
