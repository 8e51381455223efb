"""How much one host-read sweep moves from one moment to the next on an idle machine (issue 18: the estimate's host-read
input). The GPU host's virtual machines gave sweeps that disagreed by up to a third at one thread count, taken minutes
apart beside servers (fit_kt.py's host-read section); this takes one-round sweeps back to back on a machine running
nothing else, until `--seconds` have passed, and writes each with its start time, the device line and the date.

    python3 benchmarks/gpu/membw_noise.py --seconds 150 --out membw-noise.json

No GPU needed (the host's memory only); run on the GPU host, where the estimate's sweeps were taken.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from vramkit.adapters import membw  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=150.0, help="keep sweeping until this many seconds have passed")
    ap.add_argument("--threads", default="4,8,12,14,16", help="thread counts, comma-separated")
    ap.add_argument("--gib", type=float, default=4.0, help="buffer size, GiB")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    counts = [int(t) for t in a.threads.split(",")]
    size = int(a.gib * 2**30)
    t0, sweeps, rec = time.monotonic(), [], {}
    while time.monotonic() - t0 < a.seconds:
        at = round(time.monotonic() - t0, 1)
        sweeps.append({"t_s": at, "runs": membw.sweep(counts, size)})
        rec = record(counts, size, sweeps)
        a.out.write_text(json.dumps(rec, indent=1) + "\n")   # a machine lost keeps what ran
    print(json.dumps(rec.get("by_threads", {})))
    return 0


def record(counts: list[int], size: int, sweeps: list[dict]) -> dict:
    """The sweeps and, per thread count, the least, greatest and median reading (GB/s)."""
    by = {}
    for t in counts:
        xs = sorted(r["bytes_per_s"] / 1e9 for s in sweeps for r in s["runs"] if r["threads"] == t)
        by[str(t)] = {"n": len(xs), "min_gbs": round(xs[0], 1), "median_gbs": round(xs[len(xs) // 2], 1),
                      "max_gbs": round(xs[-1], 1), "max_over_min": round(xs[-1] / xs[0], 3)}
    return {"what": "one-round host-read sweeps back to back on an idle machine (benchmarks/gpu/membw_noise.py)",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "device": os.environ.get("VRAMKIT_DEVICE_LABEL", platform.node()), "cpus": os.cpu_count(),
            "size_bytes": size, "by_threads": by, "sweeps": sweeps}


if __name__ == "__main__":
    sys.exit(main())
