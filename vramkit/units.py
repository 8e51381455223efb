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
    """A ratio as '1.07x'; with more decimals (up to 6) where two would print 1.00x for a ratio off 1, until the text
    falls on the same side of 1 as the ratio, so a goal of 1.0x read from a table is never met or missed by rounding
    ('0.999x', '0.9996x')."""
    for digits in range(2, 7):
        text = f"{r:.{digits}f}"
        if (float(text) > 1) == (r > 1) and (float(text) < 1) == (r < 1):
            return f"{text}x"
    return f"{text}x"
