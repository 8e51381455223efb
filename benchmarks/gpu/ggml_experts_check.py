"""The kit's ggml CPU experts (services/sglang-kt/kt_compat: ggml_experts.c + vramkit_ggml_experts.py) checked without
a GPU: one MoE layer written to a GGUF as llama.cpp's Q4_K_M types it (Q4_K gate/up, Q6_K down, llama.cpp's own
quantizer), read back through the adapter's GGUF loader, computed by the shim's vk_run (the host function SGLang's
stream calls) for batches of 1..N tokens with random routing and a padded row (ids -1), and compared with numpy on the
values the blocks decode to. Every expert is distinct, so a wrong id, a wrong expert order or a dropped routing weight
shows. --experts keeps the quantizing short on a small host; the shapes per expert are the coder's.

    bash benchmarks/gpu/build_ggml.sh /tmp/ggml cpu
    python benchmarks/gpu/ggml_experts_check.py --lib-dir /tmp/ggml/lib-native --out R.json
    ... --threads 12 --full-layers 8      # + the shim's call at full shape, timed as ggml_moe_bench.py --per-layer
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "services" / "sglang-kt" / "kt_compat"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import vramkit_ggml_experts as vge  # noqa: E402
from ggml_quant import GGML_TYPES, Ggml  # noqa: E402

H, INTER, TOPK = 2048, 768, 8


def write_gguf(path: Path, g: Ggml, experts: int, rng) -> dict[str, np.ndarray]:
    """blk.0's three expert tensors, Q4_K_M-typed; returns each expert's decoded values [E, rows, cols]."""
    import gguf
    from gguf.quants import dequantize
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    decoded = {}
    for proj, (rows, cols), qt in (("gate", (INTER, H), "Q4_K"), ("up", (INTER, H), "Q4_K"),
                                   ("down", (H, INTER), "Q6_K")):
        blocks = np.stack([g.quantize((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32), qt)
                           for _ in range(experts)])
        kind = gguf.GGMLQuantizationType[qt]
        w.add_tensor(f"blk.0.ffn_{proj}_exps.weight", blocks, raw_dtype=kind)
        decoded[proj] = np.stack([dequantize(b, kind).reshape(rows, cols) for b in blocks]).astype(np.float64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return decoded


def reference(dec: dict[str, np.ndarray], x: np.ndarray, ids: np.ndarray, wts: np.ndarray) -> np.ndarray:
    out = np.zeros((x.shape[0], H))
    for t in range(x.shape[0]):
        for e, r in zip(ids[t], wts[t], strict=True):
            if e < 0:
                continue
            g, u = dec["gate"][e] @ x[t], dec["up"][e] @ x[t]
            out[t] += r * (dec["down"][e] @ (g / (1 + np.exp(-g)) * u))
    return out


def time_full_shape(eng, g: Ggml, n_layers: int, rng, tokens: int = 24, experts: int = 128) -> dict:
    """The shim's decode call at the coder's full shape, timed as ggml_moe_bench.py --per-layer times ggml's layer
    (`n_layers` distinct Q4_K layers cycled through 48 a token, random routing, one token): each layer's tensors hold
    one expert's blocks repeated for all 128 (the kernels' work does not depend on the values)."""
    layers = []
    for _ in range(n_layers):
        blocks = {}
        for proj, (rows, cols) in (("gate", (INTER, H)), ("up", (INTER, H)), ("down", (H, INTER))):
            one = g.quantize((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32), "Q4_K")
            blocks[proj] = (GGML_TYPES["Q4_K"], np.ascontiguousarray(np.broadcast_to(one, (experts, *one.shape))))
        layers.append(eng.layer(blocks, experts, TOPK, H, INTER))
    x = (rng.standard_normal((1, H)) * 0.1).astype(np.float32)
    ids, w = np.zeros((1, TOPK), dtype=np.int32), np.full((1, TOPK), 1 / TOPK, dtype=np.float32)
    out = np.zeros((1, H), dtype=np.float32)
    jobs = [eng.shim.vk_job_new(lay, 1, x.ctypes.data, ids.ctypes.data, w.ctypes.data, out.ctypes.data)
            for lay in layers]
    per_token = []
    for t in range(tokens + 4):
        routes = [rng.permutation(experts)[:TOPK].astype(np.int32) for _ in range(48)]
        t0 = time.perf_counter()
        for li in range(48):
            ids[0] = routes[li]
            eng.shim.vk_run(jobs[li % n_layers])
        if t >= 4:
            per_token.append(time.perf_counter() - t0)
    per_token.sort()
    return {"layers": n_layers, "experts": experts, "type": "Q4_K", "tokens": tokens,
            "ms_per_layer": round(1e3 * per_token[len(per_token) // 2] / 48, 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib-dir", type=Path, required=True, help="build_ggml.sh DIR cpu: DIR/lib-native")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", default="1,2,4,9")
    ap.add_argument("--full-layers", type=int, default=0,
                    help="also time the decode call at full shape on this many distinct Q4_K layers (0: not)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    g = Ggml(str(a.lib_dir / "libggml-base.so"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layer.gguf"
        dec = write_gguf(path, g, a.experts, rng)
        from gguf import GGUFReader
        blocks = vge.gguf_blocks(GGUFReader(str(path)), 0, a.experts, H, INTER)
        eng = vge.Engine(vge.Shim(a.lib_dir), a.threads, report_every=0)
        layer = eng.layer(blocks, a.experts, TOPK, H, INTER)
        repacked = [eng.shim.vk_layer_repacked(layer, i) for i in range(3)]
    from gguf import GGMLQuantizationType
    types = {p: GGMLQuantizationType(blocks[p][0]).name for p in vge.PROJ}
    res = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "ggml": g.version, "experts": a.experts, "topk": TOPK,
           "hidden": H, "moe_intermediate": INTER, "types": types, "repacked": dict(zip(vge.PROJ, repacked, strict=True)),
           "threads": a.threads, "rows": []}
    from kt_decode_bench import host
    res["host"] = host()
    for n in (int(t) for t in a.tokens.split(",")):
        x = (rng.standard_normal((n, H)) * 0.5).astype(np.float32)
        ids = np.stack([rng.permutation(a.experts)[:TOPK] for _ in range(n)]).astype(np.int32)
        wts = rng.random((n, TOPK)).astype(np.float32)
        if n > 1:
            ids[-1, TOPK // 2:] = -1          # a padded row's tail: skipped, whatever its weight
        out = np.zeros((n, H), dtype=np.float32)
        job = eng.shim.vk_job_new(layer, n, x.ctypes.data, ids.ctypes.data, wts.ctypes.data, out.ctypes.data)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            eng.shim.vk_run(job)
            times.append(time.perf_counter() - t0)
        ref = reference(dec, x.astype(np.float64), ids, wts)
        err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
        row = {"tokens": n, "rel_l2_vs_numpy": round(err, 5), "ms_median": round(1e3 * sorted(times)[2], 3)}
        res["rows"].append(row)
        print(json.dumps(row), flush=True)
    if a.full_layers:
        res["full_shape"] = time_full_shape(eng, g, a.full_layers, rng)
        print(json.dumps({"full_shape": res["full_shape"]}), flush=True)
    res["calls"], res["ok"] = eng.stats()[0], all(r["rel_l2_vs_numpy"] < 0.03 for r in res["rows"])
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"ok": res["ok"], "repacked": res["repacked"], "types": types}))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
