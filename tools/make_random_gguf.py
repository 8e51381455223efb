"""Write a random-weight GGUF of a Qwen3-MoE or dense Qwen2 model's exact shape, typed as llama-quantize makes it.

    python3 tools/make_random_gguf.py CONFIG_DIR OUT.gguf [--layers N] [--type Q4_K_M|Q8_0]

Dense Qwen2 (model_type qwen2; issue 19's GGUF planning, benchmarks/gpu/run_gguf.sh): llama.cpp's qwen2 names,
q/k/v biases in F32, no output.weight when the embeddings are tied; Q8_0 types every matrix Q8_0 (34 bytes per
32 values), Q4_K_M as below (k-quants need rows that are multiples of 256: Qwen2.5-0.5B's 896 is not).

CONFIG_DIR holds the model's config.json (config/models/<name>/). The file has llama.cpp's qwen3moe tensor
names, shapes and metadata, and each tensor the type `llama-quantize ... Q4_K_M` gives it for this
architecture (src/llama-quant.cpp: Q6_K for output.weight, and for attn_v and ffn_down(_exps) on the layers
`use_more_bits` picks; Q4_K for the other matrices; F32 for norms and the router), so the file has the size
and the kernels of a real Q4_K_M (Qwen3-30B-A3B: 17.3 GiB). The blocks are random bytes with sane block
scales (no NaN/Inf codes, weights ~ 0.02), written straight in the quantized layout: no F16 intermediate
(61 GB for this model) and no quantize step. The vocabulary is a plain one (llama.cpp's SPM type, one
normal token per id) so llama-bench and llama-server both load it; send token ids, not text.
Speed and memory are real; text is noise (benchmarks/gpu/run_moe_vs_llamacpp.sh, issue 18).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

QK_K = 256
Q4_K_BYTES = 144          # d f16, dmin f16, 12 bytes of 6-bit scales/mins, 128 bytes of 4-bit quants
Q6_K_BYTES = 210          # 128 ql, 64 qh, 16 int8 scales, d f16
Q8_0_BYTES = 34           # d f16, 32 int8 quants
QK8_0 = 32
Q4_K_M_FTYPE = 15         # llama_ftype LLAMA_FTYPE_MOSTLY_Q4_K_M
Q8_0_FTYPE = 7            # LLAMA_FTYPE_MOSTLY_Q8_0
POOL_BLOCKS = 1 << 18     # random blocks drawn once per type (36-52 MiB) and repeated


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's rule for the layers whose attn_v / ffn_down get more bits."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def matrix_types(layout: str, *rows: int) -> tuple[str, str, str]:
    """(most matrices, attn_v/ffn_down on the use_more_bits layers, output.weight) as llama-quantize types them:
    Q8_0 everywhere, or Q4_K_M's Q4_K with Q6_K; each row length must fill whole blocks."""
    if layout == "Q8_0":
        if any(r % QK8_0 for r in rows):
            raise ValueError("Q8_0 needs rows that are multiples of 32")
        return "Q8_0", "Q8_0", "Q8_0"
    if layout == "Q4_K_M":
        if any(r % QK_K for r in rows):
            raise ValueError("k-quants need rows that are multiples of 256 (use --type Q8_0)")
        return "Q4_K", "Q6_K", "Q6_K"
    raise ValueError(f"layout {layout}: Q4_K_M or Q8_0")


