"""Write a random-weight GGUF of a Qwen3-MoE model's exact shape, typed as llama-quantize's Q4_K_M makes it.

    python3 tools/make_random_gguf.py CONFIG_DIR OUT.gguf [--layers N]

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
Q4_K_M_FTYPE = 15         # llama_ftype LLAMA_FTYPE_MOSTLY_Q4_K_M
POOL_BLOCKS = 1 << 18     # random blocks drawn once per type (36-52 MiB) and repeated


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's rule for the layers whose attn_v / ffn_down get more bits."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def tensors(cfg: dict) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape in llama.cpp's ne order, type) of every tensor, in file order; type in F32/Q4_K/Q6_K."""
    if cfg.get("model_type") != "qwen3_moe":
        raise ValueError(f"model_type {cfg.get('model_type')!r}: only qwen3_moe is written")
    h, n, v = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["vocab_size"])
    hd = int(cfg.get("head_dim") or h // int(cfg["num_attention_heads"]))
    q, kv = hd * int(cfg["num_attention_heads"]), hd * int(cfg["num_key_value_heads"])
    e, ff = int(cfg["num_experts"]), int(cfg["moe_intermediate_size"])
    if ff % QK_K or h % QK_K or q % QK_K:
        raise ValueError("k-quants need rows that are multiples of 256")
    out = [("token_embd.weight", (h, v), "Q4_K"), ("output_norm.weight", (h,), "F32"),
           ("output.weight", (h, v), "Q6_K")]
    for i in range(n):
        more = use_more_bits(i, n)
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (h,), "F32"),
                (b + "attn_q.weight", (h, q), "Q4_K"),
                (b + "attn_k.weight", (h, kv), "Q4_K"),
                (b + "attn_v.weight", (h, kv), "Q6_K" if more else "Q4_K"),
                (b + "attn_output.weight", (q, h), "Q4_K"),
                (b + "attn_q_norm.weight", (hd,), "F32"),
                (b + "attn_k_norm.weight", (hd,), "F32"),
                (b + "ffn_norm.weight", (h,), "F32"),
                (b + "ffn_gate_inp.weight", (h, e), "F32"),
                (b + "ffn_gate_exps.weight", (h, ff, e), "Q4_K"),
                (b + "ffn_up_exps.weight", (h, ff, e), "Q4_K"),
                (b + "ffn_down_exps.weight", (ff, h, e), "Q6_K" if more else "Q4_K")]
    return out


def nbytes(shape: tuple[int, ...], kind: str) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * 4 if kind == "F32" else n // QK_K * (Q4_K_BYTES if kind == "Q4_K" else Q6_K_BYTES)


def block_pool(kind: str, rng):
    """POOL_BLOCKS well-formed random blocks of a k-quant type as one uint8 array."""
    import numpy as np
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


def write(config_dir: Path, out: Path, layers: int | None = None, seed: int = 0) -> dict:
    import gguf
    import numpy as np
    cfg = json.loads((config_dir / "config.json").read_text())
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    specs = tensors(cfg)
    rng = np.random.default_rng(seed)
    t0 = time.time()
    arch = "qwen3moe"
    w = gguf.GGUFWriter(str(out), arch)
    w.add_name(config_dir.name + " (random weights, Q4_K_M layout)")
    w.add_file_type(Q4_K_M_FTYPE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    h, v = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    w.add_block_count(int(cfg["num_hidden_layers"]))
    w.add_context_length(int(cfg["max_position_embeddings"]))
    w.add_embedding_length(h)
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(int(cfg["num_attention_heads"]))
    w.add_head_count_kv(int(cfg["num_key_value_heads"]))
    hd = int(cfg.get("head_dim") or h // int(cfg["num_attention_heads"]))
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
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
    qtype = {"Q4_K": gguf.GGMLQuantizationType.Q4_K, "Q6_K": gguf.GGMLQuantizationType.Q6_K}
    for name, ne, kind in specs:
        shape = tuple(reversed(ne))          # gguf-py takes numpy order
        if kind == "F32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes(ne, kind))
        else:
            row = ne[0] // QK_K * (Q4_K_BYTES if kind == "Q4_K" else Q6_K_BYTES)
            w.add_tensor_info(name, (*shape[:-1], row), np.dtype(np.uint8), nbytes(ne, kind), raw_dtype=qtype[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    pools = {k: block_pool(k, rng) for k in ("Q4_K", "Q6_K")}
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
    return {"out": str(out), "layout": "Q4_K_M", "tensors": len(specs), "bytes": out.stat().st_size,
            "tensor_bytes": total, "seconds": round(time.time() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config_dir", type=Path, help="folder with the model's config.json")
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, help="keep only the first N decoder layers (smoke tests)")
    a = ap.parse_args(argv)
    if not (a.config_dir / "config.json").is_file():
        print(f"make_random_gguf: no config.json in {a.config_dir} -> pass a folder holding one", file=sys.stderr)
        return 65
    try:
        info = write(a.config_dir, a.out, a.layers)
    except ValueError as e:
        print(f"make_random_gguf: {e}", file=sys.stderr)
        return 64
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
