"""A CPU layer's decode batch split between the host's cores and the GPU reading the layer over the bus (issue 18: the
4-stream goal; the adapter's opt-in VRAMKIT_INT4_GPU_SHARE, vramkit_gpu_share.py), timed without a server on the GPU
host.

    python3 benchmarks/gpu/gpu_share_bench.py --threads 12 --batches 1,2,4 --shares 0.2,0.3,0.4 --pin register-thp \
        --out R.json

Why: at 4 streams a 16 GiB step is ~11 ms of waiting for 10 CPU layers, each bound by the host's read rate
(moe-vs-llamacpp-int4/r7-prof/). The GPU prompt path already keeps each CPU layer's experts in marlin's layout in
pinned host RAM (vramkit_gpu_prefill.py); under unified addressing the GPU can read them where they are. So a share
of each call's distinct experts can be computed by SGLang's own marlin MoE on the GPU, their weights read over PCIe,
while the int4 kernel computes the rest on the CPU: two memory systems read at once.

What runs: --layers random GPTQ layers of Qwen3-Coder-30B-A3B's shape (128 experts, hidden 2048, expert width 768,
group 128), cycled as a token's CPU layers are (3 GB past any cache), each with the int4 kernel's copy and a marlin
copy pinned as --pin says; routing drawn afresh for every call (8 of 128 a token). Each variant is a CUDA graph of one
call per layer through the adapter's own HostExperts, as the server's decode graph holds them, replayed --reps times
with new routing copied in before each replay; the figure is the median replay divided by the layers:
- ``cpu``: the server's path without a share: inputs copied to pinned buffers, the kernel as one host function
  (v4_run), the output copied back;
- ``share_F``: the lowest-numbered F of the call's distinct experts on the GPU (split_ids), the kernel started
  (v4_start, a host function that returns), marlin on the GPU's slots through a device view of the pinned copy, the
  kernel waited for (v4_wait), the two outputs added;
- ``gpu_bus_F``: marlin alone on the GPU's slots over the bus; ``cpu_rest_F``: the kernel alone on the CPU's slots.
First a check: marlin over the bus against over a GPU copy of the layer, and the split's output against the CPU
kernel's (float32), eager and in replayed CUDA graphs (relative L2: float16 rounding).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "services" / "sglang-kt" / "kt_compat"))
E, H, INTER, TOPK, GROUP = 128, 2048, 768, 8, 128


def raw_layer(seed: int) -> dict:
    """Random GPTQ words and scales of gpu_prefill_bench's magnitude (float16 outputs stay normal)."""
    import torch
    import vramkit_gpu_prefill as gp
    gen = torch.Generator().manual_seed(seed)
    return {name: (torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32, generator=gen) if dtype == "int32"
                   else (torch.rand(shape, generator=gen) * 2e-2 + 1e-3).half())
            for name, (shape, dtype) in gp.shapes(H, INTER, E, GROUP).items()}