def tensors(cfg: dict, layout: str = "Q4_K_M") -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape in llama.cpp's ne order, type) of every tensor, in file order; type in F32/Q4_K/Q6_K/Q8_0."""
    if cfg.get("model_type") == "qwen2":
        return _qwen2_tensors(cfg, layout)
    if cfg.get("model_type") != "qwen3_moe":
        raise ValueError(f"model_type {cfg.get('model_type')!r}: only qwen3_moe and qwen2 are written")
    h, n, v = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["vocab_size"])
    hd = int(cfg.get("head_dim") or h // int(cfg["num_attention_heads"]))
    q, kv = hd * int(cfg["num_attention_heads"]), hd * int(cfg["num_key_value_heads"])
    e, ff = int(cfg["num_experts"]), int(cfg["moe_intermediate_size"])
    base, more_t, out_t = matrix_types(layout, h, ff, q)     # norms and the router stay F32
    out = [("token_embd.weight", (h, v), base), ("output_norm.weight", (h,), "F32"),
           ("output.weight", (h, v), out_t)]
    for i in range(n):
        more = use_more_bits(i, n)
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (h,), "F32"),
                (b + "attn_q.weight", (h, q), base),
                (b + "attn_k.weight", (h, kv), base),
                (b + "attn_v.weight", (h, kv), more_t if more else base),
                (b + "attn_output.weight", (q, h), base),
                (b + "attn_q_norm.weight", (hd,), "F32"),
                (b + "attn_k_norm.weight", (hd,), "F32"),
                (b + "ffn_norm.weight", (h,), "F32"),
                (b + "ffn_gate_inp.weight", (h, e), "F32"),
                (b + "ffn_gate_exps.weight", (h, ff, e), base),
                (b + "ffn_up_exps.weight", (h, ff, e), base),
                (b + "ffn_down_exps.weight", (ff, h, e), more_t if more else base)]
    return out


def _qwen2_tensors(cfg: dict, layout: str) -> list[tuple[str, tuple[int, ...], str]]:
    h, n, v = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["vocab_size"])
    hd = h // int(cfg["num_attention_heads"])
    q, kv = hd * int(cfg["num_attention_heads"]), hd * int(cfg["num_key_value_heads"])
    ff = int(cfg["intermediate_size"])
    base, more_t, out_t = matrix_types(layout, h, ff, q)
    out = [("token_embd.weight", (h, v), base), ("output_norm.weight", (h,), "F32")]
    if not cfg.get("tie_word_embeddings"):
        out.append(("output.weight", (h, v), out_t))
    for i in range(n):
        more = use_more_bits(i, n)
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (h,), "F32"),
                (b + "attn_q.weight", (h, q), base), (b + "attn_q.bias", (q,), "F32"),
                (b + "attn_k.weight", (h, kv), base), (b + "attn_k.bias", (kv,), "F32"),
                (b + "attn_v.weight", (h, kv), more_t if more else base), (b + "attn_v.bias", (kv,), "F32"),
                (b + "attn_output.weight", (q, h), base),
                (b + "ffn_norm.weight", (h,), "F32"),
                (b + "ffn_gate.weight", (h, ff), base),
                (b + "ffn_up.weight", (h, ff), base),
                (b + "ffn_down.weight", (ff, h), more_t if more else base)]
    return out


BLOCK = {"Q4_K": (QK_K, Q4_K_BYTES), "Q6_K": (QK_K, Q6_K_BYTES), "Q8_0": (QK8_0, Q8_0_BYTES)}


def nbytes(shape: tuple[int, ...], kind: str) -> int:
    n = 1
    for d in shape:
        n *= d
    if kind == "F32":
        return n * 4
    per, size = BLOCK[kind]
    return n // per * size


def block_pool(kind: str, rng):
    """POOL_BLOCKS well-formed random blocks of a k-quant type as one uint8 array."""
    import numpy as np
    if kind == "Q8_0":
        # w = d * q with int8 q: d 1.6e-4 gives |w| ~ 0.02
        blk = rng.integers(0, 256, (POOL_BLOCKS, Q8_0_BYTES), dtype=np.uint8)
        blk[:, 0:2] = np.frombuffer(np.float16(1.6e-4).tobytes(), np.uint8)
        return blk.reshape(-1)
    if kind == "Q4_K":
        blk = rng.integers(0, 256, (POOL_BLOCKS, Q4_K_BYTES), dtype=np.uint8)
        # w = d * sc * q - dmin * m with 6-bit sc, m and 4-bit q: d 1.5e-4 gives |w| ~ 0.02; dmin = 7.5 d
        # centres q around zero on average
        blk[:, 0:2] = np.frombuffer(np.float16(1.5e-4).tobytes(), np.uint8)
        blk[:, 2:4] = np.frombuffer(np.float16(1.1e-3).tobytes(), np.uint8)
        return blk.reshape(-1)
    blk = rng.integers(0, 256, (POOL_BLOCKS, Q6_K_BYTES), dtype=np.uint8)
    # w = d * sc * (q - 32), 16 int8 scales: kept in [-16, 15] so d 1.2e-4 gives |w| ~ 0.02
    blk[:, 192:208] = ((rng.integers(0, 32, (POOL_BLOCKS, 16)) - 16).astype(np.int8)).view(np.uint8)
    blk[:, 208:210] = np.frombuffer(np.float16(1.2e-4).tobytes(), np.uint8)
    return blk.reshape(-1)


