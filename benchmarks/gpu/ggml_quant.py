"""llama.cpp's own weight quantizers, called from Python, for the accuracy proxy (issue 18: the peer's accuracy).

`ggml_quantize_chunk` from libggml-base (built from the llama.cpp source that llama-cpp-python's sdist vendors:
`benchmarks/gpu/build_ggml.sh`) is what llama-quantize calls for every tensor; without an importance matrix it
runs the reference quantizers (`quantize_row_q4_K_ref`, ...), so the blocks are the ones llama-quantize writes.
They are dequantized by the gguf package (gguf-py's own numpy decoders, llama.cpp's repository), and the model is
then computed by torch: the format's error, no CPU kernel (like kt_accuracy.py's "FP8 (GPU)" row).

Which tensor gets which type in Q4_K_M is llama-quantize's rule for qwen3moe (src/llama-quant.cpp, mirrored in
tools/make_random_gguf.py and checked against the real llama-quantize by `build_ggml.sh check`): Q4_K for
ffn_gate_exps and ffn_up_exps; Q6_K for ffn_down_exps on the layers `use_more_bits` picks, Q4_K on the others.
"""
from __future__ import annotations

import ctypes
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.make_random_gguf import use_more_bits  # noqa: E402

GGML_TYPES = {"Q4_0": 2, "Q8_0": 8, "Q4_K": 12, "Q6_K": 14}   # enum ggml_type (ggml/include/ggml.h)


class Ggml:
    def __init__(self, lib: str | Path):
        self.path = str(lib)
        self.lib = ctypes.CDLL(self.path)
        self.lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        self.lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                 ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        self.lib.ggml_row_size.restype = ctypes.c_size_t
        self.lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.lib.ggml_version.restype = self.lib.ggml_commit.restype = ctypes.c_char_p
        self.version = f"ggml {self.lib.ggml_version().decode()} ({self.lib.ggml_commit().decode()})"

    def quantize(self, w: np.ndarray, kind: str) -> np.ndarray:
        """[..., n] float -> the blocks llama-quantize writes, [..., row bytes] uint8."""
        t = GGML_TYPES[kind]
        src = np.ascontiguousarray(w, dtype=np.float32).reshape(-1, w.shape[-1])
        rows, n = src.shape
        row_bytes = self.lib.ggml_row_size(t, n)
        dst = np.empty((rows, row_bytes), dtype=np.uint8)
        # row chunks on every core: ctypes lets go of the GIL, and ggml_quantize_chunk writes the rows from `start`
        # (an element offset) on, so the chunks' blocks land where one call would put them (Q4_K: ~70 s a layer of
        # the coder's experts on one core)
        step = max(1, -(-rows // (os.cpu_count() or 1)))
        with ThreadPoolExecutor() as pool:
            written = sum(pool.map(lambda r0: self.lib.ggml_quantize_chunk(
                t, src.ctypes.data, dst.ctypes.data, r0 * n, min(step, rows - r0), n, None), range(0, rows, step)))
        if written != dst.nbytes:
            raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes of {dst.nbytes} ({kind}, {rows}x{n})")
        return dst.reshape(*w.shape[:-1], row_bytes)

    def roundtrip(self, w: np.ndarray, kind: str) -> np.ndarray:
        """The values a llama.cpp model of this type computes with: quantized by ggml, decoded by gguf-py."""
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import dequantize
        return dequantize(self.quantize(w, kind), GGMLQuantizationType[kind]).reshape(w.shape)


def expert_types(layout: str, layer: int, n_layers: int) -> dict[str, str]:
    """The types llama-quantize gives a layer's ffn_{gate,up,down}_exps under a file type (Q4_K_M, Q8_0, Q4_0)."""
    if layout == "Q4_K_M":
        return {"gate": "Q4_K", "up": "Q4_K", "down": "Q6_K" if use_more_bits(layer, n_layers) else "Q4_K"}
    if layout in GGML_TYPES:
        return {"gate": layout, "up": layout, "down": layout}
    raise ValueError(f"layout {layout}: Q4_K_M, Q8_0, Q4_0, Q4_K or Q6_K")


def selfcheck(lib: str | Path, seed: int = 0) -> dict:
    """The binding against an independent implementation: for the types the gguf package can also quantize (Q8_0,
    Q4_0) the bytes must be identical; for every type, the relative error of one expert matrix's round trip."""
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import quantize
    g = Ggml(lib)
    w = np.random.default_rng(seed).normal(0, 0.02, (768, 2048)).astype(np.float32)   # one expert's gate, N(0, 0.02)
    out: dict = {"lib": Path(g.path).name, "ggml": g.version, "matrix": f"768 x 2048, N(0, 0.02), seed {seed}", "types": {}}
    for kind in GGML_TYPES:
        row: dict = {"weight_rel_l2": float(np.linalg.norm(g.roundtrip(w, kind) - w) / np.linalg.norm(w))}
        try:
            row["bytes_equal_gguf_py"] = bool(np.array_equal(g.quantize(w, kind),
                                                             quantize(w, GGMLQuantizationType[kind])))
        except NotImplementedError:
            row["bytes_equal_gguf_py"] = None          # gguf-py decodes k-quants but does not encode them
        out["types"][kind] = row
    return out


if __name__ == "__main__":
    import json
    if len(sys.argv) != 2:
        raise SystemExit("usage: ggml_quant.py LIBGGML_BASE_SO   (prints the self-check as JSON)")
    res = selfcheck(sys.argv[1])
    print(json.dumps(res, indent=1))
    bad = [k for k, r in res["types"].items() if r["bytes_equal_gguf_py"] is False]
    sys.exit(f"ggml_quant: bytes differ from gguf-py's for {bad}" if bad else 0)
