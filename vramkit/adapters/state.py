"""What vramkit has started, on disk, so `down`, `status` and `vram-safe` know it.

One JSON file per running service in the state folder ($VRAMKIT_STATE_DIR, default ~/.local/state/vramkit).
The launcher writes it after a successful start and removes it on stop. Keys the launcher writes: name,
preset, model, runtime ('docker'|'native'), port, pid (native), compose_file (docker), log (native),
gpu_indices, vram_budget_bytes (the planner's predicted peak per GPU, which vram-safe takes as its default
threshold) and vram_budget_basis (what it rests on), hicache_bytes, cpu_pin (native with a cpuset: "ok" or
"failed: why"), started_at (ISO time). A failed stop keeps the file.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def state_dir() -> Path:
    root = os.environ.get("VRAMKIT_STATE_DIR") or Path.home() / ".local" / "state" / "vramkit"
    return Path(root)


def write_running(name: str, data: dict) -> Path:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)
    return path


def read_running(name: str | None = None) -> list[dict[str, Any]]:
    """Every recorded running service (or just `name`). A file that cannot be read is left out with one line
    on stderr naming it and what to do (a half-written or hand-edited record must not hide a server)."""
    d = state_dir()
    if not d.is_dir():
        return []
    paths = [d / f"{name}.json"] if name else sorted(d.glob("*.json"))
    out = []
    for p in paths:
        if name and not p.exists():
            continue
        try:
            data = json.loads(p.read_text())
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            out.append(data)
        except (OSError, ValueError) as e:
            print(f"vramkit: warning: run record {p} is unreadable ({type(e).__name__}: {e}); left out -> remove "
                  "it if no server of that name runs (`vramkit status` lists the others)", file=sys.stderr)
    return out


def clear_running(name: str) -> None:
    (state_dir() / f"{name}.json").unlink(missing_ok=True)


START_TIMES = "start-times.json"


def last_start_seconds(key: str) -> float | None:
    """Seconds the last start with this key took to answer /health on this machine (None: none recorded)."""
    try:
        value = json.loads((state_dir() / START_TIMES).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def save_start_seconds(key: str, seconds: float) -> None:
    path = state_dir() / START_TIMES
    try:
        data = json.loads(path.read_text())
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data[key] = round(seconds, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)
