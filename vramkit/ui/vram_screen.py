"""Snapshot -> screen: rich renderables for the live monitor.

Takes a Snapshot (and the session's stats and recent alert lines) and returns renderables; no
terminal is touched here. `plain_text()` renders without colour or ANSI codes, which is what the
golden tests compare. The terminal-free parts (colour bands, N/A formatting, pipe lines) live in
`vramkit/core/gpu/vram_text.py`.
"""
from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from vramkit.core.gpu.snapshot import GpuSample, Snapshot, is_na
from vramkit.core.gpu.vram import SessionStats
from vramkit.core.gpu.vram_text import bar_colour, fmt, human_bytes
from vramkit.units import bytes2human

BAR_WIDTH = 30


def bar(percent: float | None, width: int = BAR_WIDTH) -> Text:
    if percent is None or is_na(percent):
        return Text("[" + "?" * width + "]", style="dim")
    filled = max(0, min(width, round(width * percent / 100.0)))
    t = Text("[")
    t.append("█" * filled, style=bar_colour(percent))
    t.append("░" * (width - filled), style="dim")
    t.append("]")
    return t


def gpu_panel(g: GpuSample, top_processes: int = 5) -> RenderableType:
    if g.error is not None:
        what = "GPU is lost" if g.lost else "not available"
        return Text(f"GPU {g.index}  {what}: {g.error.reason}", style="bold red")
    head = Text(f"GPU {g.index}  {fmt(g.name)}", style="bold")
    head.append(f"   util {fmt(g.util_percent, ' %')}"
                f"   temp {fmt(g.temperature_c, ' °C')}"
                f"   power {fmt(g.power_w, ' W', '{:.0f}')}"
                + ("" if is_na(g.power_limit_w) else f" / {g.power_limit_w:.0f} W"), style="")
    pct = g.in_use_percent
    line = bar(None if is_na(pct) else pct)
    line.append(f"  {human_bytes(g.in_use_bytes)} / {human_bytes(g.total_bytes)}")
    line.append(f"  {fmt(pct, ' %', '{:5.1f}')}", style=bar_colour(pct) if not is_na(pct) else "dim")
    detail = Text(f"in use = total - free; nvidia-smi used {human_bytes(g.nvml_used_bytes)}, "
                  f"driver reserved {human_bytes(g.reserved_bytes)} (NVML {fmt(g.memory_api)})", style="dim")
    parts: list[RenderableType] = [head, line, detail]
    if is_na(g.processes):
        parts.append(Text(f"processes: N/A ({g.processes.reason})", style="dim"))
    elif not g.processes:
        parts.append(Text("processes: none", style="dim"))
    else:
        table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 2))
        table.add_column("pid", justify="right")
        table.add_column("GPU memory", justify="right")
        table.add_column("command")
        for p in g.processes[:top_processes]:
            table.add_row(str(p.pid), human_bytes(p.used_bytes), fmt(p.name))
        hidden = len(g.processes) - top_processes
        if hidden > 0:
            table.add_row("", "", f"(+{hidden} more)")
        parts.append(table)
    return Group(*parts)


def stats_table(stats: SessionStats) -> Table:
    th = stats.thresholds_pct
    t = Table(title="session", box=None, show_edge=False, pad_edge=False, padding=(0, 2))
    for name in ("GPU", "peak", "mean", *[f">={x:g}%" for x in th], "alerts", "temp min/max"):
        t.add_column(name, justify="right")
    for s in sorted(stats.gpus.values(), key=lambda s: s.index):
        peak = "N/A" if s.peak_bytes is None else f"{bytes2human(s.peak_bytes)} ({s.peak_percent:.1f} %)"
        mean = "N/A" if s.mean_bytes is None else f"{bytes2human(int(s.mean_bytes))}"
        temps = ("N/A" if s.temp_min_c is None else f"{s.temp_min_c}/{s.temp_max_c} °C")
        t.add_row(str(s.index), peak, mean, *[f"{s.seconds_above[x]:.0f} s" for x in th],
                  str(s.alerts), temps)
    return t


def screen(snap: Snapshot, stats: SessionStats | None = None, alert_lines: Sequence[str] = (),
           top_processes: int = 5, clock_text: str = "") -> RenderableType:
    """The whole monitor screen: a header, one panel per GPU, the session table, recent alerts."""
    header = Text("vramkit monitor", style="bold")
    if clock_text:
        header.append(f"  {clock_text}")
    header.append(f"  driver {fmt(snap.driver_version)}")
    parts: list[RenderableType] = [header]
    if snap.unavailable is not None:
        parts.append(Text(f"NVML not available: {snap.unavailable.reason}", style="bold red"))
    elif not snap.gpus:
        parts.append(Text("NVML sees no GPU", style="bold red"))
    for g in snap.gpus:
        parts.append(Text(""))
        parts.append(gpu_panel(g, top_processes))
    if stats is not None and stats.gpus:
        parts.append(Text(""))
        parts.append(stats_table(stats))
    if alert_lines:
        parts.append(Text(""))
        parts.extend(Text(line, style="yellow") for line in alert_lines)
    return Group(*parts)


def plain_text(renderable: RenderableType, width: int = 100) -> str:
    """Render to a string with no colour and no ANSI codes (golden tests, pipes, logs)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False,
                      legacy_windows=False, no_color=True, highlight=False)
    console.print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"
