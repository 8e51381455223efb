"""llama.cpp's own CPU MoE layer per decoded token, timed as kt_decode_bench.py times kt-kernel's (issue 18: is there a
CPU-expert path at llama.cpp's per-layer time, 0.41 ms in its server on the GPU host, that the kit could call?).

    bash benchmarks/gpu/build_ggml.sh /tmp/ggml cpu        # libggml-base + libggml-cpu for this CPU (GGML_NATIVE)
    python3 benchmarks/gpu/ggml_moe_bench.py --lib-dir /tmp/ggml/lib-native --threads 12 --out R.json

Qwen3-Coder-30B-A3B's MoE layer at full shape (128 experts of 2048 x 768, top-8; Q4_K, or --type Q8_0), --layers
distinct layers cycled through 48 per token in ONE graph on a persistent thread pool, as llama.cpp computes a token
(common.cpp attaches a ggml_threadpool); --per-layer calls one graph a layer instead, the hidden state copied in and
out each time, as the kit's adapter behind SGLang's KT wrapper would. Each layer is the node list llama.cpp's
build_moe_ffn gives a Qwen3-MoE layer at one token: mul_mat_id for up and gate, swiglu, mul_mat_id for down, the
routing weights, the sum of the 8 experts' views (after the layer's rms_norm, which keeps 48 chained layers' values in
range). The weights sit in the buffer type llama.cpp gives CPU weights: CPU_REPACK where this CPU has its kernels
(Q4_K -> q4_K_8x8 on AVX2 and up), else the plain CPU buffer (--buffer cpu forces that one). Random ids and routing
weights per token and layer, set before each timed compute. Each tensor holds one expert's random blocks of its type
(llama.cpp's own quantizer) repeated for its 128 experts: the kernels' work does not depend on the values, every
expert still has its own memory, and a layer's output can be checked against numpy on the decoded values
(layer_rel_l2_vs_numpy: the activations' Q8_K rounding, no more). Reported: ms of CPU-expert work per token (48
layers) and per layer; no GPU, no server.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ggml_quant import GGML_TYPES, Ggml  # noqa: E402

E, H, INTER, TOPK, MOE_LAYERS = 128, 2048, 768, 8, 48
F32, I32 = 0, 26                                 # enum ggml_type (ggml/include/ggml.h)
EPS = 1e-6                                       # the coder's rms_norm_eps


class InitParams(ctypes.Structure):              # struct ggml_init_params
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class Lib:
    """The ggml calls the bench makes, typed (every handle a void pointer)."""

    P = ctypes.c_void_p
    SIGS = {   # name: (restype, argtypes)
        "ggml_init": (P, [InitParams]), "ggml_tensor_overhead": (ctypes.c_size_t, []),
        "ggml_graph_overhead_custom": (ctypes.c_size_t, [ctypes.c_size_t, ctypes.c_bool]),
        "ggml_new_tensor_2d": (P, [P, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]),
        "ggml_new_tensor_3d": (P, [P, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
        "ggml_reshape_3d": (P, [P, P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
        "ggml_view_2d": (P, [P, P, ctypes.c_int64, ctypes.c_int64, ctypes.c_size_t, ctypes.c_size_t]),
        "ggml_mul_mat_id": (P, [P, P, P, P]), "ggml_swiglu_split": (P, [P, P, P]),
        "ggml_mul": (P, [P, P, P]), "ggml_add": (P, [P, P, P]), "ggml_rms_norm": (P, [P, P, ctypes.c_float]),
        "ggml_set_input": (None, [P]), "ggml_set_output": (None, [P]),
        "ggml_nbytes": (ctypes.c_size_t, [P]), "ggml_new_graph_custom": (P, [P, ctypes.c_size_t, ctypes.c_bool]),
        "ggml_build_forward_expand": (None, [P, P]), "ggml_graph_n_nodes": (ctypes.c_int, [P]),
        "ggml_backend_cpu_buffer_type": (P, []), "ggml_backend_buft_name": (ctypes.c_char_p, [P]),
        "ggml_backend_alloc_ctx_tensors_from_buft": (P, [P, P]),
        "ggml_backend_tensor_set": (None, [P, P, ctypes.c_size_t, ctypes.c_size_t]),
        "ggml_backend_tensor_get": (None, [P, P, ctypes.c_size_t, ctypes.c_size_t]),
        "ggml_gallocr_new": (P, [P]), "ggml_gallocr_alloc_graph": (ctypes.c_bool, [P, P]),
        "ggml_backend_graph_compute": (ctypes.c_int, [P, P]),
        "ggml_backend_reg_dev_get": (P, [P, ctypes.c_size_t]),
        "ggml_backend_reg_get_proc_address": (P, [P, ctypes.c_char_p]),
        "ggml_threadpool_params_init": (None, [P, ctypes.c_int]),
        # libggml-cpu
        "ggml_backend_cpu_init": (P, []), "ggml_backend_cpu_set_n_threads": (None, [P, ctypes.c_int]),
        "ggml_backend_cpu_set_threadpool": (None, [P, P]), "ggml_backend_cpu_reg": (P, []),
        "ggml_threadpool_new": (P, [P]), "ggml_cpu_has_avx2": (ctypes.c_int, []),
    }

    def __init__(self, lib_dir: Path):
        self.base_path = str(lib_dir / "libggml-base.so")
        libs = [ctypes.CDLL(self.base_path, mode=ctypes.RTLD_GLOBAL),
                ctypes.CDLL(str(lib_dir / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)]
        for name, (res, args) in self.SIGS.items():
            fn = next(getattr(lib, name) for lib in libs if hasattr(lib, name))
            fn.restype, fn.argtypes = res, args
            setattr(self, name, fn)

    def extra_bufts(self) -> dict[str, int]:
        """The CPU device's extra buffer types by name (llama.cpp puts CPU weights in the first that takes them)."""
        reg = self.ggml_backend_cpu_reg()
        addr = self.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
        if not addr:
            return {}
        get = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(addr)
        arr, out, i = get(self.ggml_backend_reg_dev_get(reg, 0)), {}, 0
        while arr and arr[i]:
            out[self.ggml_backend_buft_name(arr[i]).decode()] = arr[i]
            i += 1
        return out


