"""Host memory read bandwidth, measured: what bounds CPU-expert decode (issue 12).

A MoE decode step on the CPU reads every active CPU expert's weights once, so its time is about
active_cpu_expert_bytes / read bandwidth. This streams a buffer much larger than the last-level cache
through a reduction (torch's CPU sum runs on `threads` threads, memory-bound at these sizes) and
reports the best of `repeats` passes in bytes/s. Ground truth: the same quantity STREAM's "sum"/"read"
kernels report; expect ~70-85 % of the DIMMs' theoretical peak.

`sweep(..., rounds=N)` measures every thread count N times, round after round, and keeps each count's best: one
round takes each count's passes within a fraction of a second, and on the GPU host's virtual machines such a sweep
was not monotone in the thread count (2026-11-28: 78 GB/s at 12 threads and 123 at 14 on one machine, 95 and 80 on
another; benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-*/membw-session.json). `sweep_pinned` runs the same sweep
in a child process whose OpenMP threads are bound one to a core (OMP_PROC_BIND=close, OMP_PLACES=cores), as
kt-kernel binds its worker pool. The decode estimate's constants were fitted on the H100 host's one-round sweep,
which was monotone; on the H200 machines each thread count's best reading of the session halved the estimate's error
against the one-round sweep, and on a machine not used to choose that rule took it from 15.9 % to 4.5 %
(benchmarks/results/gpu/kt-estimate.md, last section), so `vramkit host --bandwidth` keeps each count's best of
HOST_ROUNDS rounds: on a quiet desktop that is the one round's figure. Each record also keeps the count's slowest
round, so the command can say when the rounds disagree (NOISY_SPREAD).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

PINNED_ENV = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
# `vramkit host --bandwidth`: each thread count's best of this many rounds. An idle H200 machine of the GPU host gave 29
# one-round sweeps in 140 s whose 12-thread readings fell in two modes, ~70 and ~97-105 GB/s, the high one in 11
# (benchmarks/results/gpu/membw-noise/h200.json): five rounds miss it about one time in ten, three one in four
HOST_ROUNDS = 5
# rounds whose best reading is this much above their slowest at one thread count: a host whose read varies (other
# work, a virtual machine); the H200 machines' rounds disagreed by up to ~50 %, a quiet host's by a few per cent
NOISY_SPREAD = 0.20


def _best_pass(buf, threads: int, repeats: int) -> float:
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            buf.sum()
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        torch.set_num_threads(old)


def _touched(size_bytes: int):
    import torch
    buf = torch.ones(size_bytes // 4, dtype=torch.float32)
    buf.sum()                                      # touch every page once before timing
    return buf


def _record(threads: int, nbytes: int, seconds: float) -> dict:
    return {"threads": threads, "bytes": nbytes, "seconds": seconds, "bytes_per_s": int(nbytes / seconds)}


def read_bandwidth(threads: int, size_bytes: int = 2 << 30, repeats: int = 5) -> dict:
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        buf = _touched(size_bytes)
    finally:
        torch.set_num_threads(old)
    return _record(threads, buf.numel() * 4, _best_pass(buf, threads, repeats))


def sweep(thread_counts: list[int], size_bytes: int = 2 << 30, rounds: int = 1) -> list[dict]:
    """Bandwidth at each thread count (one core reads far less than the socket can deliver). rounds > 1: one buffer,
    every count measured once per round, round after round, each count's best kept."""
    if rounds <= 1:
        return [read_bandwidth(t, size_bytes) for t in thread_counts]
    buf = _touched(size_bytes)
    best = {t: float("inf") for t in thread_counts}
    slowest = dict.fromkeys(thread_counts, 0.0)
    for _ in range(rounds):
        for t in thread_counts:
            s = _best_pass(buf, t, 5)
            best[t], slowest[t] = min(best[t], s), max(slowest[t], s)
    nbytes = buf.numel() * 4
    return [_record(t, nbytes, s) | {"rounds": rounds, "slowest_bytes_per_s": int(nbytes / slowest[t])}
            for t, s in best.items()]


def widest_spread(runs: list[dict]) -> dict | None:
    """The thread count whose rounds disagreed most (best reading over slowest, less 1), None for one-round runs."""
    spread = [r | {"spread": r["bytes_per_s"] / r["slowest_bytes_per_s"] - 1} for r in runs
              if r.get("slowest_bytes_per_s")]
    return max(spread, key=lambda r: r["spread"]) if spread else None


def sweep_pinned(thread_counts: list[int], size_bytes: int = 2 << 30, rounds: int = 3,
                 timeout_s: float = 600) -> list[dict]:
    """`sweep` in a child process with its OpenMP threads bound one to a core (the binding is read when the runtime
    starts, so it cannot be set in this process once torch has run)."""
    env = os.environ | PINNED_ENV
    done = subprocess.run([sys.executable, "-m", "vramkit.adapters.membw", json.dumps(
        {"threads": thread_counts, "size_bytes": size_bytes, "rounds": rounds})],
        env=env, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(f"pinned sweep failed: {last}")
    return [r | {"pinned": PINNED_ENV} for r in json.loads(done.stdout)]


if __name__ == "__main__":
    a = json.loads(sys.argv[1])
    print(json.dumps(sweep(a["threads"], a["size_bytes"], a["rounds"])))
