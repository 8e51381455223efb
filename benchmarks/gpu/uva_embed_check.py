"""The token embeddings read from pinned host RAM by the GPU itself (UVA), a candidate lever for issue 18.

    python3 benchmarks/gpu/uva_embed_check.py --out R.json

At 16 GiB the moe preset's GPU holds Qwen3-Coder-30B-A3B's embed_tokens in bf16 (151,936 x 2,048: 0.58 GiB), a
little more than one MoE layer's FP8 experts (0.56 GiB); llama.cpp keeps its token embeddings in host RAM. A
decode step reads one row a token (4 KiB), a 4,096-token prompt chunk 16 MiB. This checks the mechanism on the
pinned torch before any server uses it: the table page-locked in host RAM, its host address used as a device
address (CUDA's unified addressing maps pinned memory into the GPU's address space), a CUDA tensor viewing it
through __cuda_array_interface__ (the kit's kt-kernel adapter's device_view, vramkit_host_embed.py, since), and
F.embedding over it. Measured: every gathered row bit-identical to the same
gather from a copy in GPU memory, the same inside a captured CUDA graph replayed on new token ids (SGLang captures
its decode step), the time of a 1-, 4- and 4,096-token gather against the GPU copy's, and the GPU memory the view
takes (none). No server, no SGLang: a kernel-level check, labelled so.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

VOCAB, HIDDEN = 151_936, 2_048     # Qwen3-Coder-30B-A3B's embed_tokens (config/models/qwen3-coder-30b-a3b-instruct)


sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "services" / "sglang-kt" / "kt_compat"))
from vramkit_host_embed import device_view  # noqa: E402  (the server's own: the kit's kt-kernel adapter)


def gather_ms(weight: torch.Tensor, tokens: int, reps: int = 20) -> float:
    ids = torch.randint(0, VOCAB, (tokens,), device="cuda")
    F.embedding(ids, weight)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        F.embedding(ids, weight)
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t) / reps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    host = torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16).pin_memory()
    before = torch.cuda.memory_allocated()
    try:
        view = device_view(host)
    except Exception as e:  # noqa: BLE001 (the one question this check asks first: does torch take the view at all)
        print(json.dumps(res := {"ok": False, "view_error": f"{type(e).__name__}: {e}", "torch": torch.__version__}))
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        return 1
    res: dict = {"view_device": str(view.device), "view_dtype": str(view.dtype),
                 "gpu_bytes_for_view": torch.cuda.memory_allocated() - before,
                 "table_bytes": host.numel() * host.element_size(),
                 "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    gpu = host.cuda()
    ids = torch.randint(0, VOCAB, (4096,), device="cuda")
    res["eager_bit_identical"] = bool(torch.equal(F.embedding(ids, view), F.embedding(ids, gpu)))
    # SGLang replays a captured decode step: the gather inside a graph, fed new ids each replay
    static = torch.zeros(4, dtype=torch.long, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        F.embedding(static, view)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = F.embedding(static, view)
    same = []
    for _ in range(8):
        static.copy_(torch.randint(0, VOCAB, (4,), device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        same.append(bool(torch.equal(out, gpu[static])))
    res["graph_replays_bit_identical"] = same
    res["gather_ms"] = {str(n): {"host_uva": round(gather_ms(view, n), 4), "gpu_copy": round(gather_ms(gpu, n), 4)}
                        for n in (1, 4, 4096)}
    res["ok"] = res["eager_bit_identical"] and all(same) and res["gpu_bytes_for_view"] == 0
    print(json.dumps(res))
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
