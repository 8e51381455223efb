"""A weight load's recorded allocations, replayed through the planner's caching-allocator model.

    python benchmarks/gpu/replay_trace.py DETAIL.json[.gz] [--model NAME] [--without TEXT ...]

DETAIL is what `alloc_snapshot.py --detail` writes from the adapter's VRAMKIT_CUDA_SNAPSHOT: every allocation and free
SGLang made on the GPU during the load, in order, with the line that made it. Fed to core/memory/torch_alloc.py, it
separates the allocator's rules (which the model must get right on the real sequence) from the sequence the planner
assumes (core/memory/weight_load.py replays the one arch.py derives). The allocations made before the recorder
started are the expert-location maps (arch.expert_location_prelude of --model); they are replayed first.

`--without TEXT` leaves out every allocation whose line contains TEXT, with its free: the reserve SGLang would have
had without them. Issue 18: the three recorded loads (h200-stagesnap*/) reserve 8-28 MiB more without the rotary
cache's build tensors (`--without base.py:171 --without base.py:173 --without base.py:174 --without base.py:175`:
rotary_embedding/base.py _compute_cos_sin_cache), which the planner's replay makes since (arch.rope_build_temps).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vramkit import catalog  # noqa: E402
from vramkit.core.memory.torch_alloc import CachingAllocator  # noqa: E402
from vramkit.core.model.arch import expert_location_prelude  # noqa: E402

MiB = 1 << 20


def read_detail(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def replay(detail: dict, prelude: tuple[int, ...] = (), without: tuple[str, ...] = ()) -> dict:
    """The model's reserve after the trace and the allocator's final empty_cache, its segments by size (MiB), and
    what was left out."""
    a = CachingAllocator()
    a.run(prelude)
    a.empty_cache()
    skip_sites = {i for i, s in enumerate(detail["sites"]) if any(t in s for t in without)}
    live: dict[int, int | None] = {}      # address -> the model's handle
    dropped = 0
    for action, size, addr, site in detail["events"]:
        if action == "alloc":
            if site in skip_sites:
                dropped += size
            else:
                live[addr] = a.malloc(size)
        elif action == "free_completed" and addr in live:     # not in it: a left-out allocation's free
            a.free(live.pop(addr))
        elif action == "segment_free":          # SGLang emptied the cache (empty_device_cache)
            a.empty_cache()
    a.empty_cache()
    return {"reserved_mib": a.reserved / MiB, "allocated_mib": round(a.allocated / MiB, 2),
            "segments_mib": dict(sorted(Counter(s // MiB for s in a.segment_sizes).items())),
            "left_out_mib": round(dropped / MiB, 2)}


def recorded(detail: dict) -> dict:
    """The snapshot's own reserve and segments by size (MiB), as alloc_snapshot.py read them."""
    segs = detail["segments"]
    return {"reserved_mib": sum(s["bytes"] for s in segs) / MiB,
            "segments_mib": dict(sorted(Counter(s["bytes"] // MiB for s in segs).items()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("detail", type=Path)
    ap.add_argument("--model", default="qwen3-coder-30b-a3b-instruct", help="catalog model: its expert-location maps")
    ap.add_argument("--without", action="append", default=[], metavar="TEXT")
    a = ap.parse_args()
    try:
        detail = read_detail(a.detail)
    except (OSError, ValueError, EOFError) as e:
        print(f"replay_trace: cannot read {a.detail}: {e}", file=sys.stderr)
        return 2
    out = {"recorded": recorded(detail),
           "model": replay(detail, expert_location_prelude(catalog.model(a.model)), tuple(a.without))}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
