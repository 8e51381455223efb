"""Where a weight load's GPU memory went, from torch's CUDA memory snapshot (the adapter's VRAMKIT_CUDA_SNAPSHOT dumps
one at the end of SGLang's ModelRunner.load_model; issue 18: the marlin MoE load holds 0.06-0.07 GiB that the
planner's replay, core/memory/weight_load.py, does not place).

    python benchmarks/gpu/alloc_snapshot.py SNAPSHOT.pickle [--out R.json] [--detail D.json]

Reads the snapshot torch.cuda.memory._dump_snapshot writes (a pickled dict: "segments", each with its "blocks", and
"device_traces") and reports: what the caching allocator reserves and what is allocated in it; the free space it keeps
inside segments that are partly in use (empty_cache cannot give that back, so SGLang's "mem usage" counts it), segment
by segment, with the allocation that shares each one; and the live bytes by the SGLang source line that allocated them
(the first frame in sglang/, else the first frame); and, from the trace, the order in which segments were
created against their addresses: PyTorch takes the lowest-addressed of equal free blocks, and the planner's replay
assumes a newer segment lies higher. No GPU needed.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

MiB = 1 << 20


def site(frames: list[dict]) -> str:
    """The allocating line: the first frame in SGLang's code, else the first frame, else "?"."""
    for f in frames or ():
        if "sglang/" in str(f.get("filename", "")):
            return f"{f['filename'].split('sglang/', 1)[1]}:{f.get('line')} {f.get('name', '')}".strip()
    if frames:
        f = frames[0]
        return f"{f.get('filename')}:{f.get('line')} {f.get('name', '')}".strip()
    return "?"


def analyse(snap: dict, min_free_mib: float = 1.0) -> dict:
    segments = snap.get("segments", [])
    reserved = sum(s["total_size"] for s in segments)
    live: dict[str, int] = defaultdict(int)
    holes = []
    for s in segments:
        active = [b for b in s["blocks"] if b["state"].startswith("active")]
        free = sum(b["size"] for b in s["blocks"] if b["state"] == "inactive")
        for b in active:
            live[site(b.get("frames", []))] += b["size"]
        if active and free >= min_free_mib * MiB:       # a hole empty_cache cannot release
            biggest = max(active, key=lambda b: b["size"])
            holes.append({"segment_mib": round(s["total_size"] / MiB, 2), "free_mib": round(free / MiB, 2),
                          "shared_with": site(biggest.get("frames", [])), "segment_type": s.get("segment_type")})
    allocated = sum(live.values())
    holes.sort(key=lambda h: -h["free_mib"])
    return {"segments": len(segments), "reserved_mib": round(reserved / MiB, 2),
            "allocated_mib": round(allocated / MiB, 2),
            "free_in_used_segments_mib": round(sum(h["free_mib"] for h in holes), 2),
            "holes": holes[:40],
            "live_by_site_mib": {k: round(v / MiB, 2) for k, v in sorted(live.items(), key=lambda kv: -kv[1])[:40]}}


def segment_order(snap: dict) -> dict:
    """Whether each new segment lay above the one created before it (the replay's assumption: among equal free
    blocks the older segment wins, PyTorch's rule being the lower address), and how many were given back mid-load
    (empty_cache, after which CUDA may hand a lower address out again). From the recorded trace's segment events."""
    events = [e for trace in snap.get("device_traces", []) for e in trace
              if e.get("action") in ("segment_alloc", "segment_free")]
    allocs = [e for e in events if e["action"] == "segment_alloc"]
    higher = sum(1 for a, b in pairwise(allocs) if b["addr"] > a["addr"])
    by_size: dict[int, list[int]] = defaultdict(list)   # equal-size segments, in the order they were created
    for e in allocs:
        by_size[e["size"]].append(e["addr"])
    same = [(size, addrs) for size, addrs in by_size.items() if len(addrs) > 1]
    return {"segment_allocs": len(allocs), "segment_frees": len(events) - len(allocs),
            "created_above_the_previous": higher, "pairs": max(0, len(allocs) - 1),
            "equal_size_groups": len(same),
            "equal_size_groups_rising": sum(1 for _, a in same if all(y > x for x, y in pairwise(a)))}


def detail(snap: dict) -> dict:
    """Segment by segment, in address order, each block's size and the line that allocated it ("free" for a free
    one), and the recorded trace as compact events [action, bytes, address, site index]: what the replay
    (core/memory/torch_alloc.py) can be set beside allocation by allocation. Sites are listed once."""
    sites: dict[str, int] = {}

    def sid(frames: list[dict]) -> int:
        return sites.setdefault(site(frames), len(sites))
    segments = [{"address": s.get("address", 0), "bytes": s["total_size"], "type": s.get("segment_type"),
                 "blocks": [[b["size"], "free" if b["state"] == "inactive" else sid(b.get("frames", []))]
                            for b in s["blocks"]]}
                for s in sorted(snap.get("segments", []), key=lambda s: s.get("address", 0))]
    events = [[e["action"], e.get("size", 0), e.get("addr", 0), sid(e.get("frames", []))]
              for trace in snap.get("device_traces", []) for e in trace
              if e.get("action") in ("alloc", "free_requested", "segment_alloc", "segment_free", "free_completed")]
    return {"sites": list(sites), "segments": segments, "events": events}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--detail", type=Path, help="also write every segment's blocks and the trace's events here")
    a = ap.parse_args()
    try:
        with a.snapshot.open("rb") as f:
            snap = pickle.load(f)           # torch's own dump of this run, read back here
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        print(f"alloc_snapshot: cannot read {a.snapshot}: {e}", file=sys.stderr)
        return 2
    res = analyse(snap) | {"segment_order": segment_order(snap)}
    text = json.dumps(res, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    if a.detail:
        a.detail.write_text(json.dumps(detail(snap), separators=(",", ":")) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
