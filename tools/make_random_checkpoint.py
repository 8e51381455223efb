"""Write a random-weight checkpoint with a model's real tensor names, shapes, dtypes and packing.

    python3 tools/make_random_checkpoint.py CONFIG_DIR OUT_DIR --format fp8|gptq|bf16 [--layers N] [--jobs 4]

CONFIG_DIR holds the model's real config.json (config/models/<name>/). OUT_DIR gets config.json (with the
format's quantization_config), sharded safetensors and model.safetensors.index.json: a local model folder
SGLang starts from like a downloaded one, and from which kt-kernel reads the CPU experts
(--kt-weight-path OUT_DIR with --kt-method FP8 or BF16). Speed and memory are real; text is noise.
Names and shapes come from vramkit/core/model/checkpoint.py (issue 12).

    python3 tools/make_random_checkpoint.py CONFIG_DIR KT_DIR --kt-layout AMXINT4 [--from MODEL_DIR]

writes KT's own quantized CPU-expert layout (for --kt-method AMXINT4/AMXINT8) through kt-kernel's quantizer:
random experts, or with --from the experts of a downloaded checkpoint (bf16 or block FP8): the conversion
the `moe` preset needs once per model (KT_WEIGHT_PATH=KT_DIR).

    python3 tools/make_random_checkpoint.py CONFIG_DIR KT_DIR --kt-layout RAWINT4 [--from GPTQ_DIR]

writes kt-kernel's group-wise int4 form (--kt-method RAWINT4: ``model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj
.weight_packed`` / ``weight_scale``, one safetensors file per layer): with --from, a symmetric GPTQ-Int4 checkpoint's
own values repacked (vramkit/core/model/kt_repack.py; no kt-kernel needed), else random nibbles 1..15 with a scale
of 2e-4 (a weight's RMS ~1e-3, as SGLang's dummy weights).

Values are kept small and finite so a forward pass stays finite: bf16 ~ N(0, 0.02), norms 1, FP8 codes
with |x| <= 1.875 (no NaN code) and a block scale of 0.01; GPTQ: random nibbles, every zero point 8, a scale of
2e-4, g_idx as no act-order has it (float16 around them, as Qwen's GPTQ-Int4 releases). Random bytes are drawn
once into a pool and sliced, so a 30 GB checkpoint costs memcpy and disk time, not RNG time. Needs torch and
safetensors (the GPU host has both; the kit's CPU venv too).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vramkit.core import progress  # noqa: E402
from vramkit.core.model import checkpoint as cl  # noqa: E402
from vramkit.errors import Exit, VramkitError  # noqa: E402

POOL_ELEMS = 1 << 26          # 64 Mi values per pool: large enough that neighbouring tensors differ
FP8_MAGNITUDE_MASK = 0xBF     # e4m3fn S.EEEE.MMM: clearing the top exponent bit keeps |x| <= 1.875, no NaN
FP8_SCALE = 0.01
GPTQ_ZEROS = 0x77777777       # eight nibbles of 7: zero point 8 (symmetric), as AutoGPTQ stores it
GPTQ_SCALE = 2e-4


class Pools:
    def __init__(self, seed: int):
        import torch
        g = torch.Generator().manual_seed(seed)
        self.torch = torch
        self.bf16 = (torch.randn(POOL_ELEMS, generator=g) * 0.02).to(torch.bfloat16)
        raw = torch.randint(0, 256, (POOL_ELEMS,), dtype=torch.uint8, generator=g) & FP8_MAGNITUDE_MASK
        self.fp8 = raw.view(torch.float8_e4m3fn)
        self.offset = 0
        self.gptq_group = cl.GPTQ_GROUP          # the checkpoint's GPTQ group (write() sets the config's)

    def tensor(self, spec: cl.TensorSpec):
        torch = self.torch
        if spec.dtype == "f32":
            return torch.full(spec.shape, FP8_SCALE, dtype=torch.float32)
        float_type = torch.float16 if spec.dtype == "f16" else torch.bfloat16
        if spec.role == "norm":
            return torch.ones(spec.shape, dtype=float_type)
        if spec.role == "zeros":      # symmetric GPTQ: every zero point 8, stored as 7 in each nibble (AutoGPTQ's v1)
            return torch.full(spec.shape, GPTQ_ZEROS, dtype=torch.int32)
        if spec.role == "g_idx":      # no act-order: input i in group i // group
            return torch.arange(spec.shape[0], dtype=torch.int32) // self.gptq_group
        if spec.role == "scale":      # GPTQ's: a weight's RMS ~ 4.6 x the scale, ~1e-3 as SGLang's dummy weights
            return torch.full(spec.shape, GPTQ_SCALE, dtype=torch.float16)
        if spec.dtype == "fp8_e4m3":
            return self._slice(self.fp8, spec.numel).view(spec.shape)
        if spec.dtype == "i32":       # qweight: random nibbles, drawn as bytes (four to an int32)
            return self._slice(self.fp8, spec.numel * 4).view(torch.uint8).view(torch.int32).view(spec.shape)
        return self._slice(self.bf16, spec.numel).to(float_type).view(spec.shape)

    def _slice(self, pool, n: int):
        """n values of `pool` from a moving offset (a copy), the pool repeated where n passes its end."""
        self.offset = (self.offset + 7919 * 64) % POOL_ELEMS
        if n <= POOL_ELEMS - self.offset:
            return pool[self.offset:self.offset + n].clone()
        reps = -(-n // POOL_ELEMS) + 1
        return pool.repeat(reps)[self.offset:self.offset + n].clone()


def write(config_dir: Path, out_dir: Path, fmt: str, layers: int | None = None, jobs: int = 4,
          max_shard_bytes: int = 4 << 30, seed: int = 0) -> dict:
    from safetensors.torch import save_file
    cfg = json.loads((config_dir / "config.json").read_text())
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    specs = cl.checkpoint_tensors(cfg, fmt)
    shards = cl.shard(specs, max_shard_bytes)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    pools = Pools(seed)
    if fmt == "gptq":
        pools.gptq_group = cl.gptq_group(cfg)

    def one(k: int) -> int:
        tensors = {s.name: pools.tensor(s) for s in shards[k]}
        save_file(tensors, str(out_dir / cl.shard_name(k, len(shards))), metadata={"format": "pt"})
        return sum(s.nbytes for s in shards[k])

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        total = sum(ex.map(one, range(len(shards))))
    weight_map = {s.name: cl.shard_name(k, len(shards)) for k, group in enumerate(shards) for s in group}
    (out_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    qc = cl.quantization_config(fmt)
    if fmt == "gptq" and (cfg.get("quantization_config") or {}).get("quant_method") == "gptq":
        qc = cfg["quantization_config"]          # a GPTQ release's own config (checked by gptq_group) stays as it is
    if qc:
        cfg["quantization_config"] = qc
    else:
        cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = {"f16": "float16", "bf16": "bfloat16"}[cl.float_dtype(fmt)]     # as the tensors above
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    return {"out": str(out_dir), "format": fmt, "tensors": len(specs), "shards": len(shards),
            "bytes": total, "seconds": round(time.time() - t0, 1)}


KT_QUANT_METHODS = ("AMXINT4", "AMXINT8")
KT_LAYOUTS = KT_QUANT_METHODS + ("RAWINT4",)
RAWINT4_SCALE = 2e-4


def _safetensors_reader(source: Path):
    """name -> tensor over a checkpoint folder (sharded through its index, or its one file); a name it lacks, or a
    folder with no safetensors, is one line and exit 21 (unsupported model)."""
    from safetensors import safe_open
    index = json.loads((source / "model.safetensors.index.json").read_text())["weight_map"] \
        if (source / "model.safetensors.index.json").is_file() else None
    files = sorted(p.name for p in source.glob("*.safetensors"))
    if not index and len(files) != 1:
        raise VramkitError(f"{source}: {len(files)} safetensors files and no model.safetensors.index.json",
                           "pass the downloaded checkpoint folder", Exit.UNSUPPORTED_MODEL)
    handles: dict = {}

    def get(name: str, optional: bool = False):
        file = index.get(name) if index else files[0]
        if file is not None and file not in handles:
            handles[file] = safe_open(str(source / file), "pt")
        if file is None or name not in handles[file].keys():
            if optional:
                return None
            raise VramkitError(f"{source}: no tensor {name} (the Qwen-MoE naming this tool reads)",
                               "pass the downloaded checkpoint folder of this model", Exit.UNSUPPORTED_MODEL)
        return handles[file].get_tensor(name)
    return get


def write_rawint4_layout(config_dir: Path, out_dir: Path, layers: int | None = None, seed: int = 1,
                         source: Path | None = None) -> dict:
    """kt-kernel's RAWINT4 files for every MoE layer (the first `layers` decoder layers): a GPTQ-Int4 checkpoint's
    experts repacked value for value (`source`), or random ones."""
    import torch
    from safetensors.torch import save_file

    from vramkit.core.model import kt_repack
    cfg = json.loads(((source or config_dir) / "config.json").read_text())
    n_layers = layers if layers is not None else int(cfg["num_hidden_layers"])
    e, h, inter = int(cfg["num_experts"]), int(cfg["hidden_size"]), int(cfg["moe_intermediate_size"])
    group = kt_repack.check_gptq(cfg.get("quantization_config") or {}, str(source)) if source is not None else 0
    get = _safetensors_reader(source) if source is not None else None
    g = torch.Generator().manual_seed(seed)
    moe_layers = [i for i in range(n_layers) if cl.is_moe_layer(cfg, i)]
    if get is not None and moe_layers:      # the source's naming checked before anything is written
        get(f"model.layers.{moe_layers[0]}.mlp.experts.0.gate_proj.qweight")
    out_dir.mkdir(parents=True, exist_ok=True)
    t0, written, raised, weights = time.time(), 0, 0, 0
    print(f"writing {len(moe_layers)} MoE layers x {e} experts as RAWINT4 into {out_dir} "
          f"({'repacked from ' + str(source) if source else 'random experts'})", file=sys.stderr, flush=True)
    for done, i in enumerate(moe_layers, 1):
        tensors = {}
        for proj, (n, k) in (("gate", (inter, h)), ("up", (inter, h)), ("down", (h, inter))):
            names = [f"model.layers.{i}.mlp.experts.{x}.{proj}_proj" for x in range(e)]
            if get is not None:     # every expert's projection at once (kt_repack.gptq_experts_to_rawint4)
                packed, scale, r = kt_repack.gptq_experts_to_rawint4(
                    [get(m + ".qweight") for m in names], [get(m + ".scales") for m in names], group,
                    [get(m + ".g_idx", optional=True) for m in names])
                raised, weights = raised + r, weights + e * n * k
            else:
                packed = list(kt_repack.pack(torch.randint(1, 16, (e, n, k), dtype=torch.int32, generator=g)))
                scale = [torch.full((n, k // cl.RAWINT4_GROUP), RAWINT4_SCALE, dtype=torch.bfloat16)] * e
            for m, p, sc in zip(names, packed, scale, strict=True):
                tensors[m + ".weight_packed"], tensors[m + ".weight_scale"] = p.contiguous(), sc.clone()
        path = out_dir / f"rawint4-layer-{i:03d}.safetensors"
        save_file(tensors, str(path), metadata={"format": "pt"})
        written += path.stat().st_size
        del tensors
        print("  " + progress.steps_line("layer", done, len(moe_layers), time.time() - t0, written),
              file=sys.stderr, flush=True)
    return {"out": str(out_dir), "kt_method": "RAWINT4", "layers": n_layers, "bytes": written,
            "source": str(source) if source else "random", "seconds": round(time.time() - t0, 1),
            **({"raised_from_minus_8": raised, "share_raised": round(raised / weights, 6)} if weights else {})}


def checkpoint_experts(source: Path, layer: int, num_experts: int, get=None):
    """One layer's experts from a Hugging Face checkpoint folder as bf16 stacks (gate [E,I,H], up [E,I,H],
    down [E,H,I]); block-FP8 tensors are dequantized with their weight_scale_inv (128x128 blocks). `get`: the
    folder's _safetensors_reader, opened once for every layer (one is opened here without it)."""
    import torch
    get = get or _safetensors_reader(source)

    def weight(name: str):
        w = get(name + ".weight")
        if w.dtype == torch.float8_e4m3fn:
            s = get(name + ".weight_scale_inv").float()
            b = cl.FP8_BLOCK
            rows, cols = w.shape
            if rows % b == 0 and cols % b == 0:   # each block times its scale, in place of a full-size scale copy
                return (w.float().view(rows // b, b, cols // b, b) * s[:, None, :, None]).view(rows, cols) \
                    .to(torch.bfloat16)
            s = s.repeat_interleave(b, 0).repeat_interleave(b, 1)[:rows, :cols]
            return (w.float() * s).to(torch.bfloat16)
        return w.to(torch.bfloat16)

    p = f"model.layers.{layer}.mlp.experts"
    return [torch.stack([weight(f"{p}.{e}.{proj}") for e in range(num_experts)]).contiguous()
            for proj in ("gate_proj", "up_proj", "down_proj")]


def write_kt_layout(config_dir: Path, out_dir: Path, method: str, threads: int, layers: int | None = None,
                    seed: int = 1, source: Path | None = None) -> dict:
    """KT's own layout for AMXINT4/AMXINT8 (``_layer_{i}/_numa_0/INT4_{gate,up,down}_{e}_*.kt``), written by
    kt-kernel itself: each layer's experts as random bf16 tensors, quantized and saved by
    ``KTMoEWrapper.load_weights_from_tensors`` (the online-quantization path KT's converter uses).
    SGLang then takes --kt-weight-path OUT_DIR --kt-method METHOD; the GPU experts still come from the
    safetensors checkpoint. With `source` (a downloaded bf16 or block-FP8 checkpoint folder) the experts are
    that checkpoint's, so this converts a real model. Needs kt_kernel (and a CUDA torch: it pins its buffers)."""
    import torch
    from kt_kernel import KTMoEWrapper
    cfg = json.loads((config_dir / "config.json").read_text())
    n_layers = layers if layers is not None else int(cfg["num_hidden_layers"])
    e, h, inter = int(cfg["num_experts"]), int(cfg["hidden_size"]), int(cfg["moe_intermediate_size"])
    get = _safetensors_reader(source) if source is not None else None     # the folder's files, opened once
    out_dir.mkdir(parents=True, exist_ok=True)
    pools = Pools(seed)
    t0 = time.time()
    moe_layers = [i for i in range(n_layers) if cl.is_moe_layer(cfg, i)]
    print(f"converting {len(moe_layers)} MoE layers x {e} experts to {method} into {out_dir} "
          f"({'from ' + str(source) if source else 'random experts'}, {threads} threads)", file=sys.stderr, flush=True)
    for done, i in enumerate(moe_layers, 1):
        w = KTMoEWrapper(layer_idx=i, num_experts=e, num_experts_per_tok=int(cfg["num_experts_per_tok"]),
                         hidden_size=h, moe_intermediate_size=inter, gpu_experts_mask=None,
                         cpuinfer_threads=threads, threadpool_count=1, weight_path=str(out_dir),
                         chunked_prefill_size=512, method=method)
        mats = checkpoint_experts(source, i, e, get) if source is not None else \
            [pools.tensor(cl.TensorSpec("x", shape, "bf16", "expert"))
             for shape in ((e, inter, h), (e, inter, h), (e, h, inter))]
        w.load_weights_from_tensors(*mats, torch.arange(e, dtype=torch.long))
        del w, mats
        written = sum(f.stat().st_size for f in out_dir.rglob("*.kt"))
        print("  " + progress.steps_line("layer", done, len(moe_layers), time.time() - t0, written),
              file=sys.stderr, flush=True)
    size = sum(f.stat().st_size for f in out_dir.rglob("*.kt"))
    return {"out": str(out_dir), "kt_method": method, "layers": n_layers, "bytes": size,
            "source": str(source) if source else "random",
            "seconds": round(time.time() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config_dir", type=Path, help="folder with the model's config.json")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--format", choices=cl.FORMATS, default="bf16")
    ap.add_argument("--layers", type=int, help="keep only the first N decoder layers (smoke tests)")
    ap.add_argument("--jobs", type=int, default=4, help="shards written at once")
    ap.add_argument("--shard-gib", type=float, default=4.0)
    ap.add_argument("--kt-layout", choices=KT_LAYOUTS,
                    help="write KT's quantized CPU-expert layout into OUT_DIR instead (needs kt_kernel)")
    ap.add_argument("--kt-threads", type=int, default=8)
    ap.add_argument("--from", dest="source", type=Path, help="with --kt-layout: convert this checkpoint folder's "
                                                             "experts (bf16 or block FP8; RAWINT4: GPTQ-Int4) "
                                                             "instead of random ones")
    a = ap.parse_args(argv)
    if not (a.config_dir / "config.json").is_file():
        print(f"make_random_checkpoint: no config.json in {a.config_dir} -> pass a folder holding one", file=sys.stderr)
        return 65
    try:
        info = (write_rawint4_layout(a.config_dir, a.out_dir, a.layers, source=a.source)
                if a.kt_layout == "RAWINT4"
                else write_kt_layout(a.config_dir, a.out_dir, a.kt_layout, a.kt_threads, a.layers, source=a.source)
                if a.kt_layout
                else write(a.config_dir, a.out_dir, a.format, a.layers, a.jobs, int(a.shard_gib * 2**30)))
    except ValueError as e:
        print(f"make_random_checkpoint: {e}", file=sys.stderr)
        return 64
    except VramkitError as e:
        print(e.line(), file=sys.stderr)
        return int(e.code)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
