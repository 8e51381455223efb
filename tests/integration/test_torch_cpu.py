"""The two checks of the unit tier's code that run the real CPU torch (moved here from tests/unit, issue 17: a torch
import costs a unit worker seconds): the random-checkpoint writer against the layout it declares (issue 12), and
the pinned-copy probe's answer where there is no CUDA."""
from __future__ import annotations

import json

import pytest

from vramkit import catalog
from vramkit.adapters import host
from vramkit.core.model import checkpoint as cl

ROOT = catalog.CONFIG_DIR.parent
CFG = json.loads((ROOT / "config/models/qwen3-coder-30b-a3b-instruct/config.json").read_text())


def test_writer_writes_what_the_layout_says(tmp_path):
    torch = pytest.importorskip("torch")
    import sys

    from safetensors import safe_open
    sys.path.insert(0, str(ROOT / "tools"))
    from make_random_checkpoint import write
    small = tmp_path / "cfg"
    small.mkdir()
    (small / "config.json").write_text(json.dumps(CFG | {"num_experts": 4, "vocab_size": 256}))
    info = write(small, tmp_path / "ck", "fp8", layers=1, jobs=1)
    cfg = json.loads((tmp_path / "ck/config.json").read_text())
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128] and cfg["num_hidden_layers"] == 1
    index = json.loads((tmp_path / "ck/model.safetensors.index.json").read_text())["weight_map"]
    expect = {s.name: s for s in cl.checkpoint_tensors(cfg, "fp8")}
    assert set(index) == set(expect) and info["tensors"] == len(expect)
    dt = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn, "f32": torch.float32}
    with safe_open(str(tmp_path / "ck" / index["lm_head.weight"]), "pt") as f:
        for name in f.keys():
            x = f.get_tensor(name)
            assert tuple(x.shape) == expect[name].shape and x.dtype == dt[expect[name].dtype], name
            assert torch.isfinite(x.float()).all(), name


def test_gptq_writer_writes_what_the_adapter_and_the_rawint4_repack_read(tmp_path):
    """A one-layer GPTQ-Int4 checkpoint of the 30B MoE coder (Qwen's release config): every tensor as the layout says,
    zero points 8 (stored 7), g_idx without act-order; the GPU prompt path's reader assembles its experts in SGLang's
    shapes (vramkit_gpu_prefill.assemble) and the RAWINT4 repack takes it as a symmetric GPTQ checkpoint."""
    torch = pytest.importorskip("torch")
    import sys

    from safetensors import safe_open
    sys.path.insert(0, str(ROOT / "tools"))
    from make_random_checkpoint import write
    from repo_modules import load_module

    from vramkit.core.model import kt_repack
    small = tmp_path / "cfg"
    small.mkdir()
    cfg = json.loads((ROOT / "config/models/qwen3-30b-a3b-gptq-int4/config.json").read_text())
    (small / "config.json").write_text(json.dumps(cfg | {"num_experts": 8, "vocab_size": 256}))
    write(small, tmp_path / "ck", "gptq", layers=1, jobs=1)
    written = json.loads((tmp_path / "ck/config.json").read_text())
    assert written["quantization_config"] == cfg["quantization_config"] and written["torch_dtype"] == "float16"
    expect = {s.name: s for s in cl.checkpoint_tensors(written, "gptq")}
    dt = {"f16": torch.float16, "i32": torch.int32}
    with safe_open(str(tmp_path / "ck/model-00001-of-00001.safetensors"), "pt") as f:
        assert set(f.keys()) == set(expect)
        for name in f.keys():
            x = f.get_tensor(name)
            assert tuple(x.shape) == expect[name].shape and x.dtype == dt[expect[name].dtype], name
        assert (f.get_tensor("model.layers.0.mlp.experts.3.up_proj.qzeros") == 0x77777777).all()
        assert f.get_tensor("model.layers.0.mlp.experts.3.down_proj.g_idx").tolist() == [i // 128 for i in range(768)]
    gp = load_module("services/sglang-kt/kt_compat/vramkit_gpu_prefill.py")
    layer = gp.assemble(gp.Reader(str(tmp_path / "ck")), "model.layers.0.mlp", list(range(8)))
    assert {k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in layer.items()} == gp.shapes(
        2048, 768, 8, 128)
    assert kt_repack.check_gptq(written["quantization_config"], str(tmp_path / "ck")) == 128


def test_pinned_copy_without_cuda_says_why():
    res = host.pinned_copy_speed(1 << 20)
    if not hasattr(res, "reason"):
        pytest.skip("this host has CUDA: the copy test ran (tests/gpu covers it)")
    assert "CUDA" in res.reason or "torch" in res.reason
