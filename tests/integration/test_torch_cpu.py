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


def test_pinned_copy_without_cuda_says_why():
    res = host.pinned_copy_speed(1 << 20)
    if not hasattr(res, "reason"):
        pytest.skip("this host has CUDA: the copy test ran (tests/gpu covers it)")
    assert "CUDA" in res.reason or "torch" in res.reason
