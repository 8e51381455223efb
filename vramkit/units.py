"""Bytes inside, human units at the edge. GiB = 2**30, GB = 10**9; we say which we mean."""
from __future__ import annotations

import re

GiB = 1 << 30
MiB = 1 << 20
GB = 10**9

_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}


def bytes2human(n: int | float | None, unit: str = "GiB", digits: int = 2) -> str:
    """Format a byte count in one named unit (GiB by default); None -> 'N/A'."""
    if n is None:
        return "N/A"
    scale = _UNITS[unit.lower()]
    return f"{n / scale:.{digits}f} {unit}"


def human2bytes(text: str | int | float) -> int:
    """Parse '15.33GiB', '16 GB', '512MiB' or a plain number of bytes into an int of bytes."""
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if not m or (m.group(2) and m.group(2).lower() not in _UNITS):
        raise ValueError(f"not a size: {text!r} (use e.g. 16GiB, 15.5 GB, 512MiB)")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()])


def gib(n: float) -> int:
    return int(round(n * GiB))


def ratio_text(r: float) -> str:
    """A ratio as '1.07x'; with a third decimal where two would print 1.00x for a ratio off 1, so a goal of 1.0x read
    from the table is never met by rounding ('0.999x')."""
    two = f"{r:.2f}"
    return f"{r:.3f}x" if two == "1.00" and r != 1 else f"{two}x"
