"""Host memory read bandwidth, measured: what bounds CPU-expert decode (issue 12).

A MoE decode step on the CPU reads every active CPU expert's weights once, so its time is about
active_cpu_expert_bytes / read bandwidth. This streams a buffer much larger than the last-level cache
through a reduction (torch's CPU sum runs on `threads` threads, memory-bound at these sizes) and
reports the best of `repeats` passes in bytes/s. Ground truth: the same quantity STREAM's "sum"/"read"
kernels report; expect ~70-85 % of the DIMMs' theoretical peak.
"""
from __future__ import annotations

import time


def read_bandwidth(threads: int, size_bytes: int = 2 << 30, repeats: int = 5) -> dict:
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        buf = torch.ones(size_bytes // 4, dtype=torch.float32)
        buf.sum()                                  # touch every page once before timing
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            buf.sum()
            best = min(best, time.perf_counter() - t0)
        return {"threads": threads, "bytes": buf.numel() * 4, "seconds": best,
                "bytes_per_s": int(buf.numel() * 4 / best)}
    finally:
        torch.set_num_threads(old)


def sweep(thread_counts: list[int], size_bytes: int = 2 << 30) -> list[dict]:
    """Bandwidth at each thread count (one core reads far less than the socket can deliver)."""
    return [read_bandwidth(t, size_bytes) for t in thread_counts]
