"""Snapshot -> plain text: the monitor's colour bands, value formatting and one-line-per-GPU output.

Pure and terminal-free (no rich): the rich screen in `vramkit/ui/vram_screen.py` draws with these
helpers, and `compact_lines()` is what the monitor prints when its output is a pipe.
"""
from __future__ import annotations

from vramkit.core.gpu.snapshot import Snapshot, is_na
from vramkit.core.na import NotAvailable
from vramkit.units import bytes2human

YELLOW_FROM_PCT = 85.0     # the issue: green below 85 %, yellow from 85, red from 90
RED_FROM_PCT = 90.0


def bar_colour(percent: float) -> str:
    if percent >= RED_FROM_PCT:
        return "red"
    if percent >= YELLOW_FROM_PCT:
        return "yellow"
    return "green"


def fmt(value: object, unit: str = "", spec: str = "{}") -> str:
    """`value` formatted with `spec` plus `unit`, or "N/A" when NVML could not tell (never a 0)."""
    return "N/A" if is_na(value) or value is None else spec.format(value) + unit


def human_bytes(value: int | float | NotAvailable | None) -> str:
    """Bytes as GiB/MiB text, or "N/A" when NVML could not tell."""
    return "N/A" if is_na(value) or value is None else bytes2human(value)


def compact_lines(snap: Snapshot, clock_text: str = "") -> list[str]:
    """One plain line per GPU per sample, for a monitor whose output is not a terminal (pipes, tee)."""
    head = f"{clock_text}  " if clock_text else ""
    if snap.unavailable is not None:
        return [f"{head}NVML not available: {snap.unavailable.reason}"]
    out = []
    for g in snap.gpus:
        if g.error is not None:
            out.append(f"{head}GPU {g.index}  {'GPU is lost' if g.lost else 'not available'}: {g.error.reason}")
            continue
        pct = g.in_use_percent
        out.append(f"{head}GPU {g.index}  {human_bytes(g.in_use_bytes)} / {human_bytes(g.total_bytes)}  "
                   f"{fmt(pct, ' %', '{:.1f}')}  util {fmt(g.util_percent, ' %')}  "
                   f"{fmt(g.temperature_c, ' °C')}  {fmt(g.power_w, ' W', '{:.0f}')}")
    return out