def bench(a) -> dict:
    import torch
    import vramkit_gpu_prefill as gp
    import vramkit_int4_experts as vi
    from vramkit_gpu_share import ENV as share_env
    from vramkit_gpu_share import BusExperts, split_ids
    from vramkit_host_experts import HostExperts, Share
    try:    # as gpu_prefill_bench: what the server's start imports first
        import flashinfer.comm  # noqa: F401
    except ImportError:
        pass
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig

    # before to_marlin's repack import: SGLang's quantization package imports in this order in a server (the repack's
    # module first gave a circular import, measured on the H200 host)
    from sglang.srt.layers.moe.moe_runner.marlin import MarlinMoeQuantInfo  # noqa: F401
    from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput  # noqa: F401
    from sglang.srt.layers.moe.topk import StandardTopKOutput  # noqa: F401

    # the host copies pinned by the adapter's own GpuPrefill._pin, as --pin says: PyTorch's allocator, or registered
    # (the server's default), on transparent huge pages where the share is on (register-thp) and 4 KiB pages where not
    engine = gp.GpuPrefill(1, {"hidden_size": H, "moe_intermediate_size": INTER, "num_experts": E,
                               "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": GROUP}},
                           "", dummy=False)
    engine.pin = "alloc" if a.pin == "alloc" else "register"
    os.environ.pop(share_env, None)
    if a.pin == "register-thp":
        os.environ[share_env] = "0.3"

    t0 = time.monotonic()
    lib = vi.Lib(vi.build(cflags=vi.cflags({vi.ISA_ENV: a.isa})))
    kern = vi.Kernel(lib, a.threads, report_every=0)
    if lib.v4_pool_async(kern.pool) != 0:
        raise RuntimeError("the kernel's coordinator thread did not start")
    cpu_layers, bus, gpu_copy = [], [], None
    for i in range(a.layers):
        raw = raw_layer(i)
        cpu_layers.append(kern.layer(raw, E, TOPK, H, INTER, GROUP))
        m = gp.to_marlin(raw, H, INTER, GROUP)
        if gpu_copy is None:
            gpu_copy = BusExperts(m, E, view=lambda t: t)     # layer 0 also from GPU memory: the bus read's check
        bus.append(BusExperts({k: engine._pin(v.cpu()) for k, v in m.items()}, E))
        del raw, m
    torch.cuda.synchronize()
    setup_s = time.monotonic() - t0
    cfg = MoeRunnerConfig()
    gen = torch.Generator(device="cuda").manual_seed(0)
    fracs = [float(f) for f in a.shares.split(",") if float(f) > 0]
    out: dict = {"setup_s": round(setup_s, 1), "check": {}, "ms_per_layer": {}}

    def one_batch(n: int) -> None:
        x = (torch.randn(n, H, device="cuda", generator=gen) * 0.1).half()
        ids = torch.zeros(n, TOPK, dtype=torch.int32, device="cuda")
        w = torch.zeros(n, TOPK, dtype=torch.float32, device="cuda")

        def host(layer: int, frac: float | None) -> HostExperts:
            """The adapter's CPU-layer wrapper as the server builds it, with or without the GPU's share."""
            share = None if frac is None else Share(bus[layer], frac, lib.start_ptr, lib.wait_ptr)
            h = HostExperts(None, lib.run_ptr, lambda m, *p, lay=cpu_layers[layer]: kern.job(lay, m, *p), H, TOPK,
                            16, share)
            h.runner_config = cfg
            return h

        def route():
            logits = torch.rand(n, E, device="cuda", generator=gen)
            top = torch.softmax(logits, -1).topk(TOPK, -1)
            ids.copy_(top.indices.to(torch.int32))
            w.copy_(top.values)

        def call(h: HostExperts, topk_ids=None):
            stream = torch.cuda.current_stream().cuda_stream
            h.submit_forward(x, ids if topk_ids is None else topk_ids, w, stream)
            return h.sync_forward(x, stream)

        alone = [host(i, None) for i in range(a.layers)]
        shared = {f: [host(i, f) for i in range(a.layers)] for f in fracs}
        # the check, eager, on layer 0
        route()
        full = call(alone[0]).float()
        over_bus, on_gpu = bus[0].run(x, ids, w, cfg).float(), gpu_copy.run(x, ids, w, cfg).float()
        torch.cuda.synchronize()
        chk = {"bus_vs_gpu_copy_rel_l2": round(float((over_bus - on_gpu).norm() / on_gpu.norm()), 6),
               "marlin_vs_cpu_rel_l2": round(float((on_gpu - full).norm() / full.norm()), 5)}
        for f in fracs:
            got = call(shared[f][0]).float()
            g_ids, c_ids = split_ids(ids, f, E)
            torch.cuda.synchronize()
            chk[f"share_{f}_vs_cpu_rel_l2"] = round(float((got - full).norm() / full.norm()), 5)
            chk[f"share_{f}_gpu_experts"] = int(torch.unique(g_ids[g_ids >= 0]).numel())
            chk[f"share_{f}_cpu_experts"] = int(torch.unique(c_ids[c_ids >= 0]).numel())

        def captured(body):
            """`body` captured in a CUDA graph after an eager warm-up (marlin's workspace, the kernel's jobs), and its
            static output."""
            body()
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                o = body()
            return g, o
        # the same in replayed graphs, the server's way: each with fresh routing copied in before the replays
        graphs = {"cpu": captured(lambda: call(alone[0]))} | {
            f: captured(lambda f=f: call(shared[f][0])) for f in fracs}
        route()
        for g, _o in graphs.values():
            g.replay()
        torch.cuda.synchronize()
        ref = graphs["cpu"][1].float()
        for f in fracs:
            chk[f"graph_share_{f}_vs_cpu_rel_l2"] = round(float((graphs[f][1].float() - ref).norm() / ref.norm()), 5)
        del graphs
        out["check"][str(n)] = chk

        def graph_ms(body) -> float:
            g, _o = captured(lambda: [body(layer) for layer in range(a.layers)])
            times = []
            for _ in range(a.reps):
                route()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                g.replay()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) / a.layers)
            del g
            return round(statistics.median(times), 4)

        row = {"cpu": graph_ms(lambda layer: call(alone[layer]))}
        for f in fracs:
            row[f"share_{f}"] = graph_ms(lambda layer, f=f: call(shared[f][layer]))
            row[f"gpu_bus_{f}"] = graph_ms(lambda layer, f=f: bus[layer].run(x, split_ids(ids, f, E)[0], w, cfg))
            row[f"cpu_rest_{f}"] = graph_ms(lambda layer, f=f: call(alone[layer], split_ids(ids, f, E)[1]))
        out["ms_per_layer"][str(n)] = row
        print(json.dumps({n: row}), flush=True)

    for n in (int(b) for b in a.batches.split(",")):
        one_batch(n)
    out |= {"device": torch.cuda.get_device_name(0), "pin": a.pin, "threads": kern.threads, "isa": lib.isa, "layers": a.layers,
            "reps": a.reps, "shape": {"experts": E, "hidden": H, "inter": INTER, "top_k": TOPK, "group": GROUP},
            "expert_bytes_marlin": sum(t.numel() * t.element_size() for t in bus[0].host.values()) // E,
            "torch": torch.__version__, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "how": "benchmarks/gpu/gpu_share_bench.py: the adapter's HostExperts (with and without the GPU's share, "
                   "vramkit_gpu_share) in CUDA graphs of one call per layer, median replay / layers"}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=12)
    ap.add_argument("--batches", default="1,2,4")
    ap.add_argument("--shares", default="0.3,0.4,0.5",
                    help="fractions of each call's distinct experts computed on the GPU over the bus "
                         "(VRAMKIT_INT4_GPU_SHARE)")
    ap.add_argument("--layers", type=int, default=10, help="distinct layers cycled (the 16 GiB preset's CPU layers)")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--pin", choices=("alloc", "register", "register-thp"), default="register",
                    help="how the layers' host copies are pinned (the server's default: register; register-thp: the "
                         "same, of memory backed by transparent huge pages)")
    ap.add_argument("--isa", choices=("native", "avx2", "masked"), default="native")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_share_bench: no CUDA device here", file=sys.stderr)
        return 3
    try:
        res = bench(a)
    except Exception as exc:     # noqa: BLE001 -- the GPU host's failure, written down for the run's record
        traceback.print_exc()
        res = {"error": f"{type(exc).__name__}: {exc}"}
    text = json.dumps(res, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)
    return 3 if "error" in res else 0


if __name__ == "__main__":
    sys.exit(main())