def check(w: dict, x: np.ndarray, out: np.ndarray) -> float:
    """The first layer's output against numpy on the values the blocks decode to: every expert of a tensor holds the
    same blocks and the routing weights sum to 1, so the layer is down(silu(gate n) * up n), n = rms_norm(x), whatever
    the ids. (Only the first: 48 random layers chained amplify the activations' rounding until nothing compares.)"""
    x = x.astype(np.float64)
    n = x / np.sqrt(np.mean(x * x) + EPS)
    g, u = w["gate"] @ n, w["up"] @ n
    ref = w["down"] @ (g / (1 + np.exp(-g)) * u)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def build(lib: Lib, seq: list[dict], n_tok: int = 1) -> dict:
    """A graph of the layers in `seq` (weights of each) for `n_tok` tokens, llama.cpp's build_moe_ffn node list per
    layer, allocated: its input x, each layer's ids and routing weights, the first layer's output and the last's."""
    n_graph = 64 * len(seq)
    ctx = lib.ggml_init(InitParams(lib.ggml_tensor_overhead() * 40 * len(seq)
                                   + lib.ggml_graph_overhead_custom(n_graph, False), None, True))
    x = lib.ggml_new_tensor_2d(ctx, F32, H, n_tok)
    lib.ggml_set_input(x)
    cur, ids, wts, first = x, [], [], None
    for w in seq:
        i_t, w_t = lib.ggml_new_tensor_2d(ctx, I32, TOPK, n_tok), lib.ggml_new_tensor_3d(ctx, F32, 1, TOPK, n_tok)
        lib.ggml_set_input(i_t)
        lib.ggml_set_input(w_t)
        ids.append(i_t)
        wts.append(w_t)
        cur3 = lib.ggml_reshape_3d(ctx, lib.ggml_rms_norm(ctx, cur, EPS), H, 1, n_tok)     # the layer's ffn_norm
        up = lib.ggml_mul_mat_id(ctx, w["up"], cur3, i_t)                   # [INTER, TOPK, 1]
        gate = lib.ggml_mul_mat_id(ctx, w["gate"], cur3, i_t)
        ex = lib.ggml_mul_mat_id(ctx, w["down"], lib.ggml_swiglu_split(ctx, gate, up), i_t)   # [H, TOPK, 1]
        ex = lib.ggml_mul(ctx, ex, w_t)
        views = [lib.ggml_view_2d(ctx, ex, H, n_tok, 4 * H * TOPK, 4 * H * k) for k in range(TOPK)]
        cur = views[0]
        for v in views[1:]:
            cur = lib.ggml_add(ctx, cur, v)
        if first is None:
            first = cur
            lib.ggml_set_output(first)       # kept apart by the allocator, read back for the check
    lib.ggml_set_output(cur)
    graph = lib.ggml_new_graph_custom(ctx, n_graph, False)
    lib.ggml_build_forward_expand(graph, cur)
    galloc = lib.ggml_gallocr_new(lib.ggml_backend_cpu_buffer_type())
    if not lib.ggml_gallocr_alloc_graph(galloc, graph):
        raise SystemExit("ggml_moe_bench: could not allocate the graph")
    return {"graph": graph, "x": x, "ids": ids, "wts": wts, "first": first, "out": cur, "galloc": galloc}