def write(config_dir: Path, out: Path, layers: int | None = None, seed: int = 0, layout: str = "Q4_K_M") -> dict:
    import gguf
    import numpy as np
    cfg = json.loads((config_dir / "config.json").read_text())
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    specs = tensors(cfg, layout)
    rng = np.random.default_rng(seed)
    t0 = time.time()
    moe = cfg["model_type"] == "qwen3_moe"
    arch = "qwen3moe" if moe else "qwen2"
    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(config_dir.name + f" (random weights, {layout} layout)")
    w.add_file_type(Q4_K_M_FTYPE if layout == "Q4_K_M" else Q8_0_FTYPE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    h, v = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    w.add_block_count(int(cfg["num_hidden_layers"]))
    w.add_context_length(int(cfg["max_position_embeddings"]))
    w.add_embedding_length(h)
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(int(cfg["num_attention_heads"]))
    w.add_head_count_kv(int(cfg["num_key_value_heads"]))
    hd = int(cfg.get("head_dim") or h // int(cfg["num_attention_heads"]))
    if moe:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    if moe:
        w.add_expert_count(int(cfg["num_experts"]))
        w.add_expert_used_count(int(cfg["num_experts_per_tok"]))
        w.add_expert_feed_forward_length(int(cfg["moe_intermediate_size"]))
    w.add_vocab_size(v)
    # a plain vocabulary: <unk> <s> </s>, then one normal token per id (each decodes to text of its own)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"\u2581t{i}" for i in range(3, v)])
    w.add_token_scores([0.0] * v)
    w.add_token_types([2, 3, 3] + [1] * (v - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    qtype = {k: gguf.GGMLQuantizationType[k] for k in BLOCK}
    for name, ne, kind in specs:
        shape = tuple(reversed(ne))          # gguf-py takes numpy order
        if kind == "F32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes(ne, kind))
        else:
            row = ne[0] // BLOCK[kind][0] * BLOCK[kind][1]
            w.add_tensor_info(name, (*shape[:-1], row), np.dtype(np.uint8), nbytes(ne, kind), raw_dtype=qtype[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    pools = {k: block_pool(k, rng) for k in sorted({kind for _, _, kind in specs} - {"F32"})}
    fout = w.fout[0]
    total = 0
    for name, ne, kind in specs:
        n = nbytes(ne, kind)
        w.write_padding(fout, fout.tell())
        if kind == "F32":
            if name.endswith("norm.weight"):
                np.ones(n // 4, np.float32).tofile(fout)
            else:
                (rng.standard_normal(n // 4, np.float32) * 0.02).tofile(fout)
        else:
            pool = pools[kind]
            left = n
            while left:
                k = min(left, pool.nbytes)
                pool[:k].tofile(fout)
                left -= k
        w.write_padding(fout, n)
        total += n
    fout.close()
    return {"out": str(out), "layout": layout, "tensors": len(specs), "bytes": out.stat().st_size,
            "tensor_bytes": total, "seconds": round(time.time() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config_dir", type=Path, help="folder with the model's config.json")
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, help="keep only the first N decoder layers (smoke tests)")
    ap.add_argument("--type", default="Q4_K_M", choices=("Q4_K_M", "Q8_0"), help="llama-quantize's type")
    a = ap.parse_args(argv)
    if not (a.config_dir / "config.json").is_file():
        print(f"make_random_gguf: no config.json in {a.config_dir} -> pass a folder holding one", file=sys.stderr)
        return 65
    try:
        info = write(a.config_dir, a.out, a.layers, layout=a.type)
    except ValueError as e:
        print(f"make_random_gguf: {e}", file=sys.stderr)
        return 64
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
