"""Progress lines for the slow steps (issue 19 item 8): SGLang's start, the moe preset's expert conversion.

Pure: counts, bytes and seconds in, one line of text out. The rate and the ETA are derived from what was done
so far (done / elapsed); a start's ETA from the last start of the same server on this machine (measured there,
vramkit/adapters/state.py), and said so; none is guessed.
"""
from __future__ import annotations

from vramkit.units import bytes2human


def duration(seconds: float) -> str:
    """'42 s', '3 min 05 s', '1 h 02 min'."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta(done: float, total: float, elapsed_s: float) -> float | None:
    """Seconds left at the rate so far; None before anything is done (no rate yet)."""
    if done <= 0 or elapsed_s <= 0 or total <= 0:
        return None
    return max(0.0, elapsed_s * (total - done) / done)


def steps_line(what: str, done: int, total: int, elapsed_s: float, done_bytes: int | None = None) -> str:
    """'layer 12 of 48 (25 %), 3.40 GiB written at 0.21 GiB/s, 1 min 10 s elapsed, ETA 3 min 30 s'."""
    pct = 100 * done / total if total else 0.0
    parts = [f"{what} {done} of {total} ({pct:.0f} %)"]
    if done_bytes is not None and elapsed_s > 0:
        parts.append(f"{bytes2human(done_bytes)} written at {bytes2human(int(done_bytes / elapsed_s))}/s")
    parts.append(f"{duration(elapsed_s)} elapsed")
    left = eta(done, total, elapsed_s)
    parts.append(f"ETA {duration(left)}" if left is not None else "ETA after the first one")
    return ", ".join(parts)


def start_line(label: str, index: int, count: int, elapsed_s: float, last_start_s: float | None,
               shards: tuple[int, int] | None = None) -> str:
    """SGLang's start: 'loading weights (3/8; shard 2 of 5), 42 s elapsed, ETA ~30 s (the last start of this
    server here took 72 s)'. Without an earlier start to go by, the ETA says so."""
    where = f"{index}/{count}" + (f"; shard {shards[0]} of {shards[1]}" if shards else "")
    line = f"{label} ({where}), {duration(elapsed_s)} elapsed"
    if last_start_s is None:
        return line + ", no ETA (no earlier start of this server on this machine)"
    left = last_start_s - elapsed_s
    if left <= 0:
        return line + f", past the {duration(last_start_s)} the last start here took"
    return line + f", ETA ~{duration(left)} (the last start of this server here took {duration(last_start_s)})"