def set_inputs(lib: Lib, gr: dict, x: np.ndarray, routes: list[tuple[np.ndarray, np.ndarray]]) -> None:
    lib.ggml_backend_tensor_set(gr["x"], x.ctypes.data, 0, x.nbytes)
    for i_t, w_t, (sel, r) in zip(gr["ids"], gr["wts"], routes, strict=True):
        lib.ggml_backend_tensor_set(i_t, sel.ctypes.data, 0, sel.nbytes)
        lib.ggml_backend_tensor_set(w_t, r.ctypes.data, 0, r.nbytes)


def compute(lib: Lib, backend: int, gr: dict) -> None:
    if lib.ggml_backend_graph_compute(backend, gr["graph"]) != 0:
        raise SystemExit("ggml_moe_bench: graph compute failed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib-dir", type=Path, required=True,
                    help="libggml-base.so and libggml-cpu.so (build_ggml.sh DIR cpu)")
    ap.add_argument("--threads", default="12")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--type", choices=("Q4_K", "Q8_0"), default="Q4_K",
                    help="the experts' ggml type: Q4_K (llama.cpp's Q4_K_M experts but the Q6_K down layers) or Q8_0")
    ap.add_argument("--buffer", choices=("auto", "cpu"), default="auto",
                    help="auto: llama.cpp's choice (CPU_REPACK where it has the type's kernels); cpu: the plain buffer")
    ap.add_argument("--per-layer", action="store_true",
                    help="one graph call a layer, the hidden state copied in and out (an adapter's way), "
                         "not one a token")
    ap.add_argument("--prefill", type=int, default=512,
                    help="tokens of one prompt chunk timed through each distinct layer, scaled to 48 (0: none)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    lib = Lib(a.lib_dir)
    g = Ggml(lib.base_path)                       # llama.cpp's own quantizer, from the same libggml-base
    qtype = GGML_TYPES[a.type]
    extra = lib.extra_bufts()
    # llama.cpp puts a weight in CPU_REPACK only where ggml has a repacked kernel for its type on this CPU
    # (repack.cpp ggml_repack_get_optimal_repack_type: on x86, Q4_K -> q4_K_8x8 with AVX2; none for Q8_0)
    repacks = a.type == "Q4_K" and bool(lib.ggml_cpu_has_avx2())
    buft = extra.get("CPU_REPACK") if a.buffer == "auto" and repacks else None
    buft = buft or lib.ggml_backend_cpu_buffer_type()
    res = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "ggml": g.version, "layers": a.layers,
           "tokens": a.tokens, "moe_layers_per_token": MOE_LAYERS, "type": a.type,
           "buffer": lib.ggml_backend_buft_name(buft).decode(), "extra_buffer_types": sorted(extra), "runs": []}
    from kt_decode_bench import host
    res["host"] = host()

    # the weights: one context, allocated in the chosen buffer type (CPU_REPACK repacks in tensor_set)
    over = lib.ggml_tensor_overhead()
    wctx = lib.ggml_init(InitParams(over * (3 * a.layers + 1), None, True))
    layers = [{"gate": lib.ggml_new_tensor_3d(wctx, qtype, H, INTER, E),
               "up": lib.ggml_new_tensor_3d(wctx, qtype, H, INTER, E),
               "down": lib.ggml_new_tensor_3d(wctx, qtype, INTER, H, E)} for _ in range(a.layers)]
    t0 = time.time()
    if not lib.ggml_backend_alloc_ctx_tensors_from_buft(wctx, buft):
        raise SystemExit("ggml_moe_bench: could not allocate the weights")
    rng = np.random.default_rng(0)
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize
    decoded = []           # each layer's one expert as the blocks decode (check)
    for lay in layers:
        decoded.append({})
        for name, (rows, cols) in (("gate", (INTER, H)), ("up", (INTER, H)), ("down", (H, INTER))):
            one = g.quantize((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32), a.type)
            blocks = np.ascontiguousarray(np.broadcast_to(one, (E, *one.shape)))     # the same blocks per expert
            assert blocks.nbytes == lib.ggml_nbytes(lay[name]), (name, blocks.nbytes)
            lib.ggml_backend_tensor_set(lay[name], blocks.ctypes.data, 0, blocks.nbytes)
            decoded[-1][name] = dequantize(one, GGMLQuantizationType[a.type]).reshape(rows, cols).astype(np.float64)
    res["load_s"] = round(time.time() - t0, 1)

    # one token through 48 layers as one graph (llama.cpp), or --per-layer: one graph a layer, called 48 times with the
    # hidden state copied in and out each time, as an adapter behind SGLang's KT wrapper would call it
    graphs = ([build(lib, [layers[li % a.layers] for li in range(MOE_LAYERS)])] if not a.per_layer else
              [build(lib, [lay]) for lay in layers])
    res["graph_nodes"] = lib.ggml_graph_n_nodes(graphs[0]["graph"])
    chunks = [build(lib, [lay], a.prefill) for lay in layers] if a.prefill else []
    res["prefill_tokens"] = a.prefill
    res["per_layer_calls"] = a.per_layer

    backend = lib.ggml_backend_cpu_init()
    for threads in (int(t) for t in a.threads.split(",")):
        params = ctypes.create_string_buffer(4096)         # struct ggml_threadpool_params (cpumask[512] + a few)
        lib.ggml_threadpool_params_init(params, threads)
        pool = lib.ggml_threadpool_new(params)
        lib.ggml_backend_cpu_set_n_threads(backend, threads)
        lib.ggml_backend_cpu_set_threadpool(backend, pool)
        per_token = []
        hidden = np.empty(H, dtype=np.float32)
        for tok in range(a.tokens + 4):
            xin = (rng.standard_normal(H) * 0.1).astype(np.float32)
            routes = [(rng.permutation(E)[:TOPK].astype(np.int32), rng.random(TOPK).astype(np.float32))
                      for _ in range(MOE_LAYERS)]
            for _, r in routes:
                r /= r.sum()
            if not a.per_layer:            # every input set before the clock starts: the graph alone is timed
                gr = graphs[0]
                set_inputs(lib, gr, xin, routes)
                t1 = time.perf_counter()
                compute(lib, backend, gr)
            else:                          # the calls' own cost is part of it: inputs in, output out, per layer
                t1 = time.perf_counter()
                hidden[:] = xin
                for li in range(MOE_LAYERS):
                    gr = graphs[li % a.layers]
                    set_inputs(lib, gr, hidden, routes[li:li + 1])
                    compute(lib, backend, gr)
                    lib.ggml_backend_tensor_get(gr["out"], hidden.ctypes.data, 0, hidden.nbytes)
            if tok >= 4:
                per_token.append(time.perf_counter() - t1)
        per_token.sort()
        med = 1e3 * per_token[len(per_token) // 2]
        if a.per_layer:                    # the last token's first layer, recomputed from its input for the check
            set_inputs(lib, graphs[0], xin, routes[:1])
            compute(lib, backend, graphs[0])
        got = np.empty(H, dtype=np.float32)
        lib.ggml_backend_tensor_get(graphs[0]["first"], got.ctypes.data, 0, got.nbytes)
        prefill = {}
        if chunks:      # one chunk through each distinct layer, as kt_decode_bench.py's prefill_tok_s
            xs = (rng.standard_normal((a.prefill, H)) * 0.1).astype(np.float32)
            spent = 0.0
            for gr in chunks:
                sel = np.stack([rng.permutation(E)[:TOPK] for _ in range(a.prefill)]).astype(np.int32)
                r = rng.random((a.prefill, TOPK)).astype(np.float32)
                r /= r.sum(-1, keepdims=True)
                set_inputs(lib, gr, xs, [(sel, r)])
                t2 = time.perf_counter()
                compute(lib, backend, gr)
                spent += time.perf_counter() - t2
            prefill = {"prefill_tok_s": round(a.prefill / (spent / len(chunks) * MOE_LAYERS), 1)}
        row = {"threads": threads, "cpu_ms_per_token_median": round(med, 3),
               "cpu_ms_per_token_min": round(1e3 * per_token[0], 3), "ms_per_layer": round(med / MOE_LAYERS, 4),
               "layer_rel_l2_vs_numpy": round(check(decoded[0], xin, got.astype(np.float64)), 5), **prefill}
        res["runs"].append(row)
        print(json.dumps(row), flush=True)
        a.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
