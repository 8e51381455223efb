"""The adapter's int4 CPU-expert kernel (services/sglang-kt/kt_compat/int4_experts.c) alone: its time for one CPU
layer's decode batch, by thread count and batch size, and the host read rate that time means (issue 18).

    python3 benchmarks/gpu/int4_experts_bench.py --threads 12,8,4 --batches 1,4 --out R.json

Qwen3-Coder-30B-A3B's MoE layer at its full shape (128 experts of 2048 x 768, top-8, GPTQ group 128), --layers
distinct random layers (default 12: 3.6 GB, far past any L3, cycled as a token's CPU layers are), random routing
each call, the call made as the server's host function makes it (v4_run on the calling thread, the pool's workers
pinned). Reported per (threads, batch): ms a layer call (median and best of --calls), the bytes the call's distinct
experts hold, and their rate. A kernel-level figure without SGLang, the GPU or the copies: the server's decode is
measured in a server run, not derived from this.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "services" / "sglang-kt" / "kt_compat"))
import vramkit_gpu_prefill as gp  # noqa: E402
import vramkit_int4_experts as vi  # noqa: E402

E, H, INTER, TOPK, GROUP = 128, 2048, 768, 8, 128


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="12")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--calls", type=int, default=240)
    ap.add_argument("--lib-dir", default=None)
    ap.add_argument("--isa", choices=sorted(vi.ISA_FLAGS), default="native",
                    help="the build: this CPU's own (-march=native), or AVX2 forced (what an AVX2-only desktop runs)")
    ap.add_argument("--source", type=Path, default=vi.SOURCE,
                    help="the kernel's C source to build (default: the adapter's; another revision for a before/after)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    lib = vi.Lib(vi.build(a.lib_dir, cflags=vi.cflags({vi.ISA_ENV: a.isa}), source=a.source))
    rng = np.random.default_rng(0)
    raws = [gp.dummy_gptq(i, H, INTER, E, GROUP) for i in range(a.layers)]
    rows = []
    for threads in (int(t) for t in a.threads.split(",")):
        k = vi.Kernel(lib, threads, report_every=0)
        layers = [k.layer(r, E, TOPK, H, INTER, GROUP) for r in raws]
        expert_bytes = lib.v4_layer_bytes(layers[0]) // E      # the kernel's own: w13 and w2 words, float16 scales
        for n in (int(b) for b in a.batches.split(",")):
            x = rng.standard_normal((n, H)).astype(np.float32)
            w = rng.random((n, TOPK)).astype(np.float32)
            out = np.zeros((n, H), np.float32)
            ids = np.zeros((n, TOPK), np.int32)
            jobs = [k.job(p, n, x.ctypes.data, ids.ctypes.data, w.ctypes.data, out.ctypes.data) for p in layers]
            times, distinct = [], []
            for c in range(a.calls + a.layers):           # the first pass over the layers warms the pool
                ids[:] = np.stack([rng.choice(E, TOPK, replace=False) for _ in range(n)])
                t0 = time.perf_counter()
                lib.v4_run(jobs[c % a.layers])
                dt = time.perf_counter() - t0
                if c >= a.layers:
                    times.append(dt)
                    distinct.append(len(np.unique(ids)))
            med = statistics.median(times)
            bytes_read = statistics.mean(distinct) * expert_bytes
            rows.append({"threads": threads, "batch": n, "ms_median": round(med * 1e3, 4),
                         "ms_best": round(min(times) * 1e3, 4), "distinct_experts_mean": statistics.mean(distinct),
                         "bytes_per_call": round(bytes_read), "read_gb_s_at_median": round(bytes_read / med / 1e9, 1)})
            print(json.dumps(rows[-1]), flush=True)
        # the pool and layers of this count stay until exit (a bench process; the server keeps one pool)
    doc = {"what": __doc__.split("\n\n")[0], "isa": lib.isa, "isa_asked": a.isa,
           "source_sha256": hashlib.sha256(a.source.read_bytes()).hexdigest()[:16],
           "cpu": (vi._cpu_id().splitlines() or [platform.processor()])[0], "cpus": os.cpu_count(), "layers": a.layers, "calls": a.calls,
           "shape": {"experts": E, "hidden": H, "inter": INTER, "top_k": TOPK, "group": GROUP},
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
